//! `fake-agent app-server …`: plays `codex app-server` as recorded in
//! `tests/fixtures/codex-app-server` — JSON-RPC over stdio without the
//! `"jsonrpc"` field, `emittedAtMs` on every notification, unsolicited
//! notifications (`configWarning`, `remoteControl/status/changed`, rate
//! limits and token usage unless opted out), errors before `initialize`
//! and on a second one, `thread/start`, `thread/resume` (any id but one
//! containing `missing`, as codex finds its rollout on disk), `turn/start`
//! (which steers a turn still running instead of starting one),
//! `turn/interrupt`, and a failing turn as codex reports an API error.
//! With `FAKE_IGNORE_TERM`, `turn/interrupt` is answered but the turn goes on.
//! `FAKE_SILENT=METHOD` never answers that request (`initialize`,
//! `thread/start`, …), recording `{"silent": METHOD, "pid": …}`;
//! `FAKE_IGNORE_EOF` keeps it running after stdin closes.
//! `thread/unsubscribe` unloads a thread (its MCP server ends with it,
//! `thread/closed` follows) and appends `{"unsubscribed": THREAD}` to the
//! file `FAKE_RECORD_UNLOAD` names.
//! Every turn's answer follows the same `FAKE_*` knobs as the other formats;
//! `FAKE_RUN` runs in the thread's `cwd`, as codex runs a command.
//! `FAKE_RECORD` gets one line per turn (`stdin` is the prompt, `thread`
//! the codex thread, `resumed` whether it came from `thread/resume`,
//! `sandbox`, `approval` and `config` what the thread was opened with).

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::{env, env_num, hold, mcp, now_us, pieces};

#[derive(Default)]
pub struct Thread {
    pub cwd: String,
    /// `sandbox` and `approvalPolicy` of the thread/start or thread/resume.
    pub policy: (Value, Value),
    /// The `config` it was opened with.
    config: Value,
    resumed: bool,
    /// The running turn: its id and its task.
    active: Option<(String, tokio::task::AbortHandle)>,
    /// kd's MCP server as the thread was opened with it (`config`), and the
    /// server, started then when `FAKE_MCP_CALL` asks for a call, kept
    /// while the thread stays loaded (as codex keeps it).
    mcp: Option<mcp::Given>,
    server: Option<Arc<tokio::sync::Mutex<mcp::Session>>>,
    /// Commands accepted for the session (`acceptForSession`): not asked again.
    pub accepted: Vec<String>,
    /// Our requests of the running turn that wait for an answer.
    pub pending: Vec<u64>,
}

#[derive(Default)]
pub struct State {
    initialized: bool,
    opted_out: Vec<String>,
    pub threads: HashMap<String, Thread>,
    counter: u64,
    /// The id of our next request to the client (from 0, as codex's).
    pub next_request: u64,
    /// Our requests waiting for the client's answer, by id: their method
    /// and who waits.
    pub asked: HashMap<String, (String, tokio::sync::oneshot::Sender<Result<Value, Value>>)>,
}

pub type Shared = Arc<Mutex<State>>;

fn now_ms() -> u128 {
    now_us() / 1000
}

pub fn send(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn reply(id: &Value, result: Value) {
    send(&json!({"id": id, "result": result}));
}

fn error(id: &Value, message: &str) {
    send(&json!({"error": {"code": -32600, "message": message}, "id": id}));
}

pub fn note(state: &Shared, method: &str, params: Value) {
    let muted = state.lock().map(|s| s.opted_out.iter().any(|m| m == method)).unwrap_or(false);
    if !muted {
        send(&json!({"method": method, "params": params, "emittedAtMs": now_ms()}));
    }
}

fn new_id(state: &Shared, what: &str) -> String {
    let n = state.lock().map(|mut s| {
        s.counter += 1;
        s.counter
    });
    format!("01a202f1-{what}-{}-{}", std::process::id(), n.unwrap_or(0))
}

fn thread_json(id: &str, cwd: &str) -> Value {
    json!({"id": id, "environments": [{"environmentId": "local", "cwd": cwd, "runtimeWorkspaceRoots": [cwd]}],
           "extra": null, "sessionId": id, "forkedFromId": null, "preview": "", "ephemeral": false})
}

fn turn_json(id: &str, status: &str, error: Value) -> Value {
    json!({"id": id, "rootTurnId": id, "items": [], "itemsView": "notLoaded", "status": status, "error": error,
           "startedAt": null, "completedAt": null, "durationMs": null})
}

/// What codex 0.169.0's clap says of the first argument `codex app-server`
/// does not take (it takes `-c`/`--config`, `--enable`, `--disable`,
/// `--listen` with a value, and `--analytics-default-enabled`), if any.
pub fn refused_argument(args: &[String]) -> Option<String> {
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        let name = a.split('=').next().unwrap_or_default();
        match name {
            "-c" | "--config" | "--enable" | "--disable" | "--listen" if !a.contains('=') => {
                rest.next();
            }
            "-c" | "--config" | "--enable" | "--disable" | "--listen" | "--analytics-default-enabled" => {}
            _ => {
                return Some(format!(
                    "error: unexpected argument '{a}' found\n\n  tip: to pass '{a}' as a value, use '-- {a}'\n\n\
                     Usage: codex app-server [OPTIONS] [COMMAND]\n\nFor more information, try '--help'.\n"
                ));
            }
        }
    }
    None
}

