//! Cursor `agent -p --output-format stream-json --stream-partial-output`.
//!
//! Lines: `system`/`init` (session_id); `user` (the prompt echoed);
//! `assistant`, which with partial output comes in several forms — a
//! streamed fragment (`timestamp_ms`), the whole text of the model call that
//! just ended (with `model_call_id`), or the whole response so far (neither)
//! — and is de-duplicated by [`super::Transcript`]; `tool_call`
//! `started`/`completed`; `thinking` deltas (not part of the answer);
//! `result` (final text, session_id). A failed run can end with no result.

use serde_json::Value;

use super::{CursorForm, Malformed, Outcome, Parsed, json, str_at, text_blocks};

pub fn parse_line(line: &str) -> Result<Vec<Parsed>, Malformed> {
    let Some(v) = json(line)? else { return Ok(vec![]) };
    let mut out = Vec::new();
    match v.get("type").and_then(Value::as_str) {
        Some("system") => {
            if let Some(id) = str_at(&v, &["session_id"]) {
                out.push(Parsed::SessionId(id.to_string()));
            }
        }
        Some("assistant") => {
            if let Some(text) = text_blocks(v.get("message").and_then(|m| m.get("content"))) {
                let form = if v.get("model_call_id").is_some() {
                    CursorForm::SegmentEcho
                } else if v.get("timestamp_ms").is_some() {
                    CursorForm::Delta
                } else {
                    CursorForm::Cumulative
                };
                out.push(Parsed::Cursor(text, form));
            }
        }
        Some("tool_call") if str_at(&v, &["subtype"]) == Some("started") => out.push(Parsed::Boundary),
        Some("result") => out.push(Parsed::Result(Outcome {
            text: str_at(&v, &["result"]).map(str::to_string),
            is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            duration_ms: v.get("duration_ms").and_then(Value::as_u64),
            session_id: str_at(&v, &["session_id"]).map(str::to_string),
            ..Outcome::default()
        })),
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_user_and_thinking() {
        let init = r#"{"type":"system","subtype":"init","apiKeySource":"login","cwd":"/repo","session_id":"c6b62c6f-7ead-4fd6-9922-e952131177ff","model":"Claude 4 Sonnet","permissionMode":"default"}"#;
        assert_eq!(parse_line(init).unwrap(), vec![Parsed::SessionId("c6b62c6f-7ead-4fd6-9922-e952131177ff".into())]);
        let user = r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"What about X?"}]},"session_id":"c6b62c6f"}"#;
        assert_eq!(parse_line(user).unwrap(), vec![]);
        let thinking = r#"{"type":"thinking","subtype":"delta","text":"Considering","session_id":"c6b62c6f","timestamp_ms":1774846267400}"#;
        assert_eq!(parse_line(thinking).unwrap(), vec![]);
    }

    #[test]
    fn the_forms_of_assistant_events() {
        let delta = r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Reading"}]},"session_id":"c6b6","timestamp_ms":1774846267524}"#;
        assert_eq!(parse_line(delta).unwrap(), vec![Parsed::Cursor("Reading".into(), CursorForm::Delta)]);
        let echo = r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Reading the file."}]},"session_id":"c6b6","model_call_id":"a594e1","timestamp_ms":1774846267693}"#;
        assert_eq!(
            parse_line(echo).unwrap(),
            vec![Parsed::Cursor("Reading the file.".into(), CursorForm::SegmentEcho)]
        );
        let cumulative = r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Reading the file. It is fine."}]},"session_id":"c6b6"}"#;
        assert_eq!(
            parse_line(cumulative).unwrap(),
            vec![Parsed::Cursor("Reading the file. It is fine.".into(), CursorForm::Cumulative)]
        );
    }

    #[test]
    fn tool_calls_and_result() {
        let started = r#"{"type":"tool_call","subtype":"started","call_id":"toolu_1","tool_call":{"readToolCall":{"args":{"path":"README.md"}}},"session_id":"c6b6"}"#;
        assert_eq!(parse_line(started).unwrap(), vec![Parsed::Boundary]);
        let completed = r#"{"type":"tool_call","subtype":"completed","call_id":"toolu_1","tool_call":{"readToolCall":{"args":{"path":"README.md"},"result":{"success":{"content":"hello","totalLines":1}}}},"session_id":"c6b6"}"#;
        assert_eq!(parse_line(completed).unwrap(), vec![]);
        let result = r#"{"type":"result","subtype":"success","duration_ms":5234,"duration_api_ms":5234,"is_error":false,"result":"It is fine.","session_id":"c6b62c6f-7ead-4fd6-9922-e952131177ff","request_id":"10e11780"}"#;
        let o = super::super::only_result(parse_line(result).unwrap());
        assert_eq!((o.text.as_deref(), o.is_error, o.duration_ms), (Some("It is fine."), false, Some(5234)));
    }
}
