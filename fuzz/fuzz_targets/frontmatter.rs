//! The Kingdom/kd message-file reader: any file is read or refused; what is
//! read writes back to a file that reads the same.
#![no_main]

use kd_client::frontmatter::{parse_message, write_message};
use kd_proto::types::{Message, MessageKind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(read) = parse_message(text) else { return };
    let mut m = Message::new("t", 1, &read.from, &read.body);
    m.to = read.to.clone();
    m.kind = read.kind.unwrap_or(if read.from == "king" { MessageKind::King } else { MessageKind::Agent });
    m.created_at_ms = read.created_at_ms;
    m.refs = read.refs.clone();
    let Ok(written) = write_message(&m) else { return };
    let again = parse_message(&written).expect("what kd writes, it reads");
    assert_eq!(again.body, read.body);
    assert_eq!(again.from, read.from);
});
