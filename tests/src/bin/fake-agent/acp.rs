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
//! claude-code-acp's `Internal error: [ede_diagnostic] …`. `FAKE_RUN`
//! reports a tool call. The answer follows the usual
//! `FAKE_*` knobs; `FAKE_ERROR` fails the prompt with a JSON-RPC error.
//! `FAKE_SILENT=METHOD` never answers that request (e.g. `initialize`,
//! `session/new`), recording `{"silent": METHOD, "pid": …}` when it comes.
//! `FAKE_IGNORE_EOF` keeps it running after stdin closes; `FAKE_CHILD`
//! starts a long-lived child first (its pid recorded as `child`).
//! `FAKE_RECORD` gets a line per prompt (`stdin` is the prompt, `session`,
//! `loaded`), per permission answer (`permission`) and per cancel.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::{env, env_num, hold, pieces};

#[derive(Default)]
struct State {
    sessions: HashMap<String, (String, bool)>,
    /// The running prompt of a session: its request id and task.
    active: HashMap<String, (Value, tokio::task::AbortHandle)>,
    /// Our requests to the client, waiting for its answer.
    asked: HashMap<u64, oneshot::Sender<Value>>,
}

type Shared = Arc<Mutex<State>>;

static NEXT: AtomicU64 = AtomicU64::new(1);
/// The ids of our requests to the client: numbers from 0, as claude-code-acp's.
static ASKED: AtomicU64 = AtomicU64::new(0);

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

fn update(session: &str, update: Value) {
    send(&json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}));
}

fn chunk(session: &str, text: &str) {
    update(session, json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}));
}

fn record(line: Value) {
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
            // The client's answer to one of our requests.
            let waiting = msg.get("id").and_then(Value::as_u64).and_then(|id| state.lock().ok()?.asked.remove(&id));
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
                if let Ok(mut s) = state.lock() {
                    s.sessions.insert(session.clone(), (cwd, false));
                }
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
                if let Ok(mut s) = state.lock() {
                    s.sessions.insert(session.clone(), (cwd, true));
                }
                reply(&id, Value::Null);
            }
            ("session/prompt", Some(id)) => {
                let known = state.lock().ok().and_then(|s| s.sessions.get(&session).cloned());
                let Some((cwd, loaded)) = known else {
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
                              "session": session, "loaded": loaded}));
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

/// Asks the client for permission for `call`, as claude-code-acp does;
/// the chosen option id (or `cancelled`).
async fn ask_permission(state: &Shared, session: &str, call: &Value) -> String {
    let n = ASKED.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = oneshot::channel();
    if let Ok(mut s) = state.lock() {
        s.asked.insert(n, tx);
    }
    send(&json!({"jsonrpc": "2.0", "id": n, "method": "session/request_permission", "params": {
        "options": [{"kind": "allow_always", "name": "Always Allow", "optionId": "allow_always"},
                    {"kind": "allow_once", "name": "Allow", "optionId": "allow"},
                    {"kind": "reject_once", "name": "Reject", "optionId": "reject"}],
        "sessionId": session,
        "toolCall": {"toolCallId": call["toolCallId"], "rawInput": call["rawInput"], "title": call["title"]}}}));
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
        _ => ("mcp__kd__send", "mcp__kd__send".to_string(), json!({"to": ["codex"], "body": "hi"}), json!([])),
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
    let text = super::answer_for(&prompt, &name);
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
