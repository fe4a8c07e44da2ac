//! The approval traffic of `fake-agent app-server`, as codex 0.169.0 sent
//! it (`captures/approvals/app-server-0.169.*`). `FAKE_STEPS` lists what the
//! "model" asks for before it answers, as the captures' stub did:
//! `C:CMD ;; E:CMD ;; P:PATH` — a command, a command asking to run outside
//! the sandbox (`require_escalated`, with a justification), a patch adding
//! PATH (relative to the thread's cwd unless absolute). Whether a step is
//! asked follows the thread's `approvalPolicy` and `sandbox`:
//!
//! | step | `untrusted` | `on-request` / `on-failure` | `never` |
//! |---|---|---|---|
//! | `C:` | asked (unless accepted for the session) | runs | runs |
//! | `E:` | asked, `reason` set | asked, `reason` set | refused unasked |
//! | `P:` | asked | asked when the sandbox is `read-only` or PATH is outside the cwd | applied when writable |
//!
//! A command is asked as `thread/status/changed` (`waitingOnApproval`),
//! `item/started` (the `commandExecution`), then the server request
//! `item/commandExecution/requestApproval` (ids from 0 per process); a
//! patch as `item/started` (the `fileChange` with its diff), the status,
//! then `item/fileChange/requestApproval` (no diff: it is in the item).
//! The answer is waited for as long as it takes, then `serverRequest/resolved`:
//! `accept` / `acceptForSession` run it (a command in the thread's cwd, a
//! patch written), `decline` declines the item and the model goes on,
//! `cancel` declines it and interrupts the turn at once, anything else
//! (an error, an unknown decision) fails the item. `turn/interrupt` while a
//! request waits ends the turn, then resolves the request. The answer is
//! `Tool said: ` and what each step gave. `FAKE_RECORD` gets
//! `{"asked": METHOD, "id", "item", "us"}` when a request is sent and
//! `{"answered": METHOD, "id", "result" | "error", "us"}` when its answer
//! comes (µs since the epoch, for the benches).

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::appserver::{Shared, note, send};
use super::{env, now_us, record_line};

/// One step of `FAKE_STEPS`.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Command(String),
    Escalated(String),
    Patch(String),
}

fn steps() -> Vec<Step> {
    let Some(steps) = env("FAKE_STEPS") else { return Vec::new() };
    steps
        .split(";;")
        .filter_map(|s| {
            let s = s.trim();
            let (kind, what) = s.split_once(':')?;
            let what = what.trim().to_string();
            match kind {
                "C" => Some(Step::Command(what)),
                "E" => Some(Step::Escalated(what)),
                "P" => Some(Step::Patch(what)),
                _ => None,
            }
        })
        .collect()
}

/// How the steps of a turn went: what each gave the model, or the turn was
/// interrupted (a `cancel` answer).
pub enum Stepped {
    Said(Vec<String>),
    Interrupted,
}

/// Runs `FAKE_STEPS` in turn `turn` of `thread`; `with` adds the ids to a
/// notification's params.
pub async fn run(state: &Shared, thread: &str, turn: &str, with: &(dyn Fn(Value) -> Value + Sync)) -> Stepped {
    let (cwd, sandbox, approval) = state
        .lock()
        .ok()
        .and_then(|s| {
            let t = s.threads.get(thread)?;
            Some((
                t.cwd.clone(),
                t.policy.0.as_str().unwrap_or("").to_string(),
                t.policy.1.as_str().unwrap_or("").to_string(),
            ))
        })
        .unwrap_or_default();
    let mut said = Vec::new();
    for (n, step) in steps().into_iter().enumerate() {
        let item = format!("call_fake{:04}", n + 1);
        let outcome = match &step {
            Step::Command(cmd) | Step::Escalated(cmd) => {
                let escalated = matches!(step, Step::Escalated(_));
                let for_session =
                    state.lock().ok().and_then(|s| s.threads.get(thread).map(|t| t.accepted.contains(cmd)));
                let asked = match approval.as_str() {
                    "untrusted" => !for_session.unwrap_or(false),
                    "never" => false,
                    _ => escalated,
                };
                if escalated && approval == "never" {
                    said.push("approval policy is Never; reject command — you cannot ask for escalated permissions if the approval policy is Never".into());
                    continue;
                }
                command(state, thread, turn, with, &item, &cwd, cmd, escalated, asked).await
            }
            Step::Patch(path) => {
                let path = if path.starts_with('/') { path.clone() } else { format!("{cwd}/{path}") };
                let inside = path.starts_with(&format!("{cwd}/"));
                let asked = match approval.as_str() {
                    "untrusted" => true,
                    "never" => false,
                    _ => sandbox == "read-only" || !inside,
                };
                if !asked && (sandbox == "read-only" || !inside) && sandbox != "danger-full-access" {
                    said.push("patch rejected: writing is blocked by the sandbox".into());
                    continue;
                }
                patch(state, thread, turn, with, &item, &path, asked).await
            }
        };
        match outcome {
            Some(text) => said.push(text),
            None => return Stepped::Interrupted,
        }
    }
    Stepped::Said(said)
}

