//! Every backend's `parse_line` and the transcript folding: any bytes an
//! agent prints, line by line, never panic, and the text kept is counted.
#![no_main]

use kdd::agent::parse::transcript_of;
use kdd::config::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for format in [Format::Claude, Format::Codex, Format::Gemini, Format::Cursor, Format::Text] {
        let t = transcript_of(format, text.lines());
        assert_eq!(t.chars() as usize, t.text().chars().count());
        let _ = t.answer();
    }
});
