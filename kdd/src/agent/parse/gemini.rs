//! Gemini `-p PROMPT --output-format stream-json`.
//!
//! Lines: `init` (session_id, model); `message` with role assistant and
//! `delta: true` (append; the user's own message is echoed with role
//! user); `tool_use`, `tool_result`; `error` with severity `warning` (kept)
//! or `error` (fatal); `result` with `status` success or error and `stats`.

use serde_json::Value;

use super::{Malformed, Outcome, Parsed, json, str_at};

pub fn parse_line(line: &str) -> Result<Vec<Parsed>, Malformed> {
    let Some(v) = json(line)? else { return Ok(vec![]) };
    let mut out = Vec::new();
    match v.get("type").and_then(Value::as_str) {
        Some("init") => {
            if let Some(id) = str_at(&v, &["session_id"]) {
                out.push(Parsed::SessionId(id.to_string()));
            }
        }
        Some("message") if str_at(&v, &["role"]) == Some("assistant") => {
            if let Some(text) = v.get("content").and_then(Value::as_str) {
                if v.get("delta").and_then(Value::as_bool) == Some(true) {
                    out.push(Parsed::Delta(text.to_string()));
                } else {
                    out.push(Parsed::Message(text.to_string()));
                }
            }
        }
        Some("tool_use") => out.push(Parsed::Boundary),
        Some("error") => out.push(Parsed::Error {
            message: str_at(&v, &["message"]).unwrap_or("error").to_string(),
            fatal: str_at(&v, &["severity"]) != Some("warning"),
        }),
        Some("result") => {
            let failed = str_at(&v, &["status"]) == Some("error");
            if failed {
                out.push(Parsed::Error {
                    message: str_at(&v, &["error", "message"]).unwrap_or("the run failed").to_string(),
                    fatal: true,
                });
            }
            out.push(Parsed::Result(Outcome {
                is_error: failed,
                usage: v.get("stats").cloned(),
                ..Outcome::default()
            }));
        }
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_and_messages() {
        let init = r#"{"type":"init","timestamp":"2026-01-15T10:00:00.000Z","session_id":"9d5e0c3a-2f41-4d8e-b6a7-1c2d3e4f5a6b","model":"gemini-2.5-pro"}"#;
        assert_eq!(parse_line(init).unwrap(), vec![Parsed::SessionId("9d5e0c3a-2f41-4d8e-b6a7-1c2d3e4f5a6b".into())]);
        let user =
            r#"{"type":"message","timestamp":"2026-01-15T10:00:00.100Z","role":"user","content":"What about X?"}"#;
        assert_eq!(parse_line(user).unwrap(), vec![]);
        let delta = r#"{"type":"message","timestamp":"2026-01-15T10:00:01.000Z","role":"assistant","content":"Use a ","delta":true}"#;
        assert_eq!(parse_line(delta).unwrap(), vec![Parsed::Delta("Use a ".into())]);
        let whole =
            r#"{"type":"message","timestamp":"2026-01-15T10:00:01.000Z","role":"assistant","content":"Use a view."}"#;
        assert_eq!(parse_line(whole).unwrap(), vec![Parsed::Message("Use a view.".into())]);
    }

    #[test]
    fn tools_are_boundaries() {
        let tool = r#"{"type":"tool_use","timestamp":"2026-01-15T10:00:02.000Z","tool_name":"read_file","tool_id":"read_file-1","parameters":{"absolute_path":"/repo/a.sql"}}"#;
        assert_eq!(parse_line(tool).unwrap(), vec![Parsed::Boundary]);
        let result = r#"{"type":"tool_result","timestamp":"2026-01-15T10:00:02.500Z","tool_id":"read_file-1","status":"success","output":"CREATE TABLE"}"#;
        assert_eq!(parse_line(result).unwrap(), vec![]);
    }

    #[test]
    fn a_warning_is_not_fatal_but_an_error_is() {
        let warn = r#"{"type":"error","timestamp":"2026-01-15T10:00:03.000Z","severity":"warning","message":"Loop detected, stopping."}"#;
        assert_eq!(
            parse_line(warn).unwrap(),
            vec![Parsed::Error { message: "Loop detected, stopping.".into(), fatal: false }]
        );
        let err =
            r#"{"type":"error","timestamp":"2026-01-15T10:00:03.000Z","severity":"error","message":"Quota exceeded"}"#;
        assert_eq!(parse_line(err).unwrap(), vec![Parsed::Error { message: "Quota exceeded".into(), fatal: true }]);
    }

    #[test]
    fn result_success_and_error() {
        let ok = r#"{"type":"result","timestamp":"2026-01-15T10:00:04.000Z","status":"success","stats":{"total_tokens":180,"input_tokens":150,"output_tokens":30,"cached":0,"input":150,"duration_ms":3800,"tool_calls":1}}"#;
        let o = super::super::only_result(parse_line(ok).unwrap());
        assert!(!o.is_error);
        assert_eq!(o.usage.unwrap()["output_tokens"], 30);
        let failed = r#"{"type":"result","timestamp":"2026-01-15T10:00:04.000Z","status":"error","error":{"type":"FatalTurnLimitedError","message":"Reached max session turns"},"stats":{"total_tokens":0}}"#;
        let parsed = parse_line(failed).unwrap();
        assert_eq!(parsed[0], Parsed::Error { message: "Reached max session turns".into(), fatal: true });
        assert!(matches!(&parsed[1], Parsed::Result(o) if o.is_error));
    }
}
