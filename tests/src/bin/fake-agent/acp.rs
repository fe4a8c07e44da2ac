//! `fake-agent acp`: an Agent Client Protocol agent (JSON-RPC 2.0 over
//! stdio). `initialize` (with `loadSession` unless `FAKE_NO_LOAD`),
//! `session/new`, `session/load` (any id but one containing `missing`; the
//! history is replayed as `session/update` before the answer, as agents
//! do), `session/prompt` streaming `agent_message_chunk` updates (an empty
//! first chunk and a `plan` first, as some agents send them), and
//! `session/cancel`, which ends the turn with `stopReason: cancelled`.
//! `FAKE_PERMISSION=KIND` asks permission for a tool call of that kind
//! first, as claude-code-acp does (`mcp/claude-code-acp.unallowed.jsonl` in
//! the captures): a few words, the `tool_call` update announcing the tool's
//! kind, title and locations (twice, its input filled in the second time),
//! then `session/request_permission` whose `toolCall` carries only the id,
//! title and input; a rejection fails the tool call and the prompt with
//! claude-code-acp's `Internal error: [ede_diagnostic] …`. `FAKE_EDIT=PATH`
//! asks to write PATH (relative to the session's cwd as written, so `../x`
//! is outside it), writes it only when allowed and goes on either way,
//! recording `{"permission", "kind": "edit", "edit": PATH}`. `FAKE_COMMAND`
//! asks to run a command as the adapter `FAKE_ACP` names does (see
//! `permission.rs`). Every permission request is recorded when sent
//! (`{"asked", "id", "us"}`) and every answer when it comes (`{"answered":
//! "session/request_permission", "id", "result", "error", "us"}`, also one
//! nobody waits for any more, as after `session/cancel`). `FAKE_RUN`
//! reports a tool call. The answer follows the usual
//! `FAKE_*` knobs; `FAKE_ERROR` fails the prompt with a JSON-RPC error.
//! `FAKE_SILENT=METHOD` never answers that request (e.g. `initialize`,
//! `session/new`), recording `{"silent": METHOD, "pid": …}` when it comes.
//! `FAKE_IGNORE_EOF` keeps it running after stdin closes; `FAKE_CHILD`
//! starts a long-lived child first (its pid recorded as `child`).
//! `FAKE_RECORD` gets a line per prompt (`stdin` is the prompt, `session`,
//! `loaded`, `mcp`: kd's MCP server as the session was given it,
//! `allowed`: what `_meta` allowed), per permission answer (`permission`)
//! and per cancel. `FAKE_MCP_CALL` calls a tool of kd's server in the
//! prompt as claude-code-acp does, or as codex-acp does with
//! `FAKE_ACP=codex-acp`, asking permission when that adapter would (see
//! `mcp.rs`).

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::{env, env_num, hold, mcp, pieces};

#[derive(Default)]
pub struct State {
    sessions: HashMap<String, Session>,
    /// The running prompt of a session: its request id and task.
    active: HashMap<String, (Value, tokio::task::AbortHandle)>,
    /// Our requests to the client (by id, as JSON), waiting for its answer.
    asked: HashMap<String, oneshot::Sender<Value>>,
}

#[derive(Default, Clone)]
struct Session {
    cwd: String,
    loaded: bool,
    /// kd's MCP server as the session was given it (`mcpServers`), the
    /// tools `_meta.claudeCode.options.allowedTools` allows, and the server
    /// once started (claude-code-acp: with the session; codex-acp: at its
    /// first prompt), when `FAKE_MCP_CALL` asks for a call.
    mcp: Option<mcp::Given>,
    allowed: Vec<String>,
    server: Option<Arc<tokio::sync::Mutex<mcp::Session>>>,
}

/// Which adapter the fake plays for MCP (`FAKE_ACP`).
fn flavour() -> mcp::Cli {
    if env("FAKE_ACP").as_deref() == Some("codex-acp") { mcp::Cli::CodexAcp } else { mcp::Cli::ClaudeCodeAcp }
}

/// The session's kd server, started now if it is to be and is not yet.
async fn server_of(state: &Shared, session: &str) -> Option<Arc<tokio::sync::Mutex<mcp::Session>>> {
    let s = state.lock().ok()?.sessions.get(session).cloned()?;
    if let Some(server) = s.server {
        return Some(server);
    }
    if !mcp::starts() {
        return None;
    }
    let started = mcp::start_noted(s.mcp.as_ref()?, flavour()).await;
    let server = match started {
        Ok(server) => Arc::new(tokio::sync::Mutex::new(server)),
        Err(e) => {
            record(json!({"mcp": {"error": e}}));
            return None;
        }
    };
    if let Ok(mut st) = state.lock()
        && let Some(s) = st.sessions.get_mut(session)
    {
        s.server = Some(server.clone());
    }
    Some(server)
}

