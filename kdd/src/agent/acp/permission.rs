//! kd's answer when an ACP agent asks permission for a tool call, by the
//! member's `agents.NAME.permissions`.
//!
//! The request need not say what the tool does: claude-code-acp's
//! `session/request_permission` carries only the call's id, title and input,
//! its `kind` (read, edit, execute, fetch…) having been announced in the
//! `tool_call` update with the same `toolCallId` just before. So each
//! agent's [`ToolCalls`] remembers, from the session updates, what each
//! call in flight announced (kind, title, locations), and the decision is
//! taken on that, updated by whatever the request itself says. A refusal
//! is said to the run ([`REFUSED`]) so that its message names the tool and
//! the policy instead of the agent's own error.

use std::collections::VecDeque;

use agent_client_protocol_schema::v1::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, SessionUpdate, ToolCallStatus,
    ToolCallUpdateFields, ToolKind,
};
use serde_json::{Value, json};

use crate::agent::mcp;
use crate::config::Permissions;

/// Tool calls remembered per agent process (the oldest is forgotten first).
const MAX_CALLS: usize = 256;
/// Characters kept of a title or a path.
const MAX_TEXT: usize = 300;
/// Locations kept per tool call.
const MAX_LOCATIONS: usize = 4;

/// The method of the note a run gets when the policy refused one of its
/// tool calls; its params are `{"reason": "refused by policy …: TITLE"}`.
pub const REFUSED: &str = "kd/refused";

/// What a tool call announced of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tool {
    pub kind: Option<ToolKind>,
    pub title: Option<String>,
    /// The paths it touches.
    pub locations: Vec<String>,
}

fn bounded(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

impl Tool {
    /// Takes what `fields` set.
    fn update(&mut self, fields: &ToolCallUpdateFields) {
        if let Some(kind) = fields.kind {
            self.kind = Some(kind);
        }
        if let Some(title) = fields.title.as_deref().filter(|t| !t.trim().is_empty()) {
            self.title = Some(bounded(title));
        }
        if let Some(locations) = &fields.locations {
            self.locations =
                locations.iter().take(MAX_LOCATIONS).map(|l| bounded(&l.path.display().to_string())).collect();
        }
    }

    /// How the tool is named to the user: its title, else what it touches.
    fn named(&self) -> String {
        match (&self.title, self.locations.first()) {
            (Some(t), _) => t.clone(),
            (None, Some(path)) => path.clone(),
            (None, None) => "a tool call".to_string(),
        }
    }
}

/// The tool calls in flight of one agent process, by session and
/// `toolCallId`, as its `session/update`s announced them; bounded.
#[derive(Debug, Default)]
pub struct ToolCalls {
    calls: VecDeque<(String, String, Tool)>,
}

impl ToolCalls {
    /// Takes what a `session/update` says of a tool call; a call that
    /// completed or failed is forgotten.
    pub fn observe(&mut self, params: &Value) {
        // Most updates are text: only a tool call's are read (and cloned).
        let kind = params.pointer("/update/sessionUpdate").and_then(Value::as_str);
        if !matches!(kind, Some("tool_call" | "tool_call_update")) {
            return;
        }
        let Ok(n) = serde_json::from_value::<SessionNotification>(params.clone()) else { return };
        let session = n.session_id.0.to_string();
        match n.update {
            SessionUpdate::ToolCall(call) => {
                let fields = ToolCallUpdateFields::new()
                    .kind(call.kind)
                    .title(call.title)
                    .locations(call.locations)
                    .status(call.status);
                self.update(&session, &call.tool_call_id.0, &fields);
            }
            SessionUpdate::ToolCallUpdate(update) => self.update(&session, &update.tool_call_id.0, &update.fields),
            _ => {}
        }
    }

    fn update(&mut self, session: &str, id: &str, fields: &ToolCallUpdateFields) {
        let at = self.calls.iter().position(|(s, i, _)| s == session && i == id);
        if matches!(fields.status, Some(ToolCallStatus::Completed | ToolCallStatus::Failed)) {
            if let Some(at) = at {
                self.calls.remove(at);
            }
            return;
        }
        match at {
            Some(at) => {
                if let Some((_, _, tool)) = self.calls.get_mut(at) {
                    tool.update(fields);
                }
            }
            None => {
                let mut tool = Tool::default();
                tool.update(fields);
                if self.calls.len() >= MAX_CALLS {
                    self.calls.pop_front();
                }
                self.calls.push_back((session.to_string(), bounded(id), tool));
            }
        }
    }

    /// What call `id` of `session` announced, if it is remembered.
    pub fn get(&self, session: &str, id: &str) -> Option<&Tool> {
        self.calls.iter().find(|(s, i, _)| s == session && i == id).map(|(_, _, t)| t)
    }
}

/// The kinds of tool call a read-only member may make.
fn reads(kind: Option<ToolKind>) -> bool {
    matches!(kind, Some(ToolKind::Read | ToolKind::Search | ToolKind::Think | ToolKind::Fetch))
}

fn policy_name(policy: Permissions) -> &'static str {
    match policy {
        Permissions::ReadOnly => "read-only",
        Permissions::Allow => "allow",
        Permissions::Deny => "deny",
    }
}

