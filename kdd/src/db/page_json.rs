//! `thread.messages` written as JSON straight from the rows: no
//! [`Message`](kd_proto::types::Message) is built, and the page is written
//! once, by hand, into one buffer in the reader thread, instead of being
//! built as values and serialised by the server. The shape is `Message`'s
//! serde form byte for byte as serde_json writes it, escapes and all (the
//! pages' tests compare the two; a property test compares the strings).
//!
//! Strings are escaped eight bytes at a time: a word with no control byte,
//! no `"` and no `\` is copied as it is, and clean runs are copied with one
//! append. serde_json looks each byte up in a table.

use std::borrow::Cow;
use std::io;

use kd_proto::types::{MessageKind, Purpose, RouteType, RunMeta};
use serde::Serialize;

/// A list column (`["all"]`), read without copying what needs no unescaping;
/// the two most rows hold are known without parsing.
pub(crate) type List<'a> = Vec<Cow<'a, str>>;

pub(crate) fn list_of(text: &str) -> List<'_> {
    match text {
        "[]" => Vec::new(),
        r#"["all"]"# => vec![Cow::Borrowed("all")],
        _ => serde_json::from_str(text).unwrap_or_default(),
    }
}

/// One row in `Message`'s serde form, borrowed from the row.
pub(crate) struct RowJson<'a> {
    pub(crate) thread: &'a str,
    pub(crate) seq: u64,
    pub(crate) from: &'a str,
    pub(crate) to: List<'a>,
    pub(crate) cc: List<'a>,
    pub(crate) reply_to: Option<u64>,
    pub(crate) kind: MessageKind,
    pub(crate) body: &'a str,
    pub(crate) round: Option<u32>,
    pub(crate) created_at_ms: i64,
    pub(crate) run: Option<RunMeta>,
    pub(crate) replaces: Option<u64>,
    pub(crate) refs: List<'a>,
    pub(crate) route: Option<RouteType>,
    pub(crate) purpose: Option<Purpose>,
}