pub type Shared = Arc<Mutex<State>>;

static NEXT: AtomicU64 = AtomicU64::new(1);
/// The ids of our requests to the client: numbers from 0, as claude-code-acp's.
static ASKED: AtomicU64 = AtomicU64::new(0);

/// The id of our next numbered request to the client.
pub fn next_request() -> u64 {
    ASKED.fetch_add(1, Ordering::Relaxed)
}

fn send(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn reply(id: &Value, result: Value) {
    send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
}

fn error(id: &Value, code: i64, message: &str) {
    send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
}

pub fn update(session: &str, update: Value) {
    send(&json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}));
}

fn chunk(session: &str, text: &str) {
    update(session, json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}));
}

pub fn record(line: Value) {
    let Some(path) = env("FAKE_RECORD") else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

pub async fn serve(args: Vec<String>) -> i32 {
    let state: Shared = Arc::default();
    if let Some(how) = env("FAKE_CHILD") {
        record(json!({"child": super::long_lived_child(&how)}));
    }
    let mut lines = super::stdin_lines();
    while let Some(line) = lines.recv().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let session = params.get("sessionId").and_then(Value::as_str).unwrap_or_default().to_string();
        let Some(method) = msg.get("method").and_then(Value::as_str) else {
            // The client's answer to one of our requests (recorded with
            // its time in µs, also when nobody waits for it any more).
            record(json!({"answered": "session/request_permission", "id": msg.get("id"),
                          "result": msg.get("result"), "error": msg.get("error"),
                          "us": super::now_us() as u64}));
            let waiting = msg.get("id").map(Value::to_string).and_then(|id| state.lock().ok()?.asked.remove(&id));
            if let Some(tx) = waiting {
                let _ = tx.send(msg.get("result").cloned().unwrap_or(Value::Null));
            }
            continue;
        };
        let id = msg.get("id").cloned();
        match (method, id) {
            ("session/cancel", None) => {
                let active = state.lock().ok().and_then(|mut s| s.active.remove(&session));
                if let Some((id, task)) = active {
                    record(json!({"cancelled": session}));
                    if env("FAKE_IGNORE_TERM").is_none() {
                        task.abort();
                        reply(&id, json!({"stopReason": "cancelled"}));
                    }
                }
            }
            (_, None) => {}
            (method, Some(_)) if env("FAKE_SILENT").as_deref() == Some(method) => {
                // A request it never answers (a hung agent).
                record(json!({"silent": method, "pid": std::process::id()}));
            }
            ("initialize", Some(id)) => reply(
                &id,
                json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": env("FAKE_NO_LOAD").is_none()},
                       "authMethods": [], "agentInfo": {"name": "fake-acp", "version": "0"}}),
            ),
            ("session/new", Some(id)) => {
                let cwd = params.get("cwd").and_then(Value::as_str).unwrap_or_default().to_string();
                let session = env("FAKE_SESSION_ID").unwrap_or_else(|| {
                    format!("fake-acp-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
                });
                opened(&state, &session, cwd, false, &params).await;
                reply(&id, json!({"sessionId": session}));
            }
            ("session/load", Some(id)) => {
                if session.contains("missing") || env("FAKE_NO_LOAD").is_some() {
                    error(&id, -32602, &format!("session not found: {session}"));
                    continue;
                }
                let cwd = params.get("cwd").and_then(Value::as_str).unwrap_or_default().to_string();
                // The history first, then the answer.
                update(
                    &session,
                    json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "(earlier question)"}}),
                );
                chunk(&session, "(replayed answer)");
                opened(&state, &session, cwd, true, &params).await;
                reply(&id, Value::Null);
            }
            ("session/prompt", Some(id)) => {
                let known = state.lock().ok().and_then(|s| s.sessions.get(&session).cloned());
                let Some(Session { cwd, loaded, mcp: given, allowed, .. }) = known else {
                    error(&id, -32602, &format!("session not found: {session}"));
                    continue;
                };
                let prompt: String = params
                    .get("prompt")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
                    })
                    .unwrap_or_default();
                record(json!({"argv": args, "stdin": prompt, "cwd": cwd, "pid": std::process::id(),
                              "session": session, "loaded": loaded, "mcp": given.as_ref().map(mcp::Given::record),
                              "allowed": allowed, "env": mcp::kd_env()}));
                let task = tokio::spawn(turn(state.clone(), id.clone(), session.clone(), cwd, prompt));
                if let Ok(mut s) = state.lock() {
                    s.active.insert(session, (id, task.abort_handle()));
                }
            }
            (other, Some(id)) => error(&id, -32601, &format!("Method not found: {other}")),
        }
    }
    if env("FAKE_IGNORE_EOF").is_some() {
        // An agent that does not exit when its stdin closes.
        std::future::pending::<()>().await;
    }
    0
}

