//! An ACP agent's `session/request_permission`, as kd asks it of the
//! approvals service (`captures/approvals/claude-code-acp.*`, `codex-acp.*`).
//!
//! The tool is described from what its call announced (the `tool_call`
//! update before the request: kind, title, locations, input — claude-code-acp
//! sends the request with no kind) and what the request adds (codex-acp's
//! commands come with no update first). What kd answered before approvals
//! ([`super::permission::decide_in`]: the member's policy, its worktree) is
//! the service's fallback. The answer is an option the agent offered:
//! allow once (its "always" options write rules into the user's files, so
//! kd picks one only when the agent offers nothing else), reject once, or
//! the `cancelled` outcome when the run is cancelled — the agents end the
//! prompt `cancelled` at once, and the client must answer anyway. Only
//! `once` is honoured. A call of kd's own MCP server, a request kd cannot
//! read or one offering no option is answered at once, as before; so is
//! every request of a member whose `agents.NAME.permissions` is `allow` or
//! `deny` (outside a worktree): its configuration already answered; and a
//! write outside the member's worktree at work is refused, never asked. A
//! member of the default `read-only` is asked (reads stay allowed by the
//! approvals policy's default; the rest goes to the King when one can
//! answer, else is refused as before).

use std::path::Path;

use agent_client_protocol_schema::v1::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, ToolKind as AcpKind,
};
use kd_proto::approval::{ApprovalTool, ToolKind};
use serde_json::Value;

use super::permission::{self, Decision, Tool, ToolCalls};
use crate::approvals::Answer;
use crate::config::Permissions;

/// How kd answers a permission request.
#[derive(Debug)]
pub enum Asked {
    /// At once, as before approvals.
    Now(Decision),
    /// Asked of the approvals service: the tool, what kd answered before
    /// (the fallback), the options to answer with.
    Later { tool: ApprovalTool, today: Answer, options: Vec<PermissionOption> },
}

/// How kd answers `session/request_permission` (`params`) of an agent with
/// the member's `policy`, kd's tools when `kd_tools`, its tool calls
/// announced (`calls`) and its worktree (`confine`).
pub fn asked(params: &Value, policy: Permissions, kd_tools: bool, calls: &ToolCalls, confine: Option<&Path>) -> Asked {
    let before = permission::decide_in(params, policy, kd_tools, calls, confine);
    let Ok(req) = serde_json::from_value::<RequestPermissionRequest>(params.clone()) else {
        return Asked::Now(before);
    };
    let mut known = calls.get(&req.session_id.0, &req.tool_call.tool_call_id.0).cloned().unwrap_or_default();
    known.update(&req.tool_call.fields);
    let kds = kd_tools && permission::is_kds(&known, req.tool_call.fields.raw_input.as_ref());
    // A member configured `permissions: allow` or `deny` said what it is
    // answered, whatever the tool (its worktree aside).
    let settled = confine.is_none() && matches!(policy, Permissions::Allow | Permissions::Deny);
    // A write outside the member's worktree is refused, never asked (F-W1).
    let escapes = confine.is_some() && before.refused.is_some();
    if kds || settled || escapes || req.options.is_empty() {
        return Asked::Now(before);
    }
    let today = match before.refused {
        Some(message) => Answer::Deny { message },
        None => Answer::Allow { scope: kd_proto::approval::Scope::Once },
    };
    let mcp = permission::is_kds(&known, None)
        || known.title.as_deref().is_some_and(|t| t.starts_with("mcp__"))
        || req.tool_call.fields.raw_input.as_ref().is_some_and(|r| r.get("server_name").is_some());
    Asked::Later { tool: described(&known, mcp), today, options: req.options }
}

