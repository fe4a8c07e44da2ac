//! `format_thread_history`: every body, whatever it holds, verbatim and in
//! order. Bodies are the input split at 0xFF bytes.
#![no_main]

use kd_proto::types::Message;
use kdd::prompt::history::format_thread_history;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let messages: Vec<Message> = data
        .split(|b| *b == 0xff)
        .enumerate()
        .map(|(i, b)| Message::new("t", i as u64 + 1, if i % 2 == 0 { "king" } else { "claude" }, &String::from_utf8_lossy(b)))
        .collect();
    let history = format_thread_history(&messages, "codex", None);
    let mut at = 0;
    for m in &messages {
        let line = format!("{}: {}", m.from, m.body);
        let found = history[at..].find(&line).expect("a body verbatim, in order");
        at += found + line.len();
    }
});