/// Takes note of a session opened (`session/new`, `session/load`) with
/// what it was given of kd's MCP server; claude-code-acp starts the server
/// with the session.
async fn opened(state: &Shared, session: &str, cwd: String, loaded: bool, params: &Value) {
    let allowed = params
        .pointer("/_meta/claudeCode/options/allowedTools")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let kept = state.lock().ok().and_then(|s| s.sessions.get(session).and_then(|s| s.server.clone()));
    let entry = Session { cwd, loaded, mcp: mcp::from_acp(params), allowed, server: kept };
    if let Ok(mut s) = state.lock() {
        s.sessions.insert(session.to_string(), entry);
    }
    if flavour() == mcp::Cli::ClaudeCodeAcp {
        server_of(state, session).await;
    }
}

/// Asks the client for permission for `call`, as claude-code-acp does;
/// the chosen option id (or `cancelled`).
async fn ask_permission(state: &Shared, session: &str, call: &Value) -> String {
    let n = ASKED.fetch_add(1, Ordering::Relaxed);
    let options = json!([{"kind": "allow_always", "name": "Always Allow", "optionId": "allow_always"},
                         {"kind": "allow_once", "name": "Allow", "optionId": "allow"},
                         {"kind": "reject_once", "name": "Reject", "optionId": "reject"}]);
    let tool_call = json!({"toolCallId": call["toolCallId"], "rawInput": call["rawInput"], "title": call["title"]});
    ask(state, json!(n), session, tool_call, options).await
}

/// Asks `session/request_permission` with request id `id`; the chosen
/// option id (or `cancelled`).
pub async fn ask(state: &Shared, id: Value, session: &str, tool_call: Value, options: Value) -> String {
    let (tx, rx) = oneshot::channel();
    if let Ok(mut s) = state.lock() {
        s.asked.insert(id.to_string(), tx);
    }
    record(json!({"asked": "session/request_permission", "id": id, "us": super::now_us() as u64}));
    send(&json!({"jsonrpc": "2.0", "id": id, "method": "session/request_permission", "params": {
        "options": options, "sessionId": session, "toolCall": tool_call}}));
    let answer = rx.await.unwrap_or(Value::Null);
    answer
        .pointer("/outcome/optionId")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| "cancelled".to_string())
}

/// A tool call of `kind` as claude-code-acp announces it in `cwd`: its
/// `tool_call` update (with the input filled in).
fn tool_call(kind: &str, cwd: &str) -> Value {
    let file = format!("{cwd}/notes.md");
    let (tool, title, input, locations) = match kind {
        "read" => ("Read", format!("Read {file}"), json!({"file_path": file}), json!([{"path": file, "line": 1}])),
        "edit" => {
            ("Write", format!("Write {file}"), json!({"file_path": file, "content": "x"}), json!([{"path": file}]))
        }
        "execute" => ("Bash", "`rm -rf build`".to_string(), json!({"command": "rm -rf build"}), json!([])),
        "search" => ("Grep", "grep \"TODO\"".to_string(), json!({"pattern": "TODO"}), json!([])),
        "fetch" => {
            ("WebFetch", "Fetch https://example.com".to_string(), json!({"url": "https://example.com"}), json!([]))
        }
        // A tool of some MCP server of the user's (kd's own are allowed).
        _ => ("mcp__notes__append", "mcp__notes__append".to_string(), json!({"text": "hi"}), json!([])),
    };
    json!({"_meta": {"claudeCode": {"toolName": tool}}, "toolCallId": "toolu_fake0001", "sessionUpdate": "tool_call",
           "rawInput": input, "status": "pending", "title": title, "kind": kind, "content": [], "locations": locations})
}

/// claude-code-acp's answer to a prompt whose tool call was rejected.
const REJECTED: &str = "Internal error: [ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null";