/// The tool as the King reads it.
pub fn described(known: &Tool, mcp: bool) -> ApprovalTool {
    let kind = match known.kind {
        _ if mcp => ToolKind::Mcp,
        Some(AcpKind::Read | AcpKind::Search) => ToolKind::Read,
        Some(AcpKind::Edit | AcpKind::Delete | AcpKind::Move) => ToolKind::Edit,
        Some(AcpKind::Execute) => ToolKind::Execute,
        Some(AcpKind::Fetch) => ToolKind::Fetch,
        _ => ToolKind::Other,
    };
    // claude-code-acp titles a command with it in backquotes.
    let title = known.named();
    let title = title.strip_prefix('`').and_then(|t| t.strip_suffix('`')).unwrap_or(&title).to_string();
    let mut tool = ApprovalTool::new(kind, title);
    tool.name = known.name.clone();
    let input = known.input.clone().unwrap_or(Value::Null);
    tool.command = match input.get("command") {
        Some(Value::String(c)) => Some(c.clone()),
        Some(Value::Array(argv)) => Some(argv.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")),
        _ => None,
    };
    for p in known.locations.iter().chain(&known.inputs) {
        if !tool.paths.contains(p) {
            tool.paths.push(p.clone());
        }
    }
    tool.input = input;
    tool.bounded()
}

/// The result answering a request that offered `options` with `answer`.
pub fn outcome(options: &[PermissionOption], answer: &Answer) -> Value {
    let wanted: &[PermissionOptionKind] = match answer {
        Answer::Allow { .. } => &[PermissionOptionKind::AllowOnce, PermissionOptionKind::AllowAlways],
        Answer::Deny { .. } => &[PermissionOptionKind::RejectOnce, PermissionOptionKind::RejectAlways],
        Answer::Cancelled => &[],
    };
    let chosen = wanted.iter().find_map(|k| options.iter().find(|o| o.kind == *k));
    let outcome = match chosen {
        Some(o) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone())),
        None => RequestPermissionOutcome::Cancelled,
    };
    serde_json::to_value(RequestPermissionResponse::new(outcome)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::approval::Scope;
    use serde_json::json;

    /// What an agent sent in a capture of `captures/approvals` (kept byte
    /// for byte in `tests/fixtures/approvals`), its permission requests
    /// read as kd reads them (the updates before each observed first).
    fn asked_in(name: &str, policy: Permissions) -> Vec<Asked> {
        let path = format!("{}/../tests/fixtures/approvals/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut calls = ToolCalls::default();
        let mut asked_ = Vec::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["dir"] != "<" {
                continue;
            }
            match v["msg"]["method"].as_str() {
                Some("session/update") => calls.observe(&v["msg"]["params"]),
                Some("session/request_permission") => {
                    asked_.push(asked(&v["msg"]["params"], policy, false, &calls, None));
                }
                _ => {}
            }
        }
        asked_
    }

    fn later(a: &Asked) -> (&ApprovalTool, &Answer, &[PermissionOption]) {
        match a {
            Asked::Later { tool, today, options } => (tool, today, options),
            Asked::Now(d) => panic!("answered at once: {d:?}"),
        }
    }

    #[test]
    fn claude_code_acp_asks_a_command_announced_before() {
        let all = asked_in("claude-code-acp.allow_once", Permissions::ReadOnly);
        assert_eq!(all.len(), 1);
        let (tool, today, options) = later(&all[0]);
        assert_eq!(tool.kind, ToolKind::Execute, "the kind of the tool_call update");
        assert_eq!(tool.title, "touch /RUN/x-acp");
        assert_eq!(tool.name.as_deref(), Some("Bash"));
        assert_eq!(tool.command.as_deref(), Some("touch /RUN/x-acp"));
        assert_eq!(
            today,
            &Answer::Deny { message: "refused by policy read-only: `touch /RUN/x-acp`".into() },
            "read-only refused it before approvals"
        );
        // Allowed: `allow` (once), never `allow_always`, which writes a rule
        // into the workspace's .claude/settings.local.json.
        let allow = outcome(options, &Answer::Allow { scope: Scope::Once });
        assert_eq!(allow, json!({"outcome": {"outcome": "selected", "optionId": "allow"}}));
        let allow_run = outcome(options, &Answer::Allow { scope: Scope::Run });
        assert_eq!(allow_run["outcome"]["optionId"], "allow");
        assert_eq!(outcome(options, &Answer::Deny { message: "no".into() })["outcome"]["optionId"], "reject");
        assert_eq!(outcome(options, &Answer::Cancelled), json!({"outcome": {"outcome": "cancelled"}}));
    }

    #[test]
    fn claude_code_acp_asks_a_write_with_its_path() {
        let all = asked_in("claude-code-acp.write", Permissions::ReadOnly);
        let (tool, today, _) = later(&all[0]);
        assert_eq!((tool.kind, tool.title.as_str()), (ToolKind::Edit, "Write /RUN/x-write.txt"));
        assert_eq!(tool.paths, ["/RUN/x-write.txt"]);
        assert_eq!(tool.input["content"], "written by the stub\n");
        assert!(matches!(today, Answer::Deny { .. }), "read-only refused it before");
        // A member configured to allow (or deny) everything is answered as configured.
        for (policy, option) in [(Permissions::Allow, "allow"), (Permissions::Deny, "reject")] {
            match &asked_in("claude-code-acp.write", policy)[0] {
                Asked::Now(d) => assert_eq!(d.answer["outcome"]["optionId"], option),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn codex_acp_asks_a_command_with_no_update_before() {
        let all = asked_in("codex-acp.allow_once", Permissions::ReadOnly);
        let (tool, _, options) = later(&all[0]);
        assert_eq!((tool.kind, tool.title.as_str()), (ToolKind::Execute, "touch x-acp"));
        assert_eq!(tool.command.as_deref(), Some("/bin/bash -lc touch x-acp"));
        let allow = outcome(options, &Answer::Allow { scope: Scope::Once });
        assert_eq!(allow["outcome"]["optionId"], "approved", "not the execpolicy amendment, which persists");
        assert_eq!(outcome(options, &Answer::Deny { message: "no".into() })["outcome"]["optionId"], "abort");
        let patch = asked_in("codex-acp.patch", Permissions::ReadOnly);
        let (tool, _, _) = later(&patch[0]);
        assert_eq!((tool.kind, tool.paths.as_slice()), (ToolKind::Edit, ["/WORKSPACE/x-p.txt".to_string()].as_slice()));
    }

    #[test]
    fn kds_own_tools_and_unreadable_requests_are_answered_at_once() {
        let calls = ToolCalls::default();
        let kds = json!({"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "mcp__kd__send", "rawInput": {}},
                         "options": [{"optionId": "y", "name": "Allow", "kind": "allow_once"}]});
        match asked(&kds, Permissions::Deny, true, &calls, None) {
            Asked::Now(d) => assert_eq!(d.answer["outcome"]["optionId"], "y"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(asked(&json!({"nonsense": 1}), Permissions::Allow, false, &calls, None), Asked::Now(_)));
        let none = json!({"sessionId": "s", "toolCall": {"toolCallId": "c", "kind": "edit"}, "options": []});
        assert!(matches!(asked(&none, Permissions::Allow, false, &calls, None), Asked::Now(_)));
        // Another server's tool is asked, as an MCP tool.
        let theirs = json!({"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "mcp__gh__merge", "rawInput": {}},
                            "options": [{"optionId": "y", "name": "Allow", "kind": "allow_once"}]});
        let a = asked(&theirs, Permissions::ReadOnly, true, &calls, None);
        assert_eq!(later(&a).0.kind, ToolKind::Mcp);
    }

    #[test]
    fn at_work_a_write_outside_the_worktree_is_refused_at_once_and_a_command_asked() {
        let root = std::env::temp_dir().join(format!("kd-approval-wt-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let calls = ToolCalls::default();
        let ask = |kind: &str, input: Value| {
            let p = json!({"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "T", "kind": kind, "rawInput": input},
                           "options": [{"optionId": "y", "name": "Allow", "kind": "allow_once"},
                                       {"optionId": "n", "name": "Reject", "kind": "reject_once"}]});
            asked(&p, Permissions::Allow, false, &calls, Some(&root))
        };
        match ask("edit", json!({"file_path": "../x"})) {
            Asked::Now(d) => assert_eq!(d.answer["outcome"]["optionId"], "n"),
            other => panic!("{other:?}"),
        }
        let command = ask("execute", json!({"command": "make"}));
        let (tool, today, _) = later(&command);
        assert_eq!((tool.kind, today), (ToolKind::Execute, &Answer::Allow { scope: Scope::Once }));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn an_allow_takes_always_only_when_nothing_else_is_offered() {
        let only_always: Vec<PermissionOption> =
            serde_json::from_value(json!([{"optionId": "a", "name": "Always", "kind": "allow_always"}])).unwrap();
        assert_eq!(outcome(&only_always, &Answer::Allow { scope: Scope::Once })["outcome"]["optionId"], "a");
        assert_eq!(
            outcome(&only_always, &Answer::Deny { message: "x".into() }),
            json!({"outcome": {"outcome": "cancelled"}}),
            "no reject offered"
        );
    }
}
