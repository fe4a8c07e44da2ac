//! The Agent Client Protocol as kd speaks it, with the types of the
//! `agent-client-protocol-schema` crate: the requests kd sends (kd offers
//! the agent no file system and no terminal of its own), what a
//! `session/update` means for a run, and the answer to a permission request
//! by the member's policy.

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AGENT_METHOD_NAMES, CLIENT_METHOD_NAMES, CancelNotification, ContentBlock, Implementation, InitializeRequest,
    LoadSessionRequest, NewSessionRequest, PermissionOption, PermissionOptionKind, PlanEntryStatus, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, SessionUpdate, StopReason, TextContent, ToolKind,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::agent::parse::Parsed;
use crate::agent::peer::Dialect;
use crate::config::Permissions;

fn request(id: u64, method: &str, params: impl Serialize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// `initialize`: protocol version 1, kd named, no client capabilities.
pub fn initialize(id: u64) -> Value {
    let params = InitializeRequest::new(ProtocolVersion::V1).client_info(Implementation::new("kd", kd_proto::VERSION));
    request(id, AGENT_METHOD_NAMES.initialize, params)
}

/// Whether the agent said it can load a session (`agentCapabilities.loadSession`).
pub fn can_load(initialized: &Value) -> bool {
    initialized.pointer("/agentCapabilities/loadSession").and_then(Value::as_bool).unwrap_or(false)
}

pub fn session_new(id: u64, cwd: &str) -> Value {
    request(id, AGENT_METHOD_NAMES.session_new, NewSessionRequest::new(cwd))
}

pub fn session_load(id: u64, session: &str, cwd: &str) -> Value {
    request(id, AGENT_METHOD_NAMES.session_load, LoadSessionRequest::new(session.to_string(), cwd))
}

/// The session id in the result of `session/new`.
pub fn session_id(result: &Value) -> Option<String> {
    result.get("sessionId").and_then(Value::as_str).map(str::to_string)
}

pub fn session_prompt(id: u64, session: &str, prompt: &str) -> Value {
    let text = ContentBlock::Text(TextContent::new(prompt));
    request(id, AGENT_METHOD_NAMES.session_prompt, PromptRequest::new(session.to_string(), vec![text]))
}

/// `session/cancel`, a notification.
pub fn session_cancel(session: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": AGENT_METHOD_NAMES.session_cancel,
           "params": CancelNotification::new(session.to_string())})
}

/// How a turn ended, from the `session/prompt` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    Completed,
    Cancelled,
    /// Why the turn failed.
    Failed(String),
}

pub fn turn_end(result: Result<Value, String>) -> TurnEnd {
    let result = match result {
        Ok(r) => r,
        Err(e) => return TurnEnd::Failed(e),
    };
    match result.get("stopReason").cloned().map(serde_json::from_value::<StopReason>) {
        Some(Ok(StopReason::Cancelled)) => TurnEnd::Cancelled,
        Some(Ok(StopReason::Refusal)) => TurnEnd::Failed("the agent refused to answer".into()),
        Some(Ok(_)) => TurnEnd::Completed,
        _ => TurnEnd::Failed(format!("session/prompt ended without a known stopReason: {result}")),
    }
}

/// What a notification of the run's session means for the run: text for
/// the transcript (a new paragraph after a tool call), or nothing (plans,
/// thoughts, the history a `session/load` replays before kd follows).
pub fn interpret(method: &str, params: &Value) -> Vec<Parsed> {
    if method != CLIENT_METHOD_NAMES.session_update {
        return Vec::new();
    }
    let Ok(n) = serde_json::from_value::<SessionNotification>(params.clone()) else {
        return Vec::new();
    };
    match n.update {
        SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
            // An empty first chunk (some agents send one) is nothing.
            ContentBlock::Text(t) if !t.text.is_empty() => vec![Parsed::Delta(t.text)],
            _ => Vec::new(),
        },
        SessionUpdate::ToolCall(call) => vec![Parsed::Boundary, Parsed::Activity(call.title)],
        SessionUpdate::Plan(plan) => match plan.entries.iter().find(|e| e.status != PlanEntryStatus::Completed) {
            Some(next) => vec![Parsed::Activity(format!("plan: {}", next.content))],
            None => Vec::new(),
        },
        SessionUpdate::AgentThoughtChunk(_) => vec![Parsed::Activity("thinking".into())],
        _ => Vec::new(),
    }
}

/// The kinds of tool call a read-only member may make.
fn reads(kind: Option<ToolKind>) -> bool {
    matches!(kind, Some(ToolKind::Read | ToolKind::Search | ToolKind::Think | ToolKind::Fetch))
}