impl RowJson<'_> {
    /// Appends the row to `out` as serde_json writes `Message`: its fields
    /// in order, `null` for a missing one, the last four left out when
    /// empty. The enums and `run` go through serde_json itself.
    pub(crate) fn write(&self, out: &mut String) -> serde_json::Result<()> {
        out.push_str(r#"{"thread":"#);
        string(out, self.thread);
        out.push_str(r#","seq":"#);
        number(out, self.seq);
        out.push_str(r#","from":"#);
        string(out, self.from);
        out.push_str(r#","to":"#);
        list(out, &self.to);
        out.push_str(r#","cc":"#);
        list(out, &self.cc);
        out.push_str(r#","reply_to":"#);
        optional(out, self.reply_to);
        out.push_str(r#","kind":"#);
        serde(out, &self.kind)?;
        out.push_str(r#","body":"#);
        string(out, self.body);
        out.push_str(r#","round":"#);
        optional(out, self.round);
        out.push_str(r#","created_at_ms":"#);
        number(out, self.created_at_ms);
        out.push_str(r#","run":"#);
        match &self.run {
            Some(run) => serde(out, run)?,
            None => out.push_str("null"),
        }
        if let Some(replaces) = self.replaces {
            out.push_str(r#","replaces":"#);
            number(out, replaces);
        }
        if !self.refs.is_empty() {
            out.push_str(r#","refs":"#);
            list(out, &self.refs);
        }
        if let Some(route) = &self.route {
            out.push_str(r#","route":"#);
            serde(out, route)?;
        }
        if let Some(purpose) = &self.purpose {
            out.push_str(r#","purpose":"#);
            serde(out, purpose)?;
        }
        out.push('}');
        Ok(())
    }
}

fn number(out: &mut String, n: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(n));
}

fn optional(out: &mut String, n: Option<impl itoa::Integer>) {
    match n {
        Some(n) => number(out, n),
        None => out.push_str("null"),
    }
}

fn list(out: &mut String, items: &[Cow<'_, str>]) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        string(out, item);
    }
    out.push(']');
}

/// `value` as serde_json writes it.
fn serde(out: &mut String, value: &impl Serialize) -> serde_json::Result<()> {
    serde_json::to_writer(Utf8(out), value)
}

/// Takes what serde_json writes into a `String`. serde_json writes its
/// output in whole pieces of UTF-8 (a string's unescaped runs end before
/// an ASCII byte); a piece that is not would fail the page, not garble it.
struct Utf8<'a>(&'a mut String);

impl io::Write for Utf8<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.push_str(std::str::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);

/// The high bit of each zero byte of `v`; exact up to the first zero byte
/// (a borrow may flag bytes after it).
fn zero_bytes(v: u64) -> u64 {
    v.wrapping_sub(ONES) & !v & HIGH
}

/// The high bit of each byte of `w` that JSON escapes (below 0x20, `"`,
/// `\`); exact up to the first.
fn escaped_bytes(w: u64) -> u64 {
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    control | zero_bytes(w ^ (ONES * u64::from(b'"'))) | zero_bytes(w ^ (ONES * u64::from(b'\\')))
}

/// Where the first byte JSON escapes is in `bytes`, from `from` on.
fn next_escaped(bytes: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let (words, tail) = rest.as_chunks::<8>();
    for (i, word) in words.iter().enumerate() {
        // Little-endian: the first byte in memory is the lowest.
        let hits = escaped_bytes(u64::from_le_bytes(*word));
        if hits != 0 {
            return Some(from + i * 8 + (hits.trailing_zeros() / 8) as usize);
        }
    }
    let at = from + words.len() * 8;
    tail.iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\').map(|p| at + p)
}

/// `s` as a JSON string, as serde_json writes it: `"` and `\` escaped,
/// `\b \f \n \r \t`, other control bytes as `\u00XX` (lowercase), nothing
/// else (not `/`, not DEL, not beyond ASCII).
pub(crate) fn string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(at) = next_escaped(bytes, start) {
        // `at` is an ASCII byte, so both slices end on a character boundary.
        out.push_str(s.get(start..at).unwrap_or_default());
        let b = bytes.get(at).copied().unwrap_or_default();
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        start = at + 1;
    }
    out.push_str(s.get(start..).unwrap_or_default());
    out.push('"');
}

#[cfg(test)]
mod tests {
    use kd_proto::types::Message;
    use proptest::prelude::*;

    use super::*;

    /// Strings heavy in what JSON escapes, around the eight-byte words.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[\\x00-\\x1f\"\\\\/a-z é漢🦀\\x7f\\u{80}-\\u{7ff}]{0,40}",
            "[a-z\"\\\\\\n]{0,3}[ -~]{6,20}[\\x00-\\x1f\"\\\\]?[ -~é]{0,20}",
        ]
    }

    fn written(s: &str) -> String {
        let mut out = String::new();
        string(&mut out, s);
        out
    }

    /// A row borrowed from `m`, as a page writer makes one from its row.
    fn row_of(m: &Message) -> RowJson<'_> {
        fn list(v: &[String]) -> List<'_> {
            v.iter().map(|s| Cow::Borrowed(s.as_str())).collect()
        }
        RowJson {
            thread: &m.thread,
            seq: m.seq,
            from: &m.from,
            to: list(&m.to),
            cc: list(&m.cc),
            reply_to: m.reply_to,
            kind: m.kind,
            body: &m.body,
            round: m.round,
            created_at_ms: m.created_at_ms,
            run: m.run.clone(),
            replaces: m.replaces,
            refs: list(&m.refs),
            route: m.route,
            purpose: m.purpose,
        }
    }

    #[test]
    fn every_byte_serde_json_escapes_is_escaped_as_it_does() {
        for b in 0..=0x7f_u8 {
            let s = format!("ab{}cdefghij{}", char::from(b), char::from(b));
            assert_eq!(written(&s), serde_json::to_string(&s).unwrap(), "byte {b:#x}");
        }
        for s in ["", "\"", "\\", "é", "12345678\n", "1234567\u{7}", "漢\u{1f}🦀\"", "a/b\u{7f}\u{80}"] {
            assert_eq!(written(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    fn message() -> impl Strategy<Value = Message> {
        let kinds = vec![
            MessageKind::King,
            MessageKind::Agent,
            MessageKind::System,
            MessageKind::Error,
            MessageKind::Interrupted,
        ];
        let runs = prop_oneof![
            Just(None),
            (any::<Option<u64>>(), any::<Option<f64>>(), any::<Option<String>>()).prop_map(|(d, c, m)| Some(RunMeta {
                duration_ms: d,
                cost_usd: c,
                model: m,
                usage: Some(serde_json::json!({"input_tokens": 3})),
                ..RunMeta::default()
            })),
        ];
        (
            (text(), any::<u64>(), text(), prop::collection::vec(text(), 0..3), prop::collection::vec(text(), 0..2)),
            (any::<Option<u64>>(), prop::sample::select(kinds), text(), any::<Option<u32>>(), any::<i64>()),
            (runs, any::<Option<u64>>(), prop::collection::vec(text(), 0..2)),
            (
                prop::option::of(prop::sample::select(vec![RouteType::PointToPoint, RouteType::Emergency])),
                prop::option::of(prop::sample::select(vec![Purpose::Ballot, Purpose::Summary])),
            ),
        )
            .prop_map(
                |(
                    (thread, seq, from, to, cc),
                    (reply_to, kind, body, round, created_at_ms),
                    (run, replaces, refs),
                    (route, purpose),
                )| {
                    Message {
                        thread,
                        seq,
                        from,
                        to,
                        cc,
                        reply_to,
                        kind,
                        body,
                        round,
                        created_at_ms,
                        run,
                        replaces,
                        refs,
                        route,
                        purpose,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_string_is_written_as_serde_json_writes_it(s in text()) {
            prop_assert_eq!(written(&s), serde_json::to_string(&s).unwrap());
        }

        #[test]
        fn a_row_is_written_as_serde_json_writes_the_message(m in message()) {
            let mut out = String::new();
            row_of(&m).write(&mut out).unwrap();
            prop_assert_eq!(out, serde_json::to_string(&m).unwrap());
        }
    }
}
