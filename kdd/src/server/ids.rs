//! JSON-RPC ids jsonrpsee cannot take as they come.
//!
//! JSON-RPC 2.0 allows any string, number or null as an id. jsonrpsee
//! represents only strings, null and numbers that fit a `u64`; a call with
//! any other id (a negative integer, `1.5`, `{}`, `true`) would parse as a
//! notification — not executed, not answered. Before jsonrpsee sees a
//! request, [`fix_request`] gives such ids a string stand-in:
//!
//! - a negative integer (or a string id that starts like a stand-in) is
//!   carried as `"\u0000kd:<its JSON>"`: the call is made, and
//!   [`restore_response`] puts the original id back in the answer;
//! - anything else (a fraction, an object, an array, a boolean, an integer
//!   past 64 bits, a number no float holds such as `1e400`, a value nested
//!   past any parser's depth) becomes [`INVALID`], which the RPC middleware
//!   answers with -32600, and the answer's id becomes `null` (the id could
//!   not be used, as the spec says).
//!
//! Both work on whole request and response bodies, as HTTP carries them
//! and as the WebSocket filter ([`super::frames`]) reassembles them. A
//! request is rewritten member by member with every value but the id left
//! as raw text: skipping a value takes no recursion in serde_json, so an
//! id (or params) nested a million deep is carried, not refused unanswered.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// Starts the stand-in of an id kd carries for the client; the rest is the
/// id's JSON text.
pub const CARRIED: &str = "\u{0}kd:";
/// The stand-in of an id that is not a valid JSON-RPC id.
pub const INVALID: &str = "\u{0}kd!";
/// What every stand-in starts with, as it appears in JSON text.
const STAND_IN_JSON: &str = "\"\\u0000kd";

/// The id of one request, left unparsed.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
}

/// Whether jsonrpsee takes this id as it is.
fn usable(id: &RawValue) -> bool {
    let text = id.get();
    match text.as_bytes().first() {
        Some(b'"') => !text.starts_with(STAND_IN_JSON),
        Some(b'n') => true,
        Some(b'0'..=b'9') => text.parse::<u64>().is_ok(),
        _ => false,
    }
}

/// The stand-in for an id that is not usable as it is. One that does not
/// even parse as a value (`1e400`, nested too deep) is invalid.
fn stand_in(id: &RawValue) -> String {
    match serde_json::from_str::<Value>(id.get()) {
        Ok(Value::Number(n)) if n.is_i64() => format!("{CARRIED}{n}"),
        Ok(Value::String(s)) => format!("{CARRIED}{}", Value::String(s)),
        _ => INVALID.to_string(),
    }
}

/// A request object's members in order, each value left as raw text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Members, D::Error> {
        struct Of;
        impl<'de> Visitor<'de> for Of {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Of)
    }
}