async fn turn(state: Shared, id: Value, session: String, cwd: String, prompt: String) {
    chunk(&session, "");
    update(
        &session,
        json!({"sessionUpdate": "plan", "entries": [{"content": "Answer", "priority": "high", "status": "in_progress"}]}),
    );
    if let Some(kind) = env("FAKE_PERMISSION") {
        chunk(&session, "Let me check.");
        let call = tool_call(&kind, &cwd);
        let mut announced = call.clone();
        announced["rawInput"] = json!({});
        update(&session, announced);
        update(&session, call.clone());
        let chosen = ask_permission(&state, &session, &call).await;
        record(json!({"permission": chosen, "kind": kind}));
        if !chosen.starts_with("allow") {
            update(
                &session,
                json!({"toolCallId": call["toolCallId"], "sessionUpdate": "tool_call_update", "status": "failed",
                       "rawOutput": "The user doesn't want to proceed with this tool use. The tool use was rejected."}),
            );
            if let Ok(mut s) = state.lock() {
                s.active.remove(&session);
            }
            error(&id, -32603, REJECTED);
            return;
        }
        update(
            &session,
            json!({"toolCallId": call["toolCallId"], "sessionUpdate": "tool_call_update", "status": "completed"}),
        );
    }
    let mut said = None;
    if let Some(cmd) = env("FAKE_COMMAND") {
        match super::permission::command(&state, &session, &cwd, &cmd).await {
            super::permission::Asked::Ran(text) => said = Some(format!("Tool said: {text}")),
            super::permission::Asked::Failed(message) => {
                if let Ok(mut s) = state.lock() {
                    s.active.remove(&session);
                }
                error(&id, -32603, message);
                return;
            }
            super::permission::Asked::Cancelled => {
                if let Ok(mut s) = state.lock() {
                    s.active.remove(&session);
                }
                reply(&id, json!({"stopReason": "cancelled"}));
                return;
            }
        }
    }
    if let Some(target) = env("FAKE_EDIT") {
        // An edit of TARGET (relative to the session's cwd, as written),
        // asked as claude-code-acp asks it; written only when allowed.
        let file = if target.starts_with('/') { target.clone() } else { format!("{cwd}/{target}") };
        let call = json!({"_meta": {"claudeCode": {"toolName": "Write"}}, "toolCallId": "toolu_fake0002",
                          "sessionUpdate": "tool_call", "rawInput": {"file_path": file, "content": "edited"},
                          "status": "pending", "title": format!("Write {file}"), "kind": "edit",
                          "content": [], "locations": [{"path": file}]});
        update(&session, call.clone());
        let chosen = ask_permission(&state, &session, &call).await;
        let allowed = chosen.starts_with("allow");
        if allowed {
            let _ = std::fs::write(&file, "edited by fake\n");
        }
        record(json!({"permission": chosen, "kind": "edit", "edit": file}));
        let status = if allowed { "completed" } else { "failed" };
        update(
            &session,
            json!({"toolCallId": "toolu_fake0002", "sessionUpdate": "tool_call_update", "status": status}),
        );
    }
    if mcp::wanted().is_none() {
        // As the adapter does: claude-code-acp's server started with the
        // session, codex-acp's with its first prompt.
        server_of(&state, &session).await;
    }
    if let Some((tool, arguments)) = mcp::wanted() {
        match call_tool(&state, &session, &tool, &arguments).await {
            Ok(text) => said = Some(format!("Tool said: {text}")),
            Err(()) => {
                // Rejected: claude-code-acp fails the prompt.
                if let Ok(mut s) = state.lock() {
                    s.active.remove(&session);
                }
                error(&id, -32603, REJECTED);
                return;
            }
        }
    }
    if let Some(cmd) = env("FAKE_RUN") {
        update(
            &session,
            json!({"sessionUpdate": "tool_call", "toolCallId": "call-2", "title": cmd, "kind": "execute", "status": "in_progress"}),
        );
        update(&session, json!({"sessionUpdate": "tool_call_update", "toolCallId": "call-2", "status": "completed"}));
    }
    if let Some(message) = env("FAKE_ERROR") {
        if let Ok(mut s) = state.lock() {
            s.active.remove(&session);
        }
        error(&id, -32603, &message);
        return;
    }
    let name = env("FAKE_NAME").unwrap_or_else(|| "fake".into());
    let text = said.unwrap_or_else(|| super::answer_for(&prompt, &name));
    let interval = Duration::from_millis(env_num("FAKE_INTERVAL_MS", 0));
    for (i, p) in pieces(&text, env_num("FAKE_DELTAS", 3) as usize).iter().enumerate() {
        if !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
        chunk(&session, p);
        if i == 0 {
            hold(&prompt).await;
        }
    }
    if env("FAKE_HANG").is_some() {
        std::future::pending::<()>().await;
    }
    if let Ok(mut s) = state.lock() {
        s.active.remove(&session);
    }
    reply(&id, json!({"stopReason": "end_turn"}));
}

