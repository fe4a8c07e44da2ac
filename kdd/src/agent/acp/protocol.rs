//! The Agent Client Protocol as kd speaks it, with the types of the
//! `agent-client-protocol-schema` crate: the requests kd sends (kd offers
//! the agent no file system and no terminal of its own), what a
//! `session/update` means for a run, and the [`Acp`] dialect, which asks a
//! permission of the run following its session ([`super::approval`]), the
//! member's policy ([`super::permission`]) being the fallback.

use agent_client_protocol_schema::ProtocolVersion;
use kd_proto::approval::Scope;
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::{
    AGENT_METHOD_NAMES, CLIENT_METHOD_NAMES, CancelNotification, ContentBlock, Implementation, InitializeRequest,
    LoadSessionRequest, NewSessionRequest, PlanEntryStatus, PromptRequest, SessionNotification, SessionUpdate,
    StopReason, TextContent,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::approval::{self, Asked};
use super::permission::{self, ToolCalls};
use crate::agent::asking::{Later, Writer};
use crate::agent::mcp::Server;
use crate::agent::parse::Parsed;
use crate::agent::peer::{Dialect, Note, Reply};
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

/// `session/new` in `cwd`, with kd's MCP server when given (and
/// claude-code-acp's `_meta` allowing its tools).
pub fn session_new(id: u64, cwd: &str, server: Option<&Server>) -> Value {
    with_server(request(id, AGENT_METHOD_NAMES.session_new, NewSessionRequest::new(cwd)), server)
}

/// `session/load` of a recorded session, with kd's MCP server when given.
pub fn session_load(id: u64, session: &str, cwd: &str, server: Option<&Server>) -> Value {
    with_server(request(id, AGENT_METHOD_NAMES.session_load, LoadSessionRequest::new(session.to_string(), cwd)), server)
}

fn with_server(mut request: Value, server: Option<&Server>) -> Value {
    if let Some(server) = server {
        request["params"]["mcpServers"] = server.acp_servers();
        request["params"]["_meta"] = Server::acp_meta();
    }
    request
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

/// An ACP agent's side of [`Peer`](crate::agent::peer::Peer): the member's
/// permission policy, whether kd's own tools are allowed, and the tool
/// calls its sessions announced.
pub struct Acp {
    permissions: Permissions,
    /// Whether kd gives the agent's sessions its MCP server, whose tools
    /// are then allowed whatever the policy.
    kd_tools: bool,
    /// The member's worktree, when the agent works there (F-W1).
    confine: Option<std::path::PathBuf>,
    calls: Mutex<ToolCalls>,
}

impl Acp {
    pub fn new(permissions: Permissions, kd_tools: bool) -> Acp {
        Acp { permissions, kd_tools, confine: None, calls: Mutex::new(ToolCalls::default()) }
    }

    /// An agent working in a member's worktree: its writes are allowed
    /// there and refused elsewhere (see [`permission::decide_in`]).
    pub fn confined(mut self, worktree: Option<std::path::PathBuf>) -> Acp {
        self.confine = worktree;
        self
    }
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

    fn observe(&self, method: &str, params: &Value) {
        if method == CLIENT_METHOD_NAMES.session_update
            && let Ok(mut calls) = self.calls.lock()
        {
            calls.observe(params);
        }
    }

    fn answer(&self, id: &Value, method: &str, params: &Value) -> Reply {
        if method == CLIENT_METHOD_NAMES.session_request_permission {
            let asked = match self.calls.lock() {
                Ok(calls) => approval::asked(params, self.permissions, self.kd_tools, &calls, self.confine.as_deref()),
                Err(_) => approval::asked(
                    params,
                    self.permissions,
                    self.kd_tools,
                    &ToolCalls::default(),
                    self.confine.as_deref(),
                ),
            };
            let decision = match asked {
                Asked::Now(decision) => decision,
                Asked::Later { tool, today, options } => {
                    let id = id.clone();
                    let write: Writer = Arc::new(
                        move |answer| json!({"jsonrpc": "2.0", "id": id, "result": approval::outcome(&options, answer)}),
                    );
                    return Reply::Later(Later { tool, scopes: vec![Scope::Once], today, write });
                }
            };
            tracing::debug!(answer = %decision.answer, "answered a permission request");
            let note = decision.refused.map(|reason| Note::new(permission::REFUSED, json!({"reason": reason})));
            return Reply::Now(json!({"jsonrpc": "2.0", "id": id, "result": decision.answer}), note);
        }
        // kd offered no file system and no terminal.
        let error = json!({"code": -32601, "message": format!("kd does not offer {method}")});
        Reply::Now(json!({"jsonrpc": "2.0", "id": id, "error": error}), None)
    }
}

/// Why the policy refused a tool call, from a [`permission::REFUSED`] note.
pub fn refusal(note: &Note) -> Option<String> {
    (note.method == permission::REFUSED)
        .then(|| note.params.get("reason").and_then(Value::as_str).map(str::to_string))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

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