impl Serialize for Members {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Gives an unusable id its stand-in; how many were replaced.
fn fix_members(members: &mut Members) -> Option<usize> {
    let mut replaced = 0;
    for (key, value) in &mut members.0 {
        if key == "id" && !usable(value) {
            *value = serde_json::value::to_raw_value(&stand_in(value)).ok()?;
            replaced += 1;
        }
    }
    Some(replaced)
}

/// The request with every unusable id replaced by its stand-in, and how
/// many were; `None` when nothing needs replacing (the common case, found
/// without building the request) or the body is not JSON (jsonrpsee will
/// say so).
pub fn fix_request(body: &[u8]) -> Option<(Vec<u8>, usize)> {
    let text = body.trim_ascii_start();
    let needs_fix = match text.first() {
        Some(b'{') => serde_json::from_slice::<Probe<'_>>(text).ok()?.id.is_some_and(|id| !usable(id)),
        Some(b'[') => {
            serde_json::from_slice::<Vec<Probe<'_>>>(text).ok()?.iter().any(|p| p.id.is_some_and(|id| !usable(id)))
        }
        _ => false,
    };
    if !needs_fix {
        return None;
    }
    if text.first() == Some(&b'{') {
        let mut members: Members = serde_json::from_slice(text).ok()?;
        let replaced = fix_members(&mut members)?;
        return Some((serde_json::to_vec(&members).ok()?, replaced));
    }
    // A batch: each entry that is an object is fixed, the rest left as they are.
    let entries: Vec<&RawValue> = serde_json::from_slice(text).ok()?;
    let mut replaced = 0;
    let mut fixed = Vec::with_capacity(entries.len());
    for entry in entries {
        match serde_json::from_str::<Members>(entry.get()) {
            Ok(mut members) => {
                replaced += fix_members(&mut members)?;
                fixed.push(serde_json::value::to_raw_value(&members).ok()?);
            }
            Err(_) => fixed.push(entry.to_owned()),
        }
    }
    Some((serde_json::to_vec(&fixed).ok()?, replaced))
}

/// The response with every stand-in id put back (the carried id, or null
/// for an invalid one), and how many there were; `None` when it holds none.
pub fn restore_response(body: &[u8]) -> Option<(Vec<u8>, usize)> {
    const KEY: &[u8] = b"\"id\":";
    let pattern = [KEY, STAND_IN_JSON.as_bytes()].concat();
    let mut out = Vec::new();
    let mut last = 0;
    let mut restored = 0;
    let mut at = 0;
    while let Some(found) = find(&body[at..], &pattern) {
        let start = at + found + KEY.len();
        let mut strings = serde_json::Deserializer::from_slice(&body[start..]).into_iter::<String>();
        let Some(Ok(stand_in)) = strings.next() else { break };
        let end = start + strings.byte_offset();
        let original = match stand_in.strip_prefix(CARRIED) {
            Some(json) => json,
            None if stand_in == INVALID => "null",
            None => {
                at = end;
                continue;
            }
        };
        out.extend_from_slice(&body[last..start]);
        out.extend_from_slice(original.as_bytes());
        last = end;
        at = end;
        restored += 1;
    }
    if restored == 0 {
        return None;
    }
    out.extend_from_slice(&body[last..]);
    Some((out, restored))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(body: &str) -> Option<(String, usize)> {
        fix_request(body.as_bytes()).map(|(b, n)| (String::from_utf8(b).unwrap_or_default(), n))
    }

    fn restored(body: &str) -> Option<(String, usize)> {
        restore_response(body.as_bytes()).map(|(b, n)| (String::from_utf8(b).unwrap_or_default(), n))
    }

    #[test]
    fn usable_ids_are_left_alone_without_building_the_request() {
        for id in ["1", "0", "18446744073709551615", "\"x\"", "null"] {
            assert_eq!(fixed(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#)), None, "{id}");
        }
        assert_eq!(fixed(r#"{"jsonrpc":"2.0","method":"notify"}"#), None);
        assert_eq!(fixed(r#"[{"id":1,"method":"a"},{"id":"b","method":"b"}]"#), None);
        assert_eq!(fixed("not json"), None);
    }

    #[test]
    fn negative_and_look_alike_ids_are_carried_and_come_back() {
        for id in ["-1", "-9223372036854775808", r#""\u0000kd:7""#] {
            let (body, n) = fixed(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#)).unwrap();
            assert_eq!(n, 1);
            let v: Value = serde_json::from_str(&body).unwrap();
            let stand_in = v["id"].as_str().unwrap();
            assert!(stand_in.starts_with(CARRIED), "{stand_in:?}");
            let answer = serde_json::json!({"jsonrpc": "2.0", "id": stand_in, "result": 1}).to_string();
            let (back, n) = restored(&answer).unwrap();
            assert_eq!(n, 1);
            let back: Value = serde_json::from_str(&back).unwrap();
            assert_eq!(back["id"], serde_json::from_str::<Value>(id).unwrap());
        }
    }

    #[test]
    fn invalid_ids_become_the_invalid_stand_in_and_null() {
        for id in ["1.5", "{}", "[1]", "true", "18446744073709551616", "-9223372036854775809", "1e3"] {
            let (body, _) = fixed(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#)).unwrap();
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["id"], INVALID, "{id}");
        }
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": INVALID, "error": {"code": -32600}}).to_string();
        let back: Value = serde_json::from_str(&restored(&answer).unwrap().0).unwrap();
        assert_eq!(back, serde_json::json!({"error": {"code": -32600}, "id": null, "jsonrpc": "2.0"}));
    }

    #[test]
    fn ids_no_parser_holds_are_invalid_whatever_their_depth() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let params = format!(r#"{{"x":{}}}"#, deep(100_000));
        for id in ["1e400".to_string(), "-1e400".into(), deep(129), deep(1_000_000)] {
            let request = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m","params":{params}}}"#);
            let (body, n) = fixed(&request).unwrap_or_else(|| panic!("{}", &id[..8.min(id.len())]));
            assert_eq!(n, 1);
            // Everything but the id is as it was, in order.
            let expected = format!(r#"{{"jsonrpc":"2.0","id":"\u0000kd!","method":"m","params":{params}}}"#);
            assert!(body == expected, "{}", &body[..80]);
        }
        let (body, n) = fixed(&format!(r#"[{},{{"id":1e400}},{{"id":-1}}]"#, deep(1000))).unwrap();
        assert_eq!(n, 2);
        assert!(
            body.starts_with(&format!("[{}", deep(1000)))
                && body.ends_with(r#"{"id":"\u0000kd!"},{"id":"\u0000kd:-1"}]"#)
        );
    }

    #[test]
    fn a_batch_is_fixed_entry_by_entry() {
        let (body, n) = fixed(r#"[{"id":-2,"method":"a"},{"id":3,"method":"b"},{"id":true,"method":"c"}]"#).unwrap();
        assert_eq!(n, 2);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v[1]["id"], 3);
        let answers = serde_json::json!([
            {"jsonrpc": "2.0", "id": v[0]["id"], "result": 1},
            {"jsonrpc": "2.0", "id": 3, "result": 2},
            {"jsonrpc": "2.0", "id": v[2]["id"], "error": {"code": -32600}},
        ]);
        let (back, n) = restored(&answers.to_string()).unwrap();
        assert_eq!(n, 2);
        let back: Value = serde_json::from_str(&back).unwrap();
        assert_eq!(
            (back[0]["id"].clone(), back[1]["id"].clone(), back[2]["id"].clone()),
            (Value::from(-2), Value::from(3), Value::Null)
        );
    }

    #[test]
    fn text_that_merely_mentions_a_stand_in_is_not_touched() {
        // Inside a string, quotes are escaped: the pattern cannot occur.
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": "\"id\":\"\u{0}kd:5\""}).to_string();
        assert_eq!(restored(&body), None);
    }
}