/// The answer to `session/request_permission` under `policy`: an option
/// of the right kind, or `cancelled` when the agent offered none.
pub fn permission(params: &Value, policy: Permissions) -> Value {
    let Ok(req) = serde_json::from_value::<RequestPermissionRequest>(params.clone()) else {
        return json!({"outcome": {"outcome": "cancelled"}});
    };
    let allow = match policy {
        Permissions::Allow => true,
        Permissions::Deny => false,
        Permissions::ReadOnly => reads(req.tool_call.fields.kind),
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
    serde_json::to_value(RequestPermissionResponse::new(outcome)).unwrap_or(Value::Null)
}

/// An ACP agent's side of [`Peer`](crate::agent::peer::Peer).
pub struct Acp {
    pub permissions: Permissions,
}

impl Dialect for Acp {
    fn name(&self) -> &str {
        "the ACP agent"
    }

    fn conversation(&self, _method: &str, params: &Value) -> Option<String> {
        params.get("sessionId").and_then(Value::as_str).map(str::to_string)
    }

    fn ends_turn(&self, _method: &str) -> bool {
        // A turn ends with the answer to `session/prompt`.
        false
    }

    fn answer(&self, id: &Value, method: &str, params: &Value) -> Value {
        if method == CLIENT_METHOD_NAMES.session_request_permission {
            let answer = permission(params, self.permissions);
            tracing::debug!(%answer, "answered a permission request");
            return json!({"jsonrpc": "2.0", "id": id, "result": answer});
        }
        // kd offered no file system and no terminal.
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("kd does not offer {method}")}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permission_request(kind: &str) -> Value {
        json!({"sessionId": "s1", "toolCall": {"toolCallId": "c1", "title": "Edit a.rs", "kind": kind},
               "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                           {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
    }

    fn selected(answer: &Value) -> Option<&str> {
        answer.pointer("/outcome/optionId").and_then(Value::as_str)
    }

    #[test]
    fn read_only_denies_writes_and_allows_reads() {
        assert_eq!(selected(&permission(&permission_request("edit"), Permissions::ReadOnly)), Some("no"));
        assert_eq!(selected(&permission(&permission_request("execute"), Permissions::ReadOnly)), Some("no"));
        assert_eq!(selected(&permission(&permission_request("read"), Permissions::ReadOnly)), Some("yes"));
        assert_eq!(selected(&permission(&permission_request("edit"), Permissions::Allow)), Some("yes"));
        assert_eq!(selected(&permission(&permission_request("read"), Permissions::Deny)), Some("no"));
        let none = json!({"sessionId": "s1", "toolCall": {"toolCallId": "c1", "kind": "edit"}, "options": []});
        assert_eq!(permission(&none, Permissions::ReadOnly), json!({"outcome": {"outcome": "cancelled"}}));
    }

    #[test]
    fn message_chunks_are_deltas_and_tool_calls_break_paragraphs() {
        let chunk = |t: &str| json!({"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": t}}});
        assert_eq!(interpret("session/update", &chunk("Hello")), vec![Parsed::Delta("Hello".into())]);
        assert_eq!(interpret("session/update", &chunk("")), vec![]);
        let tool = json!({"sessionId": "s1", "update": {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "ls", "kind": "execute", "status": "pending"}});
        assert_eq!(interpret("session/update", &tool), vec![Parsed::Boundary, Parsed::Activity("ls".into())]);
        let plan = json!({"sessionId": "s1", "update": {"sessionUpdate": "plan", "entries": [
            {"content": "Read the code", "priority": "high", "status": "completed"},
            {"content": "Answer", "priority": "high", "status": "in_progress"}]}});
        assert_eq!(interpret("session/update", &plan), vec![Parsed::Activity("plan: Answer".into())]);
        let done = json!({"sessionId": "s1", "update": {"sessionUpdate": "plan", "entries": []}});
        assert_eq!(interpret("session/update", &done), vec![]);
    }

    #[test]
    fn stop_reasons_end_the_turn() {
        assert_eq!(turn_end(Ok(json!({"stopReason": "end_turn"}))), TurnEnd::Completed);
        assert_eq!(turn_end(Ok(json!({"stopReason": "cancelled"}))), TurnEnd::Cancelled);
        assert!(matches!(turn_end(Ok(json!({"stopReason": "refusal"}))), TurnEnd::Failed(_)));
        assert_eq!(turn_end(Err("boom".into())), TurnEnd::Failed("boom".into()));
    }

    #[test]
    fn requests_are_json_rpc_2() {
        let init = initialize(1);
        assert_eq!(init["jsonrpc"], "2.0");
        assert_eq!(init["params"]["protocolVersion"], 1);
        assert_eq!(init["params"]["clientCapabilities"]["terminal"], false);
        let p = session_prompt(3, "s1", "Hi?");
        assert_eq!(p["params"], json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "Hi?"}]}));
        assert_eq!(
            session_cancel("s1"),
            json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}})
        );
    }
}
