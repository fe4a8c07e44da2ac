//! Claude Code `-p --output-format stream-json --verbose --include-partial-messages`.
//!
//! Lines: `system`/`init` (session_id); `stream_event` wrapping API stream
//! events, of which `content_block_delta` with a `text_delta` is a token;
//! `assistant` (one content block per line, repeating streamed text);
//! `user` (tool results); `result` (final `result`, `session_id`,
//! `total_cost_usd`, `usage`, `is_error`). An API error is a `result` with
//! `subtype: "success"` **and** `is_error: true`: failure is judged by
//! `is_error` and the exit status, never by `subtype`. Before that result,
//! Claude Code writes the error as a *synthetic* `assistant` message
//! (`model: "<synthetic>"`, `isApiErrorMessage`, an `error` code): it is
//! the run's failure, never answer text.

use serde_json::Value;

use super::{Malformed, Outcome, Parsed, json, str_at, text_blocks, without_kds_tools};

pub fn parse_line(line: &str) -> Result<Vec<Parsed>, Malformed> {
    let Some(v) = json(line)? else { return Ok(vec![]) };
    let mut out = Vec::new();
    match v.get("type").and_then(Value::as_str) {
        Some("system") => {
            if let Some(id) = str_at(&v, &["session_id"]) {
                out.push(Parsed::SessionId(id.to_string()));
            }
            if let Some(status) = kd_server_not_connected(&v) {
                out.push(Parsed::Activity(without_kds_tools(&status)));
            }
        }
        Some("stream_event") => {
            let event = v.get("event").unwrap_or(&Value::Null);
            match event.get("type").and_then(Value::as_str) {
                Some("content_block_delta") if str_at(event, &["delta", "type"]) == Some("text_delta") => {
                    if let Some(t) = str_at(event, &["delta", "text"]) {
                        out.push(Parsed::Delta(t.to_string()));
                    }
                }
                Some("content_block_start") if str_at(event, &["content_block", "type"]) == Some("tool_use") => {
                    out.push(Parsed::Boundary);
                }
                _ => {}
            }
        }
        Some("assistant") if is_synthetic(&v) => {
            let content = v.get("message").and_then(|m| m.get("content"));
            if let Some(text) = text_blocks(content).filter(|_| is_api_error(&v)) {
                out.push(Parsed::Error { message: text.trim().to_string(), fatal: true });
            }
        }
        Some("assistant") => {
            let content = v.get("message").and_then(|m| m.get("content"));
            if let Some(text) = text_blocks(content) {
                out.push(Parsed::Block(text));
            }
            let tool = content
                .and_then(Value::as_array)
                .is_some_and(|c| c.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use")));
            if tool {
                out.push(Parsed::Boundary);
            }
        }
        Some("user") => out.push(Parsed::Boundary),
        Some("result") => {
            let session_id = str_at(&v, &["session_id"]).map(str::to_string);
            out.push(Parsed::Result(Outcome {
                text: str_at(&v, &["result"]).map(str::to_string),
                is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                cost_usd: v.get("total_cost_usd").and_then(Value::as_f64),
                usage: v.get("usage").cloned(),
                duration_ms: v.get("duration_ms").and_then(Value::as_u64),
                session_id,
                denials: denials(&v),
            }));
        }
        _ => {}
    }
    Ok(out)
}

/// The status of kd's MCP server in an `init` line, when claude did not
/// connect it (`pending`: it answered after claude's ~2 s wait; `failed`).
fn kd_server_not_connected(v: &Value) -> Option<String> {
    let servers = v.get("mcp_servers")?.as_array()?;
    let kd = servers.iter().find(|s| s.get("name").and_then(Value::as_str) == Some("kd"))?;
    let status = kd.get("status").and_then(Value::as_str).unwrap_or("unknown");
    (status != "connected").then(|| status.chars().take(40).collect())
}

/// Most denials kept of a result, and characters of each.
const MAX_DENIALS: usize = 32;
const MAX_DENIAL: usize = 300;

/// `permission_denials` (`[{tool_name, tool_use_id, tool_input}]`): what
/// claude refused silently, e.g. a write outside its working directory
/// under `acceptEdits`, as `TOOL TARGET` (the file, else the command).
fn denials(v: &Value) -> Vec<String> {
    let Some(list) = v.get("permission_denials").and_then(Value::as_array) else { return Vec::new() };
    list.iter()
        .take(MAX_DENIALS)
        .map(|d| {
            let tool = str_at(d, &["tool_name"]).unwrap_or("a tool");
            let input = d.get("tool_input");
            let target = ["file_path", "notebook_path", "path", "command", "url"]
                .iter()
                .find_map(|k| input.and_then(|i| i.get(*k)).and_then(Value::as_str));
            let said = match target {
                Some(t) => format!("{tool} {t}"),
                None => tool.to_string(),
            };
            said.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(MAX_DENIAL).collect()
        })
        .collect()
}

/// A message Claude Code made up itself rather than the model's words.
fn is_synthetic(v: &Value) -> bool {
    str_at(v, &["message", "model"]) == Some("<synthetic>") || is_api_error(v)
}

fn is_api_error(v: &Value) -> bool {
    v.get("isApiErrorMessage").and_then(Value::as_bool).unwrap_or(false) || v.get("error").is_some_and(Value::is_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: &str = r#"{"type":"system","subtype":"init","cwd":"/repo","session_id":"8f1c2a9e-4b7d-4e21-9a3b-5d6e7f8a9b0c","tools":["Read","Bash"],"mcp_servers":[],"model":"claude-sonnet-4-5","permissionMode":"default","apiKeySource":"none"}"#;
    const DELTA: &str = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Normalize "}},"session_id":"8f1c2a9e","parent_tool_use_id":null,"uuid":"0b4e"}"#;
    const INPUT_JSON_DELTA: &str = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}},"session_id":"8f1c2a9e"}"#;
    const MESSAGE_START: &str = r#"{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":12,"output_tokens":1}}},"session_id":"8f1c2a9e"}"#;
    const TOOL_START: &str = r#"{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"Read","input":{}}},"session_id":"8f1c2a9e"}"#;
    const ASSISTANT: &str = r#"{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Normalize the schema."}],"stop_reason":null,"usage":{"input_tokens":12,"output_tokens":6}},"parent_tool_use_id":null,"session_id":"8f1c2a9e"}"#;
    const ASSISTANT_TOOL: &str = r#"{"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"Read","input":{"file_path":"schema.sql"}}]},"session_id":"8f1c2a9e"}"#;
    const USER_TOOL_RESULT: &str = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"CREATE TABLE t (id INTEGER);"}]},"parent_tool_use_id":null,"session_id":"8f1c2a9e"}"#;
    const RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":2145,"duration_api_ms":1980,"num_turns":1,"result":"Normalize the schema.","session_id":"8f1c2a9e-4b7d-4e21-9a3b-5d6e7f8a9b0c","total_cost_usd":0.0123,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":6}}"#;
    const API_ERROR: &str = r#"{"type":"result","subtype":"success","is_error":true,"duration_ms":310,"num_turns":1,"result":"API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}","session_id":"8f1c2a9e","total_cost_usd":0}"#;

    #[test]
    fn init_gives_the_session_id() {
        assert_eq!(parse_line(INIT).unwrap(), vec![Parsed::SessionId("8f1c2a9e-4b7d-4e21-9a3b-5d6e7f8a9b0c".into())]);
    }

    #[test]
    fn kds_mcp_server_not_connected_at_init_is_said() {
        // As claude 2.1.197 wrote it when kd mcp answered after its wait.
        let late =
            r#"{"type":"system","subtype":"init","session_id":"s","mcp_servers":[{"name":"kd","status":"pending"}]}"#;
        assert_eq!(
            parse_line(late).unwrap()[1],
            Parsed::Activity("without kd's tools: its MCP server kd is pending (kd doctor checks it)".into())
        );
        let failed =
            r#"{"type":"system","subtype":"init","session_id":"s","mcp_servers":[{"name":"kd","status":"failed"}]}"#;
        assert!(matches!(&parse_line(failed).unwrap()[1], Parsed::Activity(a) if a.contains("is failed")));
        let fine = r#"{"type":"system","subtype":"init","session_id":"s","mcp_servers":[{"name":"kd","status":"connected"},{"name":"other","status":"failed"}]}"#;
        assert_eq!(parse_line(fine).unwrap().len(), 1, "kd's connected; another server is not kd's business");
    }

    #[test]
    fn text_deltas_are_tokens_and_other_stream_events_are_ignored() {
        assert_eq!(parse_line(DELTA).unwrap(), vec![Parsed::Delta("Normalize ".into())]);
        assert_eq!(parse_line(INPUT_JSON_DELTA).unwrap(), vec![]);
        assert_eq!(parse_line(MESSAGE_START).unwrap(), vec![]);
        assert_eq!(parse_line(TOOL_START).unwrap(), vec![Parsed::Boundary]);
    }

    #[test]
    fn assistant_lines_are_blocks_and_tool_use_is_a_boundary() {
        assert_eq!(parse_line(ASSISTANT).unwrap(), vec![Parsed::Block("Normalize the schema.".into())]);
        assert_eq!(parse_line(ASSISTANT_TOOL).unwrap(), vec![Parsed::Boundary]);
        assert_eq!(parse_line(USER_TOOL_RESULT).unwrap(), vec![Parsed::Boundary]);
    }

    #[test]
    fn a_result_says_what_claude_refused_silently() {
        let line = r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","session_id":"s","permission_denials":[{"tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"/repo/x.rs","content":"x"}},{"tool_name":"Bash","tool_use_id":"toolu_2","tool_input":{"command":"touch  /tmp/y"}},{"tool_name":"Odd"}]}"#;
        let o = super::super::only_result(parse_line(line).unwrap());
        assert_eq!(o.denials, ["Write /repo/x.rs", "Bash touch /tmp/y", "Odd"]);
        assert!(super::super::only_result(parse_line(RESULT).unwrap()).denials.is_empty());
    }

    #[test]
    fn result_carries_text_cost_usage_and_session() {
        let o = super::super::only_result(parse_line(RESULT).unwrap());
        assert_eq!(o.text.as_deref(), Some("Normalize the schema."));
        assert!(!o.is_error);
        assert_eq!(o.cost_usd, Some(0.0123));
        assert_eq!(o.usage.as_ref().and_then(|u| u["output_tokens"].as_u64()), Some(6));
        assert_eq!(o.duration_ms, Some(2145));
        assert_eq!(o.session_id.as_deref(), Some("8f1c2a9e-4b7d-4e21-9a3b-5d6e7f8a9b0c"));
    }

    #[test]
    fn an_api_error_is_judged_by_is_error_not_subtype() {
        let o = super::super::only_result(parse_line(API_ERROR).unwrap());
        assert!(o.is_error);
        assert!(o.text.unwrap().contains("Overloaded"));
    }

    const API_ERROR_MESSAGE: &str = r#"{"type":"assistant","message":{"id":"7e1c","model":"<synthetic>","role":"assistant","type":"message","content":[{"type":"text","text":"API Error: 400 {\"type\":\"error\"}"}],"stop_reason":"stop_sequence"},"parent_tool_use_id":null,"session_id":"8f1c2a9e","error":"invalid_request","isApiErrorMessage":true}"#;
    const SYNTHETIC_NOTE: &str = r#"{"type":"assistant","message":{"model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"No response requested."}]},"session_id":"8f1c2a9e"}"#;

    #[test]
    fn a_synthetic_api_error_message_is_the_failure_not_text() {
        assert_eq!(
            parse_line(API_ERROR_MESSAGE).unwrap(),
            vec![Parsed::Error { message: r#"API Error: 400 {"type":"error"}"#.into(), fatal: true }]
        );
        assert_eq!(parse_line(SYNTHETIC_NOTE).unwrap(), vec![], "other synthetic messages are not answers either");
    }

    #[test]
    fn unknown_types_blank_lines_and_garbage() {
        assert_eq!(parse_line(r#"{"type":"rate_limit_event","x":1}"#).unwrap(), vec![]);
        assert_eq!(parse_line("   ").unwrap(), vec![]);
        assert!(parse_line("{\"type\":").is_err());
        assert!(parse_line("[1,2]").is_err());
        assert!(parse_line("Loading...").is_err());
    }
}
