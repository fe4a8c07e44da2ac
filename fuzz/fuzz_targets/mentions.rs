//! `@mention` parsing: never panics, and every mention is written in the
//! text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lower = text.to_lowercase();
    for m in kdd::prompt::mentions::mentions(&text) {
        assert!(lower.contains(&format!("@{m}")), "{m:?}");
    }
});