/// A call of kd's `tool` in a prompt, as the adapter makes it: its
/// `tool_call` updates, a permission request when the adapter needs one
/// (claude-code-acp: unless `_meta` allowed `mcp__kd`; codex-acp: unless
/// the tool is annotated as needing none), then the call. The result's
/// text; `Err` when claude-code-acp's call was rejected (the prompt fails).
async fn call_tool(state: &Shared, session: &str, tool: &str, arguments: &Value) -> Result<String, ()> {
    let Some(server) = server_of(state, session).await else {
        mcp::record(json!({"error": "no MCP server kd was configured"}));
        return Ok("(no MCP server kd was configured)".to_string());
    };
    let allowed =
        state.lock().ok().and_then(|s| s.sessions.get(session).map(|s| s.allowed.clone())).unwrap_or_default();
    let cli = flavour();
    let call_id = "call_fakemcp01";
    let mut server = server.lock().await;
    let needs = match cli {
        mcp::Cli::CodexAcp => {
            update(
                session,
                json!({"sessionUpdate": "tool_call", "toolCallId": call_id, "title": format!("Tool: kd/{tool}"),
                                   "status": "in_progress", "rawInput": {"server": "kd", "tool": tool, "arguments": arguments}}),
            );
            let annotated = server.tool(tool).is_some_and(|t| {
                let hint = |k: &str| t.pointer(&format!("/annotations/{k}")).and_then(Value::as_bool);
                hint("readOnlyHint") == Some(true)
                    || (hint("readOnlyHint") == Some(false)
                        && hint("destructiveHint") == Some(false)
                        && hint("openWorldHint") == Some(false))
            });
            !annotated
        }
        _ => {
            let announce = |input: Value| {
                json!({"_meta": {"claudeCode": {"toolName": format!("mcp__kd__{tool}")}},
                "toolCallId": call_id, "sessionUpdate": "tool_call", "rawInput": input, "status": "pending",
                "title": format!("mcp__kd__{tool}"), "kind": "other", "content": []})
            };
            update(session, announce(json!({})));
            update(session, announce(arguments.clone()));
            !mcp::claude_allows(&allowed, tool)
        }
    };
    if needs {
        let chosen = match cli {
            mcp::Cli::CodexAcp => {
                let options = json!([{"optionId": "approved", "name": "Allow", "kind": "allow_once"},
                                     {"optionId": "approved-for-session", "name": "Allow for this session", "kind": "allow_always"},
                                     {"optionId": "approved-always", "name": "Allow and don't ask again", "kind": "allow_always"},
                                     {"optionId": "cancel", "name": "Cancel", "kind": "reject_once"}]);
                let tool_call = json!({"toolCallId": call_id, "status": "pending", "title": "Approve MCP tool call",
                    "rawInput": {"server_name": "kd", "id": format!("mcp_tool_call_approval_{call_id}"),
                                 "request": {"message": format!("Allow the kd MCP server to run tool \"{tool}\"?")}}});
                ask(
                    state,
                    json!(format!("fake-approval-{}", ASKED.fetch_add(1, Ordering::Relaxed))),
                    session,
                    tool_call,
                    options,
                )
                .await
            }
            _ => {
                ask_permission(
                    state,
                    session,
                    &json!({"toolCallId": call_id, "rawInput": arguments, "title": format!("mcp__kd__{tool}")}),
                )
                .await
            }
        };
        record(json!({"permission": chosen, "kind": "mcp", "tool": tool}));
        if !(chosen.starts_with("allow") || chosen.starts_with("approved")) {
            update(session, json!({"toolCallId": call_id, "sessionUpdate": "tool_call_update", "status": "failed"}));
            mcp::record(json!({"refused": chosen, "call": {"tool": tool, "arguments": arguments}}));
            return if cli == mcp::Cli::CodexAcp { Ok("user rejected MCP tool call".to_string()) } else { Err(()) };
        }
    }
    let out = mcp::call_on(&mut server, tool, arguments, |_| None).await;
    update(
        session,
        json!({"toolCallId": call_id, "sessionUpdate": "tool_call_update", "status": "completed",
                           "content": [{"type": "content", "content": {"type": "text", "text": out.text}}]}),
    );
    mcp::record(out.record);
    Ok(out.text)
}
