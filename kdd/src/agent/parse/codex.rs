//! Codex `exec --json`.
//!
//! Lines: `thread.started` (its `thread_id` is the session id),
//! `turn.started`, `item.started` / `item.updated` / `item.completed` with
//! item types agent_message, reasoning, command_execution, file_change,
//! mcp_tool_call, web_search, todo_list and error (an error *item* is not
//! fatal), `turn.completed` (usage, cumulative over the thread), and the
//! fatal top-level `error` and `turn.failed`. `exec --json` streams no token
//! deltas: each completed agent_message is one delta.

use serde_json::Value;

use super::{Malformed, Outcome, Parsed, json, str_at};

pub fn parse_line(line: &str) -> Result<Vec<Parsed>, Malformed> {
    let Some(v) = json(line)? else { return Ok(vec![]) };
    let mut out = Vec::new();
    match v.get("type").and_then(Value::as_str) {
        Some("thread.started") => {
            if let Some(id) = str_at(&v, &["thread_id"]) {
                out.push(Parsed::SessionId(id.to_string()));
            }
        }
        Some("item.completed") => {
            let item = v.get("item").unwrap_or(&Value::Null);
            match item.get("type").and_then(Value::as_str) {
                Some("agent_message") => {
                    if let Some(t) = item.get("text").and_then(Value::as_str) {
                        out.push(Parsed::Message(t.to_string()));
                    }
                }
                Some("error") => out.push(Parsed::Error {
                    message: str_at(item, &["message"]).unwrap_or("error item").to_string(),
                    fatal: false,
                }),
                Some("command_execution" | "file_change" | "mcp_tool_call" | "web_search") => {
                    out.push(Parsed::Boundary);
                }
                _ => {}
            }
        }
        Some("turn.completed") => {
            out.push(Parsed::Result(Outcome { usage: v.get("usage").cloned(), ..Outcome::default() }))
        }
        Some("turn.failed") => out.push(Parsed::Error {
            message: str_at(&v, &["error", "message"]).unwrap_or("turn failed").to_string(),
            fatal: true,
        }),
        Some("error") => {
            out.push(Parsed::Error { message: str_at(&v, &["message"]).unwrap_or("error").to_string(), fatal: true })
        }
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_started_is_the_session() {
        let l = r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}"#;
        assert_eq!(parse_line(l).unwrap(), vec![Parsed::SessionId("0199a213-81c0-7800-8aa1-bbab2a035a53".into())]);
        assert_eq!(parse_line(r#"{"type":"turn.started"}"#).unwrap(), vec![]);
    }

    #[test]
    fn a_completed_agent_message_is_one_delta_and_in_progress_items_are_not() {
        let done =
            r#"{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Use a join table."}}"#;
        assert_eq!(parse_line(done).unwrap(), vec![Parsed::Message("Use a join table.".into())]);
        let started = r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#;
        assert_eq!(parse_line(started).unwrap(), vec![]);
        let updated = r#"{"type":"item.updated","item":{"id":"item_2","type":"todo_list","items":[{"text":"read","completed":false}]}}"#;
        assert_eq!(parse_line(updated).unwrap(), vec![]);
    }

    #[test]
    fn reasoning_is_ignored_and_tools_are_boundaries() {
        let r = r#"{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Scanning the repo**"}}"#;
        assert_eq!(parse_line(r).unwrap(), vec![]);
        let cmd = r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"Cargo.toml\n","exit_code":0,"status":"completed"}}"#;
        assert_eq!(parse_line(cmd).unwrap(), vec![Parsed::Boundary]);
        let patch = r#"{"type":"item.completed","item":{"id":"item_4","type":"file_change","changes":[{"path":"src/lib.rs","kind":"update"}],"status":"completed"}}"#;
        assert_eq!(parse_line(patch).unwrap(), vec![Parsed::Boundary]);
    }

    #[test]
    fn an_error_item_is_not_fatal_but_error_and_turn_failed_are() {
        let item = r#"{"type":"item.completed","item":{"id":"item_5","type":"error","message":"command timed out"}}"#;
        assert_eq!(
            parse_line(item).unwrap(),
            vec![Parsed::Error { message: "command timed out".into(), fatal: false }]
        );
        let failed = r#"{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}"#;
        assert_eq!(
            parse_line(failed).unwrap(),
            vec![Parsed::Error { message: "stream disconnected before completion".into(), fatal: true }]
        );
        let err = r#"{"type":"error","message":"unexpected status 401 Unauthorized"}"#;
        assert_eq!(
            parse_line(err).unwrap(),
            vec![Parsed::Error { message: "unexpected status 401 Unauthorized".into(), fatal: true }]
        );
    }

    #[test]
    fn turn_completed_carries_usage() {
        let l = r#"{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}"#;
        let o = super::super::only_result(parse_line(l).unwrap());
        assert_eq!(o.usage.unwrap()["output_tokens"], 122);
        assert_eq!(o.text, None);
    }
}