/// Whether a tool call is one of kd's own MCP server's: codex-acp asks
/// "Approve MCP tool call" with `rawInput.server_name: "kd"`;
/// claude-code-acp names the tool `mcp__kd__send` (title).
fn is_kds(tool: &Tool, raw_input: Option<&Value>) -> bool {
    let server = raw_input.and_then(|r| r.get("server_name").or_else(|| r.get("server"))).and_then(Value::as_str);
    server == Some(mcp::NAME) || tool.title.as_deref().is_some_and(|t| t.starts_with(mcp::CLAUDE_TOOL_PREFIX))
}

/// kd's answer to a permission request, and why it refused, if it did.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The result to send back.
    pub answer: Value,
    /// `refused by policy POLICY: TITLE` when the tool was refused.
    pub refused: Option<String>,
}

/// The answer to `session/request_permission` under `policy`, on what the
/// tool call announced (`calls`) and what the request adds: an option of
/// the right kind, or `cancelled` when the agent offered none. A call of
/// kd's own MCP server is allowed whatever the policy when kd gave the
/// session its server (`kd_tools`): it acts only as the member, on its thread.
pub fn decide(params: &Value, policy: Permissions, kd_tools: bool, calls: &ToolCalls) -> Decision {
    let Ok(req) = serde_json::from_value::<RequestPermissionRequest>(params.clone()) else {
        return Decision {
            answer: json!({"outcome": {"outcome": "cancelled"}}),
            refused: Some(format!("refused by policy {}: a request kd could not read", policy_name(policy))),
        };
    };
    let mut tool = calls.get(&req.session_id.0, &req.tool_call.tool_call_id.0).cloned().unwrap_or_default();
    tool.update(&req.tool_call.fields);
    let allow = match policy {
        _ if kd_tools && is_kds(&tool, req.tool_call.fields.raw_input.as_ref()) => true,
        Permissions::Allow => true,
        Permissions::Deny => false,
        Permissions::ReadOnly => reads(tool.kind),
    };
    let wanted: &[PermissionOptionKind] = if allow {
        &[PermissionOptionKind::AllowOnce, PermissionOptionKind::AllowAlways]
    } else {
        &[PermissionOptionKind::RejectOnce, PermissionOptionKind::RejectAlways]
    };
    let chosen: Option<&PermissionOption> = wanted.iter().find_map(|k| req.options.iter().find(|o| o.kind == *k));
    let outcome = match chosen {
        Some(o) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone())),
        None => RequestPermissionOutcome::Cancelled,
    };
    let answer = serde_json::to_value(RequestPermissionResponse::new(outcome)).unwrap_or(Value::Null);
    let refused = (!allow).then(|| format!("refused by policy {}: {}", policy_name(policy), tool.named()));
    Decision { answer, refused }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(call: Value) -> Value {
        json!({"sessionId": "s1", "toolCall": call,
               "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                           {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
    }

    fn selected(d: &Decision) -> Option<&str> {
        d.answer.pointer("/outcome/optionId").and_then(Value::as_str)
    }

    fn update(session: &str, update: Value) -> Value {
        json!({"sessionId": session, "update": update})
    }

    #[test]
    fn a_kind_in_the_request_itself_decides() {
        let calls = ToolCalls::default();
        let ask = |kind: &str, policy| {
            decide(&request(json!({"toolCallId": "c1", "title": "T", "kind": kind})), policy, false, &calls)
        };
        assert_eq!(selected(&ask("edit", Permissions::ReadOnly)), Some("no"));
        assert_eq!(selected(&ask("execute", Permissions::ReadOnly)), Some("no"));
        assert_eq!(selected(&ask("read", Permissions::ReadOnly)), Some("yes"));
        assert_eq!(selected(&ask("edit", Permissions::Allow)), Some("yes"));
        assert_eq!(selected(&ask("read", Permissions::Deny)), Some("no"));
        let none = json!({"sessionId": "s1", "toolCall": {"toolCallId": "c1", "kind": "edit"}, "options": []});
        assert_eq!(
            decide(&none, Permissions::ReadOnly, false, &calls).answer,
            json!({"outcome": {"outcome": "cancelled"}})
        );
    }

    /// claude-code-acp 0.16.2 (captures, mcp/claude-code-acp.unallowed.jsonl):
    /// the kind is in the `tool_call` update, the request has only id,
    /// title and input.
    #[test]
    fn the_kind_the_tool_call_announced_decides_a_request_without_one() {
        let mut calls = ToolCalls::default();
        let announce = |id: &str, kind: &str, title: &str| {
            update(
                "s1",
                json!({"toolCallId": id, "sessionUpdate": "tool_call", "rawInput": {}, "status": "pending",
                                "title": title, "kind": kind, "content": [], "locations": [{"path": "/w/a.rs"}]}),
            )
        };
        calls.observe(&announce("toolu_1", "read", "Read /w/a.rs"));
        calls.observe(&announce("toolu_2", "edit", "Write /w/a.rs"));
        let ask = |id: &str, title: &str| request(json!({"toolCallId": id, "rawInput": {}, "title": title}));
        let read = decide(&ask("toolu_1", "Read /w/a.rs"), Permissions::ReadOnly, false, &calls);
        assert_eq!((selected(&read), read.refused.as_deref()), (Some("yes"), None));
        let write = decide(&ask("toolu_2", "Write /w/a.rs"), Permissions::ReadOnly, false, &calls);
        assert_eq!(selected(&write), Some("no"));
        assert_eq!(write.refused.as_deref(), Some("refused by policy read-only: Write /w/a.rs"));
        // The same id in another session is another call.
        let elsewhere = json!({"sessionId": "s2", "toolCall": {"toolCallId": "toolu_1", "title": "Read /w/a.rs"},
                               "options": [{"optionId": "no", "name": "Reject", "kind": "reject_once"}]});
        assert_eq!(selected(&decide(&elsewhere, Permissions::ReadOnly, false, &calls)), Some("no"));
        // An unknown call is no read.
        let unknown = decide(&ask("toolu_9", "mcp__kd__send"), Permissions::ReadOnly, false, &calls);
        assert_eq!(unknown.refused.as_deref(), Some("refused by policy read-only: mcp__kd__send"));
    }

    /// `mcp/codex-acp.unannotated.jsonl` and
    /// `claude-code-acp.unallowed.jsonl`: kd's tools are allowed whatever
    /// the policy, when kd gave the session its server; nothing else is.
    #[test]
    fn kds_own_tools_are_allowed_whatever_the_policy() {
        // The captures, kept byte for byte in tests/fixtures/mcp.
        let capture = |name: &str| -> Value {
            let path = format!("{}/../tests/fixtures/mcp/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()["msg"].clone())
                .find(|m| m["method"] == "session/request_permission")
                .map(|m| m["params"].clone())
                .unwrap()
        };
        let calls = ToolCalls::default();
        for (name, allow) in [("codex-acp.unannotated", "approved"), ("claude-code-acp.unallowed", "allow")] {
            let params = capture(name);
            for policy in [Permissions::ReadOnly, Permissions::Deny] {
                let d = decide(&params, policy, true, &calls);
                assert_eq!((selected(&d), d.refused.as_deref()), (Some(allow), None), "{name} {policy:?}");
                let without = decide(&params, policy, false, &calls);
                assert!(without.refused.is_some(), "{name}: not kd's server when kd gave none");
            }
        }
        let theirs = request(json!({"toolCallId": "c", "title": "mcp__kdx__send", "rawInput": {"server_name": "kdx"}}));
        assert_eq!(selected(&decide(&theirs, Permissions::Deny, true, &calls)), Some("no"));
    }

    #[test]
    fn updates_change_what_is_known_and_an_ended_call_is_forgotten() {
        let mut calls = ToolCalls::default();
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call", "title": "Read", "kind": "read"}),
        ));
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call_update", "kind": "edit",
                                           "locations": [{"path": "/w/b.rs"}]}),
        ));
        let known = calls.get("s1", "c").cloned().unwrap_or_default();
        assert_eq!(known.kind, Some(ToolKind::Edit));
        assert_eq!(known.title.as_deref(), Some("Read"));
        assert_eq!(known.locations, ["/w/b.rs"]);
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call_update", "status": "completed"}),
        ));
        assert_eq!(calls.get("s1", "c"), None);
    }

    #[test]
    fn a_refusal_without_a_title_names_what_the_tool_touches() {
        let mut calls = ToolCalls::default();
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call_update", "kind": "delete",
                                           "locations": [{"path": "/w/old.rs"}]}),
        ));
        let d = decide(&request(json!({"toolCallId": "c"})), Permissions::ReadOnly, false, &calls);
        assert_eq!(d.refused.as_deref(), Some("refused by policy read-only: /w/old.rs"));
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut calls = ToolCalls::default();
        let long = "x".repeat(10_000);
        for i in 0..(MAX_CALLS + 10) {
            calls.observe(&update(
                "s1",
                json!({"toolCallId": format!("c{i}"), "sessionUpdate": "tool_call",
                                               "title": long, "kind": "read"}),
            ));
        }
        assert_eq!(calls.calls.len(), MAX_CALLS);
        assert_eq!(calls.get("s1", "c0"), None, "the oldest is forgotten");
        let last = calls.get("s1", &format!("c{}", MAX_CALLS + 9)).cloned().unwrap_or_default();
        assert_eq!(last.title.map(|t| t.chars().count()), Some(MAX_TEXT));
    }
}
