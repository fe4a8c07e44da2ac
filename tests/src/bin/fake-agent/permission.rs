//! `FAKE_COMMAND=CMD` of `fake-agent acp`: the turn asks permission to run
//! CMD as the adapter `FAKE_ACP` names asks it (`captures/approvals/`):
//!
//! - claude-code-acp (default): the `tool_call` update announcing a
//!   `Terminal` of kind `execute` with an empty input, the same call again
//!   with its title and input, then `session/request_permission` (numeric
//!   id) whose `toolCall` has only the id, title and input, options
//!   `allow_always` / `allow` / `reject`. `allow_always` also writes
//!   `Bash(CMD)` into `CWD/.claude/settings.local.json`, as the adapter
//!   does. A rejection fails the tool call and the prompt (-32603).
//! - codex-acp: no update first; the request (UUID id) carries kind, title,
//!   status and codex's own input, options `approved` /
//!   `approved-execpolicy-amendment` / `abort`; the amendment appends a
//!   `prefix_rule` to `$CODEX_HOME/rules/default.rules`. `abort` ends the
//!   prompt `cancelled`. After approval: `tool_call` `in_progress`, then
//!   `tool_call_update` `completed`.
//!
//! Allowed, CMD runs in the session's cwd and the turn goes on; its answer
//! starts `Tool said: ran `CMD`: exit code N`.

use serde_json::{Value, json};

use super::acp::{Shared, ask, record, update};
use super::env;

/// How the permission went.
pub enum Asked {
    /// It ran: what the tool said.
    Ran(String),
    /// Rejected: claude-code-acp fails the prompt with this error.
    Failed(&'static str),
    /// Rejected: codex-acp ends the prompt `cancelled`.
    Cancelled,
}

/// claude-code-acp's error for a prompt whose tool call was rejected
/// (`claude-code-acp.reject_once`).
const REJECTED: &str = "Internal error: [ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use";

/// Asks to run `cmd` in `cwd` for `session`, then runs it if allowed.
pub async fn command(state: &Shared, session: &str, cwd: &str, cmd: &str) -> Asked {
    let codex = env("FAKE_ACP").as_deref() == Some("codex-acp");
    let call = if codex { "call_fake0001" } else { "toolu_fake0001" };
    let argv = json!(["/bin/bash", "-lc", cmd]);
    let amendment: Vec<&str> = cmd.split_whitespace().collect();
    let chosen = if codex {
        let input = json!({"call_id": call, "turn_id": "fake-turn", "started_at_ms": 0, "command": argv, "cwd": cwd,
                           "proposed_execpolicy_amendment": amendment,
                           "available_decisions": ["approved", {"approved_execpolicy_amendment": {"proposed_execpolicy_amendment": amendment}}, "abort"],
                           "parsed_cmd": [{"type": "unknown", "cmd": cmd}]});
        let text = format!(
            "Proposed Amendment: {}\nAvailable Decisions: Approved\nApprovedExecpolicyAmendment\nAbort",
            amendment.join("\n")
        );
        let tool_call = json!({"toolCallId": call, "kind": "execute", "status": "pending", "title": cmd,
                               "content": [{"type": "content", "content": {"type": "text", "text": text}}], "rawInput": input});
        let options = json!([
            {"optionId": "approved", "name": "Yes, proceed", "kind": "allow_once"},
            {"optionId": "approved-execpolicy-amendment", "name": format!("Yes, and don't ask again for commands that start with `{cmd}`"), "kind": "allow_always"},
            {"optionId": "abort", "name": "No, and tell Codex what to do differently", "kind": "reject_once"}]);
        let id = json!(format!("6e3a53ec-4d3f-4c6a-80fc-{:012}", std::process::id()));
        ask(state, id, session, tool_call, options).await
    } else {
        let input = json!({"command": cmd, "description": "Run the command asked for"});
        let announce = |input: Value, title: &str| {
            json!({"_meta": {"claudeCode": {"toolName": "Bash"}}, "toolCallId": call, "sessionUpdate": "tool_call",
                   "rawInput": input, "status": "pending", "title": title, "kind": "execute", "content": []})
        };
        update(session, announce(json!({}), "Terminal"));
        let title = format!("`{cmd}`");
        update(session, announce(input.clone(), &title));
        let options = json!([{"kind": "allow_always", "name": "Always Allow", "optionId": "allow_always"},
                             {"kind": "allow_once", "name": "Allow", "optionId": "allow"},
                             {"kind": "reject_once", "name": "Reject", "optionId": "reject"}]);
        let id = json!(super::acp::next_request());
        ask(state, id, session, json!({"toolCallId": call, "rawInput": input, "title": title}), options).await
    };
    record(json!({"permission": chosen, "kind": "execute", "command": cmd}));
    match chosen.as_str() {
        "allow" | "approved" => {}
        "allow_always" => always_claude(cwd, cmd),
        "approved-execpolicy-amendment" => always_codex(&amendment),
        _ if codex => return Asked::Cancelled,
        _ => {
            update(
                session,
                json!({"toolCallId": call, "sessionUpdate": "tool_call_update", "status": "failed",
                       "rawOutput": "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how to proceed."}),
            );
            return Asked::Failed(REJECTED);
        }
    }
    if codex {
        update(
            session,
            json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": cmd, "kind": "execute", "status": "in_progress",
                   "rawInput": {"call_id": call, "command": argv, "cwd": cwd}}),
        );
    }
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(if cwd.is_empty() { "." } else { cwd })
        .stdin(std::process::Stdio::null())
        .output();
    let code = out.as_ref().ok().and_then(|o| o.status.code()).unwrap_or(-1);
    update(
        session,
        json!({"toolCallId": call, "sessionUpdate": "tool_call_update", "status": "completed",
               "rawOutput": format!("exit code {code}")}),
    );
    Asked::Ran(format!("ran `{cmd}`: exit code {code}"))
}

/// claude-code-acp's "Always Allow": a rule in the project's local settings.
fn always_claude(cwd: &str, cmd: &str) {
    let dir = std::path::Path::new(cwd).join(".claude");
    let _ = std::fs::create_dir_all(&dir);
    let rules = json!({"permissions": {"allow": [format!("Bash({cmd})")]}});
    let _ = std::fs::write(dir.join("settings.local.json"), format!("{rules:#}\n"));
}

/// codex-acp's amendment: a prefix rule in `$CODEX_HOME/rules/default.rules`.
fn always_codex(amendment: &[&str]) {
    let Some(home) = env("CODEX_HOME") else { return };
    let dir = std::path::Path::new(&home).join("rules");
    let _ = std::fs::create_dir_all(&dir);
    let line = format!("prefix_rule(pattern={}, decision=\"allow\")\n", json!(amendment));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("default.rules")) {
        use std::io::Write;
        let _ = f.write_all(line.as_bytes());
    }
}
