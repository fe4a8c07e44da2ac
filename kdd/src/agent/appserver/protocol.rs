//! The `codex app-server` protocol as kd uses it: JSON-RPC over stdio, one
//! message per line, without the `"jsonrpc"` field in what codex sends
//! (it accepts it in what it receives). Pure functions: the requests kd
//! writes, and what a line from codex means — a response, a request from
//! the server, or a notification, which [`interpret`] turns into the
//! [`Parsed`] items a run's [`super::super::parse::Transcript`] folds.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::approval;
use crate::agent::asking::{Later, Writer};
use crate::agent::mcp::Conversations;
use crate::agent::parse::{Outcome, Parsed};
use crate::agent::peer::{Dialect, Reply};
use crate::config::CodexPolicy;

/// The notifications kd has no use for: codex is asked not to send them.
pub const OPTED_OUT: &[&str] = &[
    "account/rateLimits/updated",
    "remoteControl/status/changed",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/textDelta",
    "item/commandExecution/outputDelta",
];

/// `initialize`: kd names itself and opts out of what it does not read.
pub fn initialize(id: u64) -> Value {
    json!({
        "id": id,
        "method": "initialize",
        "params": {
            "clientInfo": {"name": "kd", "title": "kd", "version": kd_proto::VERSION},
            "capabilities": {"optOutNotificationMethods": OPTED_OUT},
        }
    })
}

pub fn initialized() -> Value {
    json!({"method": "initialized"})
}

/// How a thread is opened: where, with which model and policy, and the
/// configuration it is given (kd's MCP server, see
/// [`crate::agent::mcp::Server::codex_config`]).
pub struct Opening<'a> {
    pub cwd: &'a str,
    pub model: Option<&'a str>,
    pub policy: &'a CodexPolicy,
    pub config: Option<&'a Value>,
}

impl Opening<'_> {
    fn params(&self, mut params: Value) -> Value {
        params["cwd"] = json!(self.cwd);
        params["approvalPolicy"] = json!(self.policy.approval);
        params["sandbox"] = json!(self.policy.sandbox);
        if let Some(m) = self.model {
            params["model"] = json!(m);
        }
        if let Some(c) = self.config {
            params["config"] = c.clone();
        }
        params
    }
}

/// The `config` of a thread in a member's worktree: `config` (kd's MCP
/// server, if any) with the `workspace-write` sandbox kept from `/tmp` and
/// `$TMPDIR` (the King's tree may be under them), the worktree's own
/// temporary directory `tmp` writable instead and its shell's `TMPDIR`.
pub fn work_config(config: Option<Value>, tmp: Option<&std::path::Path>) -> Value {
    let mut config = match config {
        Some(Value::Object(m)) => Value::Object(m),
        _ => json!({}),
    };
    let roots: Vec<String> = tmp.map(|t| t.display().to_string()).into_iter().collect();
    config["sandbox_workspace_write"] =
        json!({"exclude_slash_tmp": true, "exclude_tmpdir_env_var": true, "writable_roots": roots});
    if let Some(tmp) = tmp {
        if !config["shell_environment_policy"].is_object() {
            config["shell_environment_policy"] = json!({});
        }
        if !config["shell_environment_policy"]["set"].is_object() {
            config["shell_environment_policy"]["set"] = json!({});
        }
        config["shell_environment_policy"]["set"]["TMPDIR"] = json!(tmp.display().to_string());
    }
    config
}

/// `thread/start`.
pub fn thread_start(id: u64, opening: &Opening<'_>) -> Value {
    json!({"id": id, "method": "thread/start", "params": opening.params(json!({}))})
}

/// `thread/resume` of a recorded thread id, without its past turns.
pub fn thread_resume(id: u64, thread: &str, opening: &Opening<'_>) -> Value {
    let params = opening.params(json!({"threadId": thread, "excludeTurns": true}));
    json!({"id": id, "method": "thread/resume", "params": params})
}