pub async fn serve(args: Vec<String>) -> i32 {
    let state: Shared = Arc::default();
    let mut lines = super::stdin_lines();
    while let Some(line) = lines.recv().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        let method = msg.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
        if method.is_empty() && msg.get("id").is_some() {
            // The client's answer to one of our requests.
            super::approvals::answered(&state, &msg);
            continue;
        }
        let Some(id) = msg.get("id").cloned() else {
            continue; // `initialized`, or an answer to a request of ours
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let initialized = state.lock().map(|s| s.initialized).unwrap_or(false);
        match method.as_str() {
            m if env("FAKE_SILENT").as_deref() == Some(m) => {
                // A request it never answers (a hung codex).
                if let Some(path) = env("FAKE_RECORD")
                    && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
                {
                    let _ = f.write_all(format!("{}\n", json!({"silent": m, "pid": std::process::id()})).as_bytes());
                }
            }
            "initialize" if initialized => error(&id, "Already initialized"),
            "initialize" => {
                if let Ok(mut s) = state.lock() {
                    s.initialized = true;
                    s.opted_out = params
                        .pointer("/capabilities/optOutNotificationMethods")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(|m| m.as_str().map(str::to_string)).collect())
                        .unwrap_or_default();
                }
                let name = params.pointer("/clientInfo/name").and_then(Value::as_str).unwrap_or("client");
                reply(
                    &id,
                    json!({"userAgent": format!("{name}/0.169.0 (fake)"), "codexHome": "/tmp/fake-codex",
                           "platformFamily": "unix", "platformOs": "linux"}),
                );
            }
            _ if !initialized => error(&id, "Not initialized"),
            "thread/start" | "thread/resume" => {
                let cwd = params.get("cwd").and_then(Value::as_str).map(str::to_string).unwrap_or_else(super::cwd);
                let resumed = method == "thread/resume";
                let thread = if resumed {
                    let Some(t) = params.get("threadId").and_then(Value::as_str) else {
                        error(&id, "Invalid request: missing field `threadId`");
                        continue;
                    };
                    if t.contains("missing") {
                        error(&id, &format!("no rollout found for thread id {t}"));
                        continue;
                    }
                    t.to_string()
                } else {
                    env("FAKE_SESSION_ID").unwrap_or_else(|| new_id(&state, "thread"))
                };
                note(
                    &state,
                    "configWarning",
                    json!({"summary": "Codex could not find bubblewrap on PATH.", "details": null}),
                );
                note(&state, "remoteControl/status/changed", json!({"status": "disabled", "serverName": "fake"}));
                let given = params.get("config").and_then(mcp::from_codex_config);
                // A thread already loaded keeps its server; one opened now
                // starts the server it is given (codex: at thread/start).
                let loaded = state.lock().ok().and_then(|s| s.threads.get(&thread).and_then(|t| t.server.clone()));
                let server = match (&loaded, &given) {
                    (Some(_), _) => loaded.clone(),
                    (None, Some(g)) if mcp::starts() => match mcp::start_noted(g, mcp::Cli::Codex).await {
                        Ok(session) => Some(Arc::new(tokio::sync::Mutex::new(session))),
                        Err(e) => {
                            note(
                                &state,
                                "mcpServer/startupStatus/updated",
                                json!({"threadId": thread, "name": "kd", "status": "failed", "error": e}),
                            );
                            None
                        }
                    },
                    _ => None,
                };
                if let Ok(mut s) = state.lock() {
                    let policy = (params["sandbox"].clone(), params["approvalPolicy"].clone());
                    let kept = s.threads.get(&thread).and_then(|t| t.mcp.clone());
                    let mcp = if loaded.is_some() { kept } else { given };
                    s.threads.insert(
                        thread.clone(),
                        Thread {
                            cwd: cwd.clone(),
                            resumed,
                            policy,
                            config: params["config"].clone(),
                            active: None,
                            mcp,
                            server,
                            accepted: Vec::new(),
                            pending: Vec::new(),
                        },
                    );
                }
                reply(&id, json!({"thread": thread_json(&thread, &cwd), "model": "fake", "cwd": cwd}));
                if !resumed {
                    note(&state, "thread/started", json!({"thread": thread_json(&thread, &cwd)}));
                }
            }
            "turn/start" => {
                let thread = params.get("threadId").and_then(Value::as_str).unwrap_or_default().to_string();
                let Some(input) = params.get("input").and_then(Value::as_array) else {
                    error(&id, "Invalid request: missing field `input`");
                    continue;
                };
                let prompt: String =
                    input.iter().filter_map(|i| i.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n");
                let known = state.lock().map(|s| s.threads.get(&thread).map(|t| t.active.clone())).ok().flatten();
                match known {
                    None => error(&id, &format!("thread not found: {thread}")),
                    // codex steers the running turn with the new input.
                    Some(Some((turn, _))) => {
                        record(&args, &state, &thread, &turn, &prompt, true);
                        reply(&id, json!({"turn": turn_json(&turn, "inProgress", Value::Null)}));
                    }
                    Some(None) => {
                        let turn = new_id(&state, "turn");
                        record(&args, &state, &thread, &turn, &prompt, false);
                        reply(&id, json!({"turn": turn_json(&turn, "inProgress", Value::Null)}));
                        let task = tokio::spawn(run_turn(state.clone(), thread.clone(), turn.clone(), prompt));
                        if let Ok(mut s) = state.lock()
                            && let Some(t) = s.threads.get_mut(&thread)
                        {
                            t.active = Some((turn, task.abort_handle()));
                        }
                    }
                }
            }
            "thread/unsubscribe" => {
                let thread = params.get("threadId").and_then(Value::as_str).unwrap_or_default().to_string();
                let gone = state.lock().ok().and_then(|mut s| s.threads.remove(&thread));
                match gone {
                    None => reply(&id, json!({"status": "notLoaded"})),
                    Some(t) => {
                        // Unloaded: its MCP server ends with it.
                        if let Some(server) = t.server
                            && let Ok(server) = Arc::try_unwrap(server)
                        {
                            server.into_inner().close().await;
                        }
                        if let Some(path) = env("FAKE_RECORD_UNLOAD")
                            && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
                        {
                            let _ = f.write_all(format!("{}\n", json!({"unsubscribed": thread})).as_bytes());
                        }
                        reply(&id, json!({"status": "unsubscribed"}));
                        note(&state, "thread/closed", json!({"threadId": thread}));
                    }
                }
            }
            "turn/interrupt" => {
                let thread = params.get("threadId").and_then(Value::as_str).unwrap_or_default().to_string();
                let turn = params.get("turnId").and_then(Value::as_str).unwrap_or_default().to_string();
                if env("FAKE_IGNORE_TERM").is_some() {
                    // A turn that does not stop: the request is taken, nothing ends.
                    reply(&id, json!({}));
                    continue;
                }
                let active = state.lock().ok().and_then(|mut s| {
                    let t = s.threads.get_mut(&thread)?;
                    if t.active.as_ref().is_some_and(|(a, _)| *a == turn) {
                        t.active.take().map(|a| (a, std::mem::take(&mut t.pending)))
                    } else {
                        None
                    }
                });
                match active {
                    None => error(&id, "no active turn to interrupt"),
                    Some(((turn, task), pending)) => {
                        task.abort();
                        if let Some(path) = env("FAKE_RECORD")
                            && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
                        {
                            let _ = f.write_all(format!("{}\n", json!({"interrupted": turn})).as_bytes());
                        }
                        reply(&id, json!({}));
                        note(&state, "thread/status/changed", json!({"threadId": thread, "status": {"type": "idle"}}));
                        note(
                            &state,
                            "turn/completed",
                            json!({"threadId": thread, "turn": turn_json(&turn, "interrupted", Value::Null)}),
                        );
                        // A request the turn waited on is settled with it.
                        for id in pending {
                            note(&state, "serverRequest/resolved", json!({"threadId": thread, "requestId": id}));
                        }
                    }
                }
            }
            other => error(&id, &format!("Invalid request: unknown variant `{other}`")),
        }
    }
    if env("FAKE_IGNORE_EOF").is_some() {
        // A process that does not exit when its stdin closes.
        std::future::pending::<()>().await;
    }
    0
}