/// Sends request `method` and waits for the client's answer: its result,
/// or `Err` with its error (or for no answer: the turn was interrupted).
async fn ask(state: &Shared, thread: &str, method: &str, item: &str, params: Value) -> Result<Value, Value> {
    let (tx, rx) = oneshot::channel();
    let id = match state.lock() {
        Ok(mut s) => {
            let id = s.next_request;
            s.next_request += 1;
            s.asked.insert(id.to_string(), (method.to_string(), tx));
            if let Some(t) = s.threads.get_mut(thread) {
                t.pending.push(id);
            }
            id
        }
        Err(_) => return Err(Value::Null),
    };
    record_line(json!({"asked": method, "id": id, "item": item, "us": now_us() as u64}));
    send(&json!({"method": method, "id": id, "params": params}));
    let answer = rx.await.unwrap_or(Err(Value::Null));
    if let Ok(mut s) = state.lock()
        && let Some(t) = s.threads.get_mut(thread)
    {
        t.pending.retain(|p| *p != id);
    }
    note(state, "serverRequest/resolved", json!({"threadId": thread, "requestId": id}));
    answer
}

/// The client's answer to one of our requests (a line with an id and no
/// method), handed to the step waiting for it and recorded.
pub fn answered(state: &Shared, msg: &Value) {
    let Some(id) = msg.get("id") else { return };
    let key = match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let waiting = state.lock().ok().and_then(|mut s| s.asked.remove(&key));
    let method = waiting.as_ref().map(|(m, _)| m.clone());
    let answer = match msg.get("error") {
        Some(e) => Err(e.clone()),
        None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
    };
    let mut line = json!({"answered": method, "id": id, "us": now_us() as u64});
    match &answer {
        Ok(r) => line["result"] = r.clone(),
        Err(e) => line["error"] = e.clone(),
    }
    record_line(line);
    if let Some((_, tx)) = waiting {
        let _ = tx.send(answer);
    }
}

/// The decision in an answer (`None`: an error or no decision codex knows).
fn decision(answer: &Result<Value, Value>) -> Option<&str> {
    let d = answer.as_ref().ok()?.get("decision")?.as_str()?;
    ["accept", "acceptForSession", "decline", "cancel"].contains(&d).then_some(d)
}

fn waiting(state: &Shared, thread: &str, on: bool) {
    let flags: Vec<&str> = if on { vec!["waitingOnApproval"] } else { vec![] };
    note(
        state,
        "thread/status/changed",
        json!({"threadId": thread, "status": {"type": "active", "activeFlags": flags}}),
    );
}