/// `thread/unsubscribe`: kd will not use the thread again; codex unloads
/// it (and ends its MCP servers) once nobody follows it.
pub fn thread_unsubscribe(id: u64, thread: &str) -> Value {
    json!({"id": id, "method": "thread/unsubscribe", "params": {"threadId": thread}})
}

/// `turn/start` with the prompt as one text input.
pub fn turn_start(id: u64, thread: &str, prompt: &str) -> Value {
    json!({
        "id": id,
        "method": "turn/start",
        "params": {"threadId": thread, "input": [{"type": "text", "text": prompt, "text_elements": []}]}
    })
}

/// `turn/interrupt` of the running turn.
pub fn turn_interrupt(id: u64, thread: &str, turn: &str) -> Value {
    json!({"id": id, "method": "turn/interrupt", "params": {"threadId": thread, "turnId": turn}})
}

/// The answer to a request from codex kd does not grant (an approval,
/// a question): declined, so the turn goes on without it.
pub fn decline(id: &Value, method: &str) -> Value {
    if method.ends_with("requestApproval") {
        json!({"id": id, "result": {"decision": "decline"}})
    } else {
        json!({"id": id, "error": {"code": -32601, "message": format!("kd does not answer {method}")}})
    }
}

/// The codex app-server's side of [`Peer`](crate::agent::peer::Peer):
/// notifications name their thread in `threadId` (or `thread.id`), a turn
/// ends with `turn/completed`, an approval codex asks is asked of the run
/// following its thread (see [`approval`]), anything else it asks is
/// declined, and a thread codex closed (`thread/closed`) takes its MCP
/// server's capability with it.
pub struct Codex {
    pub threads: Arc<Conversations>,
    /// The file changes started, whose approval requests carry no diff.
    changes: Mutex<approval::Changes>,
}

impl Codex {
    pub fn new(threads: Arc<Conversations>) -> Codex {
        Codex { threads, changes: Default::default() }
    }
}

impl Dialect for Codex {
    fn observe(&self, method: &str, params: &Value) {
        if method == "thread/closed"
            && let Some(thread) = params.get("threadId").and_then(Value::as_str)
        {
            self.threads.forget(thread);
        }
        if let Ok(mut changes) = self.changes.lock() {
            changes.observe(method, params);
        }
    }

    fn name(&self) -> &str {
        "the codex app-server"
    }

    fn conversation(&self, _method: &str, params: &Value) -> Option<String> {
        params.get("threadId").or_else(|| params.pointer("/thread/id")).and_then(Value::as_str).map(str::to_string)
    }

    fn ends_turn(&self, method: &str) -> bool {
        method == "turn/completed"
    }

    fn answer(&self, id: &Value, method: &str, params: &Value) -> Reply {
        let tool = self.changes.lock().ok().and_then(|changes| approval::tool(method, params, &changes));
        let Some(tool) = tool else {
            tracing::debug!(method, "declined a request from codex");
            return Reply::Now(decline(id, method), None);
        };
        let id = id.clone();
        let write: Writer = Arc::new(move |answer| approval::reply(&id, answer));
        Reply::Later(Later { tool, scopes: approval::SCOPES.to_vec(), today: approval::today(), write })
    }
}

/// The thread id in the result of `thread/start` or `thread/resume`.
pub fn thread_id(result: &Value) -> Option<String> {
    result.pointer("/thread/id").and_then(Value::as_str).map(str::to_string)
}

/// The turn id in the result of `turn/start`.
pub fn turn_id(result: &Value) -> Option<String> {
    result.pointer("/turn/id").and_then(Value::as_str).map(str::to_string)
}

/// What a notification about a run's thread means for the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Items for the transcript.
    Items(Vec<Parsed>),
    /// The tokens of one model call of the turn (`tokenUsage.last`).
    Usage(Usage),
    /// The turn ended: `completed`, `interrupted` or `failed` (with the error).
    TurnDone { status: String, error: Option<String> },
    /// Nothing for the run.
    Nothing,
}