/// One `FAKE_RECORD` line for a turn.
fn record(args: &[String], state: &Shared, thread: &str, turn: &str, prompt: &str, steered: bool) {
    let Some(path) = env("FAKE_RECORD") else { return };
    let (cwd, resumed, (sandbox, approval), given, config) = state
        .lock()
        .ok()
        .and_then(|s| {
            s.threads.get(thread).map(|t| (t.cwd.clone(), t.resumed, t.policy.clone(), t.mcp.clone(), t.config.clone()))
        })
        .unwrap_or_default();
    let line = json!({"argv": args, "stdin": prompt, "cwd": cwd, "pid": std::process::id(), "thread": thread,
                      "turn": turn, "resumed": resumed, "steered": steered, "sandbox": sandbox, "approval": approval,
                      "config": config,
                      "mcp": given.as_ref().map(mcp::Given::record), "env": mcp::kd_env()});
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// The notifications of one turn, as codex sends them.
async fn run_turn(state: Shared, thread: String, turn: String, prompt: String) {
    let ids = json!({"threadId": thread, "turnId": turn});
    let with = |extra: Value| {
        let mut p = ids.clone();
        if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        p
    };
    note(&state, "thread/status/changed", json!({"threadId": thread, "status": {"type": "active", "activeFlags": []}}));
    note(&state, "turn/started", json!({"threadId": thread, "turn": turn_json(&turn, "inProgress", Value::Null)}));
    let user =
        json!({"type": "userMessage", "id": format!("{turn}-user"), "content": [{"type": "text", "text": prompt}]});
    note(&state, "item/started", with(json!({"item": user})));
    note(&state, "item/completed", with(json!({"item": user})));
    let end = |status: &str, error: Value| {
        note(&state, "thread/status/changed", json!({"threadId": thread, "status": {"type": "idle"}}));
        note(&state, "turn/completed", json!({"threadId": thread, "turn": turn_json(&turn, status, error)}));
        if let Ok(mut s) = state.lock()
            && let Some(t) = s.threads.get_mut(&thread)
        {
            t.active = None;
        }
    };
    if let Some(message) = env("FAKE_ERROR").or_else(|| env("FAKE_API_ERROR")) {
        let body = json!({"error": {"message": message, "type": "invalid_request_error", "code": null}}).to_string();
        let error = json!({"message": body, "codexErrorInfo": "other", "additionalDetails": null});
        note(&state, "thread/status/changed", json!({"threadId": thread, "status": {"type": "systemError"}}));
        note(&state, "error", with(json!({"error": error, "willRetry": false})));
        end("failed", error);
        return;
    }
    let reasoning =
        json!({"type": "reasoning", "id": format!("{turn}-rs"), "summary": ["**Planning**"], "content": []});
    note(&state, "item/started", with(json!({"item": reasoning})));
    note(
        &state,
        "item/reasoning/summaryTextDelta",
        with(json!({"itemId": format!("{turn}-rs"), "delta": "**Planning**"})),
    );
    note(&state, "item/completed", with(json!({"item": reasoning})));
    // What the model asks for first (`FAKE_STEPS`), as codex asks it.
    let said = match super::approvals::run(&state, &thread, &turn, &with).await {
        super::approvals::Stepped::Said(said) => said,
        super::approvals::Stepped::Interrupted => {
            end("interrupted", Value::Null);
            return;
        }
    };
    let ran = match env("FAKE_RUN") {
        Some(cmd) => {
            let item = |status: &str, output: &str| {
                json!({"type": "commandExecution", "id": format!("{turn}-call"), "command": format!("/bin/bash -lc '{cmd}'"),
                       "cwd": "", "status": status, "aggregatedOutput": output})
            };
            note(&state, "item/started", with(json!({"item": item("inProgress", "")})));
            // In the thread's cwd, as codex runs a command.
            let cwd = state.lock().ok().and_then(|s| s.threads.get(&thread).map(|t| t.cwd.clone())).unwrap_or_default();
            let mut sh = std::process::Command::new("sh");
            if !cwd.is_empty() {
                sh.current_dir(&cwd);
            }
            let out = sh
                .arg("-c")
                .arg(&cmd)
                .stdin(std::process::Stdio::null())
                .output()
                .map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
                .unwrap_or_default();
            note(&state, "item/completed", with(json!({"item": item("completed", &out)})));
            out
        }
        None => String::new(),
    };
    let name = env("FAKE_NAME").unwrap_or_else(|| "fake".into());
    let answer = match mcp::wanted() {
        Some((tool, arguments)) => format!("Tool said: {}", call_tool(&state, &thread, &turn, &tool, &arguments).await),
        None if !said.is_empty() => format!("Tool said: {}", said.join("\n")),
        None => super::answer_for(&prompt, &name),
    };
    let mut text =
        answer.replace("{run}", ran.trim()).replace("{pid}", &std::process::id().to_string()).replace("{turn}", &turn);
    if env("FAKE_ECHO_LABEL").is_some() {
        text = format!("{name}: {text}");
    }
    let msg = format!("{turn}-msg");
    let message = |t: &str| json!({"type": "agentMessage", "id": msg, "text": t, "phase": null});
    note(&state, "item/started", with(json!({"item": message("")})));
    let n = env_num("FAKE_DELTAS", 3) as usize;
    let stamped = env("FAKE_STAMP").is_some();
    let fixed = env("FAKE_PIECE");
    let parts = if stamped || fixed.is_some() || n == 0 { vec![String::new(); n] } else { pieces(&text, n) };
    let interval = Duration::from_millis(env_num("FAKE_INTERVAL_MS", 0));
    let rate = env_num("FAKE_RATE", 0);
    let start = tokio::time::Instant::now();
    let mut streamed = String::new();
    for (i, p) in parts.iter().enumerate() {
        if let Some(step) = (i as u64 * 1_000_000).checked_div(rate) {
            tokio::time::sleep_until(start + Duration::from_micros(step)).await;
        } else if !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
        let piece = match (&fixed, stamped) {
            (_, true) => format!("[t={}]", now_us()),
            (Some(f), false) => f.clone(),
            _ => p.clone(),
        };
        streamed.push_str(&piece);
        note(&state, "item/agentMessage/delta", with(json!({"itemId": msg, "delta": piece})));
        if i == 0 {
            hold(&prompt).await;
        }
    }
    if env("FAKE_HANG").is_some() {
        std::future::pending::<()>().await;
    }
    let final_text = if stamped || fixed.is_some() { streamed } else { text };
    note(&state, "item/completed", with(json!({"item": message(&final_text)})));
    note(
        &state,
        "thread/tokenUsage/updated",
        with(json!({"tokenUsage": {"total": {"totalTokens": 15, "inputTokens": 10, "outputTokens": 5},
                                   "last": {"totalTokens": 15, "inputTokens": 10, "outputTokens": 5}}})),
    );
    note(&state, "account/rateLimits/updated", json!({"rateLimits": {"limitId": "codex"}}));
    end("completed", Value::Null);
}

/// A call of kd's `tool` in a turn, as codex makes it: an `mcpToolCall`
/// item, refused under approval `never` unless kd approved the server's
/// tools (or they are annotated as needing no approval). The result's text.
async fn call_tool(state: &Shared, thread: &str, turn: &str, tool: &str, arguments: &Value) -> String {
    let (given, server, approval) = state
        .lock()
        .ok()
        .and_then(|s| s.threads.get(thread).map(|t| (t.mcp.clone(), t.server.clone(), t.policy.1.clone())))
        .unwrap_or_default();
    let (Some(given), Some(server)) = (given, server) else {
        mcp::record(json!({"error": "no MCP server kd was configured"}));
        return "(no MCP server kd was configured)".to_string();
    };
    let ids = json!({"threadId": thread, "turnId": turn});
    let item = |status: &str, result: Value, error: Value| {
        json!({"type": "mcpToolCall", "id": format!("{turn}-mcp"), "server": "kd", "tool": tool, "status": status,
               "arguments": arguments, "result": result, "error": error})
    };
    let with = |item: Value| {
        let mut p = ids.clone();
        p["item"] = item;
        p
    };
    note(state, "item/started", with(item("inProgress", Value::Null, Value::Null)));
    let mut session = server.lock().await;
    let never = approval == "never";
    let out = mcp::call_on(&mut session, tool, arguments, |s| {
        (never && !s.tool(tool).is_some_and(|t| mcp::codex_approves(&given, t)))
            .then(|| mcp::NEEDS_APPROVAL.to_string())
    })
    .await;
    let failed = out.record.get("result").is_none();
    let done = if failed {
        item("failed", Value::Null, json!({"message": out.text}))
    } else {
        item("completed", json!({"content": [{"type": "text", "text": out.text}]}), Value::Null)
    };
    note(state, "item/completed", with(done));
    mcp::record(out.record);
    out.text
}