#[allow(clippy::too_many_arguments)]
async fn command(
    state: &Shared,
    thread: &str,
    turn: &str,
    with: &(dyn Fn(Value) -> Value + Sync),
    item: &str,
    cwd: &str,
    cmd: &str,
    escalated: bool,
    asked: bool,
) -> Option<String> {
    let shown = format!("/bin/bash -lc '{cmd}'");
    let actions = json!([{"type": "unknown", "command": cmd}]);
    let exec = |status: &str, exit: Value, output: Value| {
        json!({"type": "commandExecution", "id": item, "command": shown, "cwd": cwd, "processId": null,
               "source": "agent", "status": status, "commandActions": actions, "aggregatedOutput": output,
               "exitCode": exit, "durationMs": null})
    };
    let mut accepted_for_session = false;
    if asked {
        waiting(state, thread, true);
        note(state, "item/started", with(json!({"item": exec("inProgress", Value::Null, Value::Null)})));
        let amendment: Vec<&str> = cmd.split_whitespace().collect();
        let mut params = json!({"kind": "command", "threadId": thread, "turnId": turn, "itemId": item,
            "startedAtMs": now_us() / 1000, "environmentId": "local", "command": shown, "cwd": cwd,
            "commandActions": actions, "proposedExecpolicyAmendment": amendment,
            "availableDecisions": ["accept", {"acceptWithExecpolicyAmendment": {"execpolicy_amendment": amendment}}, "cancel"]});
        if escalated {
            params["reason"] = json!("The test asks to run this outside the sandbox.");
        }
        let answer = ask(state, thread, "item/commandExecution/requestApproval", item, params).await;
        waiting(state, thread, false);
        match decision(&answer) {
            Some("accept") => {}
            Some("acceptForSession") => accepted_for_session = true,
            Some("decline") => {
                note(state, "item/completed", with(json!({"item": exec("declined", Value::Null, Value::Null)})));
                return Some("exec command rejected by user".into());
            }
            Some(_) => {
                note(state, "item/completed", with(json!({"item": exec("declined", Value::Null, Value::Null)})));
                return None;
            }
            None => {
                note(state, "item/completed", with(json!({"item": exec("failed", Value::Null, Value::Null)})));
                return Some("Rejected(\"approval request failed\")".into());
            }
        }
    } else {
        note(state, "item/started", with(json!({"item": exec("inProgress", Value::Null, Value::Null)})));
    }
    if accepted_for_session
        && let Ok(mut s) = state.lock()
        && let Some(t) = s.threads.get_mut(thread)
    {
        t.accepted.push(cmd.to_string());
    }
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(if cwd.is_empty() { "." } else { cwd })
        .stdin(std::process::Stdio::null())
        .output();
    let (code, text) = match out {
        Ok(o) => (
            o.status.code().unwrap_or(-1),
            format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
        ),
        Err(e) => (-1, e.to_string()),
    };
    note(state, "item/completed", with(json!({"item": exec("completed", json!(code), json!(text))})));
    Some(format!("ran `{cmd}`: exit code {code}"))
}

async fn patch(
    state: &Shared,
    thread: &str,
    turn: &str,
    with: &(dyn Fn(Value) -> Value + Sync),
    item: &str,
    path: &str,
    asked: bool,
) -> Option<String> {
    const CONTENT: &str = "written by the stub\n";
    let change = |status: &str| {
        json!({"type": "fileChange", "id": item, "changes": [{"path": path, "kind": {"type": "add"}, "diff": CONTENT}],
               "status": status})
    };
    note(state, "item/started", with(json!({"item": change("inProgress")})));
    if asked {
        waiting(state, thread, true);
        let params = json!({"threadId": thread, "turnId": turn, "itemId": item, "startedAtMs": now_us() / 1000,
                            "reason": null, "grantRoot": null});
        let answer = ask(state, thread, "item/fileChange/requestApproval", item, params).await;
        waiting(state, thread, false);
        match decision(&answer) {
            Some("accept" | "acceptForSession") => {}
            Some("decline") => {
                note(state, "item/completed", with(json!({"item": change("declined")})));
                return Some("patch rejected by user".into());
            }
            None => {
                note(state, "item/completed", with(json!({"item": change("declined")})));
                return Some("Rejected(\"approval request failed\")".into());
            }
            Some(_) => {
                note(state, "item/completed", with(json!({"item": change("declined")})));
                return None;
            }
        }
    }
    match std::fs::write(path, CONTENT) {
        Ok(()) => {
            note(state, "item/completed", with(json!({"item": change("completed")})));
            Some(format!("Success. Updated the following files:\nA {path}"))
        }
        Err(e) => {
            note(state, "item/completed", with(json!({"item": change("failed")})));
            Some(format!("patch failed: {e}"))
        }
    }
}