/// Interprets a notification of the run's turn `turn` (notifications of
/// another turn of the same thread — one that was interrupted — are not
/// the run's).
pub fn interpret(method: &str, params: &Value, turn: Option<&str>) -> Event {
    let of_turn = params.get("turnId").or_else(|| params.pointer("/turn/id")).and_then(Value::as_str);
    if let (Some(mine), Some(theirs)) = (turn, of_turn)
        && mine != theirs
    {
        return Event::Nothing;
    }
    let text = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    match method {
        // kd's MCP server for the thread did not start (codex goes on
        // without it after about a second).
        "mcpServer/startupStatus/updated"
            if text("name") == "kd" && matches!(text("status").as_str(), "failed" | "cancelled") =>
        {
            let status = text("status");
            Event::Items(vec![Parsed::Activity(crate::agent::parse::without_kds_tools(&status))])
        }
        "item/agentMessage/delta" => {
            let d = text("delta");
            if d.is_empty() { Event::Nothing } else { Event::Items(vec![Parsed::Delta(d)]) }
        }
        "item/started" => match activity(params) {
            // Text after a tool call is a new paragraph.
            Some((what, true)) => Event::Items(vec![Parsed::Boundary, Parsed::Activity(what)]),
            Some((what, false)) => Event::Items(vec![Parsed::Activity(what)]),
            None => Event::Nothing,
        },
        "item/completed" => match item_type(params) {
            Some("agentMessage") => {
                let t = params.pointer("/item/text").and_then(Value::as_str).unwrap_or_default();
                Event::Items(vec![Parsed::Block(t.to_string())])
            }
            _ => Event::Nothing,
        },
        "error" => {
            let retrying = params.get("willRetry").and_then(Value::as_bool).unwrap_or(false);
            let message = error_message(params.get("error"));
            Event::Items(vec![Parsed::Error { message, fatal: !retrying }])
        }
        "thread/tokenUsage/updated" => match params.pointer("/tokenUsage/last") {
            Some(last) => {
                let n = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
                Event::Usage(Usage {
                    input: n("inputTokens"),
                    cached_input: n("cachedInputTokens"),
                    output: n("outputTokens"),
                    reasoning_output: n("reasoningOutputTokens"),
                })
            }
            None => Event::Nothing,
        },
        "turn/completed" => {
            let status = params.pointer("/turn/status").and_then(Value::as_str).unwrap_or("completed").to_string();
            let error = params.pointer("/turn/error").filter(|e| !e.is_null()).map(|e| error_message(Some(e)));
            Event::TurnDone { status, error }
        }
        _ => Event::Nothing,
    }
}

/// Tokens, summed over a turn's model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub cached_input: u64,
    pub output: u64,
    pub reasoning_output: u64,
}

impl Usage {
    pub fn add(&mut self, o: Usage) {
        self.input += o.input;
        self.cached_input += o.cached_input;
        self.output += o.output;
        self.reasoning_output += o.reasoning_output;
    }

    /// In the form `codex exec --json` reports a turn's usage, which the
    /// cost report reads.
    pub fn to_json(self) -> Value {
        json!({
            "input_tokens": self.input,
            "cached_input_tokens": self.cached_input,
            "output_tokens": self.output,
            "reasoning_output_tokens": self.reasoning_output,
        })
    }
}

