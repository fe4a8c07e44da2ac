//! `.kd/config.json` (and Kingdom's config): any text is read or refused
//! with an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = kdd::config::raw::parse(text, std::path::Path::new("config.json"));
    }
});