/// What an item codex started says it is doing, and whether it is a tool
/// call (after which the answer's text is a new paragraph).
fn activity(params: &Value) -> Option<(String, bool)> {
    let item = params.get("item")?;
    let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
    Some(match item_type(params)? {
        "commandExecution" => (format!("running {}", text("command")), true),
        "fileChange" => {
            let paths: Vec<&str> = item
                .get("changes")
                .and_then(Value::as_array)
                .map(|c| c.iter().filter_map(|c| c.get("path").and_then(Value::as_str)).collect())
                .unwrap_or_default();
            (format!("changing {}", if paths.is_empty() { "files".to_string() } else { paths.join(", ") }), true)
        }
        "mcpToolCall" => (format!("calling {} {}", text("server"), text("tool")), true),
        "webSearch" => (format!("searching the web for {}", text("query")), true),
        "reasoning" => ("thinking".to_string(), false),
        _ => return None,
    })
}

fn item_type(params: &Value) -> Option<&str> {
    params.pointer("/item/type").and_then(Value::as_str)
}

/// The readable reason of a codex error: its `message`, or the message
/// inside the API's JSON error body when the message is one.
pub fn error_message(error: Option<&Value>) -> String {
    let Some(e) = error else { return "codex reported an error".into() };
    let message = e.get("message").and_then(Value::as_str).unwrap_or("codex reported an error");
    serde_json::from_str::<Value>(message)
        .ok()
        .and_then(|body| body.pointer("/error/message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| message.to_string())
}

/// The outcome of a finished turn, for the transcript.
pub fn outcome(status: &str, error: Option<String>, usage: Option<Usage>) -> Outcome {
    Outcome {
        is_error: status == "failed",
        text: error.filter(|_| status == "failed"),
        usage: usage.map(Usage::to_json),
        ..Outcome::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::peer::{Incoming, incoming};

    fn codex() -> Codex {
        Codex::new(Arc::new(Conversations::new(Default::default())))
    }

    #[test]
    fn a_work_thread_writes_in_its_worktree_and_its_own_tmp_only() {
        let kd = json!({"mcp_servers": {"kd": {"command": "/k/kd"}}, "shell_environment_policy": {"set": {"KD_THREAD": "t"}}});
        let c = work_config(Some(kd), Some(std::path::Path::new("/d/w/codex.tmp")));
        assert_eq!(
            c["sandbox_workspace_write"],
            json!({"exclude_slash_tmp": true, "exclude_tmpdir_env_var": true, "writable_roots": ["/d/w/codex.tmp"]})
        );
        assert_eq!(c["shell_environment_policy"]["set"], json!({"KD_THREAD": "t", "TMPDIR": "/d/w/codex.tmp"}));
        assert_eq!(c["mcp_servers"]["kd"]["command"], "/k/kd");
        let bare = work_config(None, None);
        assert_eq!(bare["sandbox_workspace_write"]["exclude_slash_tmp"], true);
        assert!(bare.get("shell_environment_policy").is_none());
    }

    /// `shared/captures/mcp/app-server.jsonl`: kd's server in the thread's
    /// `config`, codex asked to approve its tools.
    #[test]
    fn a_thread_is_opened_with_the_config_given() {
        let policy = CodexPolicy::default();
        let config = json!({"mcp_servers": {"kd": {"command": "/k/kd"}}});
        let opening = Opening { cwd: "/w", model: None, policy: &policy, config: Some(&config) };
        let start = thread_start(2, &opening);
        assert_eq!(
            start["params"],
            json!({"cwd": "/w", "approvalPolicy": "never", "sandbox": "read-only", "config": config})
        );
        let resume = thread_resume(3, "th", &Opening { model: Some("m"), ..opening });
        assert_eq!(resume["params"]["config"], config);
        assert_eq!(
            (resume["params"]["threadId"].as_str(), resume["params"]["model"].as_str()),
            (Some("th"), Some("m"))
        );
        let bare = thread_start(4, &Opening { cwd: "/w", model: None, policy: &policy, config: None });
        assert_eq!(bare["params"].get("config"), None);
        assert_eq!(thread_unsubscribe(5, "th")["params"], json!({"threadId": "th"}));
    }

    #[test]
    fn a_closed_thread_takes_its_servers_capability_with_it() {
        let grants = Arc::new(crate::agent::grants::Grants::default());
        let c = Codex::new(Arc::new(Conversations::new(grants.clone())));
        c.threads.token("th", crate::agent::mcp::conversation_grant("t", "codex", std::path::Path::new("/w")));
        c.observe("thread/status/changed", &json!({"threadId": "th", "status": {"type": "idle"}}));
        assert_eq!(grants.len(), 1);
        c.observe("thread/closed", &json!({"threadId": "th"}));
        assert!(grants.is_empty());
    }

    /// The messages of a capture (`../shared/captures/codex-app-server`,
    /// kept byte for byte in `tests/fixtures/codex-app-server`).
    fn capture(name: &str) -> Vec<(String, Value)> {
        let path = format!("{}/../tests/fixtures/codex-app-server/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| (v["dir"].as_str().unwrap_or_default().to_string(), v["msg"].clone()))
            .collect()
    }

    /// Folds what codex sent in a capture about `thread` as a run would.
    fn fold(name: &str, thread: &str) -> (crate::agent::parse::Transcript, Vec<(String, Option<String>)>) {
        let mut t = crate::agent::parse::Transcript::new();
        let mut ends = Vec::new();
        for (dir, msg) in capture(name) {
            if dir != "<" {
                continue;
            }
            let Some(Incoming::Notification { method, params }) = incoming(&msg.to_string()) else {
                continue;
            };
            if codex().conversation(&method, &params).as_deref() != Some(thread) {
                continue;
            }
            match interpret(&method, &params, None) {
                Event::Items(items) => items.into_iter().for_each(|i| {
                    t.apply(i);
                }),
                Event::TurnDone { status, error } => ends.push((status, error)),
                Event::Usage(_) | Event::Nothing => {}
            }
        }
        (t, ends)
    }

    #[test]
    fn main_capture_streams_three_turns_and_the_api_reason_of_the_failure() {
        let (t, ends) = fold("main", "01a202f1-3832-77d2-a51f-b5f061dc73ec");
        assert_eq!(
            ends,
            vec![
                ("completed".into(), None),
                ("completed".into(), None),
                ("failed".into(), Some("stub: forced failure".into())),
            ]
        );
        assert_eq!(t.fatal.as_deref(), Some("stub: forced failure"));
        let text = t.answer();
        assert!(text.starts_with("Hello from codex stub (request 1)."), "{text:?}");
        assert!(text.contains("Tool said: Chunk ID: 55b9ff\nWall time"), "{text:?}");
        // Each message once: the completed item repeats what was streamed.
        assert_eq!(text.matches("Hello from codex stub").count(), 1, "{text:?}");
    }

    #[test]
    fn interrupted_capture_ends_interrupted_with_the_streamed_text() {
        let (t, ends) = fold("interrupt", "01a202f1-5f4d-70c1-a34c-f9da671b7c4d");
        assert_eq!(ends[0], ("interrupted".into(), None));
        assert!(t.text().starts_with("tick0"), "{:?}", t.text());
    }

    #[test]
    fn concurrent_capture_keeps_the_two_threads_apart() {
        let msgs = capture("concurrent");
        let mut threads: Vec<String> = msgs
            .iter()
            .filter_map(|(d, m)| (d == "<").then(|| m.pointer("/result/thread/id")).flatten())
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        threads.dedup();
        assert_eq!(threads.len(), 2, "{threads:?}");
        let (a, _) = fold("concurrent", &threads[0]);
        let (b, _) = fold("concurrent", &threads[1]);
        assert!(!a.text().is_empty() && !b.text().is_empty());
        assert_ne!(a.text(), b.text());
    }

    #[test]
    fn errors_and_responses_are_told_apart() {
        for (dir, msg) in capture("resumebad").into_iter().chain(capture("noinit")) {
            if dir != "<" {
                continue;
            }
            match incoming(&msg.to_string()) {
                Some(Incoming::Response { result: Err(e), .. }) => assert!(!e.is_empty()),
                Some(Incoming::Response { result: Ok(_), .. }) | Some(Incoming::Notification { .. }) => {}
                other => panic!("{msg}: {other:?}"),
            }
        }
        let bad = capture("resumebad");
        let first_error = bad
            .iter()
            .filter(|(d, _)| d == "<")
            .filter_map(|(_, m)| incoming(&m.to_string()))
            .find(|i| matches!(i, Incoming::Response { result: Err(_), .. }));
        assert_eq!(
            first_error,
            Some(Incoming::Response {
                id: 2,
                result: Err("no rollout found for thread id 00000000-0000-7000-8000-000000000000".into()),
            })
        );
    }

    #[test]
    fn a_turns_usage_is_the_sum_of_its_model_calls() {
        let mut sum = Usage::default();
        let turn = "01a202f1-3e2b-7d52-8be9-1aeab3075494";
        for (dir, msg) in capture("main") {
            let Some(Incoming::Notification { method, params, .. }) = incoming(&msg.to_string()) else { continue };
            if let (true, Event::Usage(u)) = (dir == "<", interpret(&method, &params, Some(turn))) {
                sum.add(u);
            }
        }
        // Two model calls of 120 in, 30 out (the total went from 150 to 450).
        assert_eq!(sum, Usage { input: 240, cached_input: 40, output: 60, reasoning_output: 20 });
    }

    #[test]
    fn tool_calls_and_reasoning_are_activity_not_answer_text() {
        let turn = "01a202f1-3e2b-7d52-8be9-1aeab3075494";
        let mut seen = Vec::new();
        for (dir, msg) in capture("main") {
            let Some(Incoming::Notification { method, params, .. }) = incoming(&msg.to_string()) else { continue };
            if let (true, Event::Items(items)) = (dir == "<", interpret(&method, &params, Some(turn))) {
                seen.extend(items.into_iter().filter_map(|i| if let Parsed::Activity(a) = i { Some(a) } else { None }));
            }
        }
        assert_eq!(seen, ["thinking", "running /bin/bash -lc 'echo hello-from-tool'"]);
    }

    #[test]
    fn kds_mcp_server_failing_to_start_is_said_as_the_runs_activity() {
        // As codex 0.169.0 reports its servers' start, by thread.
        let of = |name: &str, status: &str| serde_json::json!({"threadId": "t", "name": name, "status": status, "error": null, "failureReason": null});
        let failed = interpret("mcpServer/startupStatus/updated", &of("kd", "failed"), Some("turn-1"));
        match failed {
            Event::Items(items) => assert_eq!(
                items,
                vec![Parsed::Activity("without kd's tools: its MCP server kd is failed (kd doctor checks it)".into())]
            ),
            other => panic!("{other:?}"),
        }
        for (name, status) in [("kd", "starting"), ("kd", "ready"), ("other", "failed")] {
            let e = interpret("mcpServer/startupStatus/updated", &of(name, status), Some("turn-1"));
            assert!(matches!(e, Event::Nothing), "{name} {status}: {e:?}");
        }
    }

    #[test]
    fn another_turns_notifications_are_not_the_runs() {
        let p = json!({"threadId": "t", "turnId": "old", "itemId": "m", "delta": "x"});
        assert_eq!(interpret("item/agentMessage/delta", &p, Some("new")), Event::Nothing);
        assert!(matches!(interpret("item/agentMessage/delta", &p, Some("old")), Event::Items(_)));
    }

    #[test]
    fn a_request_from_codex_is_declined() {
        let r = decline(&json!(7), "item/commandExecution/requestApproval");
        assert_eq!(r, json!({"id": 7, "result": {"decision": "decline"}}));
        assert!(decline(&json!(8), "item/tool/requestUserInput").get("error").is_some());
    }
}
