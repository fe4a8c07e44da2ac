//! `kd mcp`, the real binary, as the agent CLIs start it: `initialize` and
//! `tools/list` answered at once without a daemon, the exact traffic of
//! each recorded CLI answered as that CLI expects (tests/fixtures/mcp, from
//! shared/captures/mcp: claude, codex exec, codex app-server, codex-acp,
//! claude-code-acp), rmcp's own client, failures as tool results with the
//! reason, lines that are no request answered as JSON-RPC says, and a
//! quiet end on stdin EOF, SIGTERM and SIGINT.

use std::path::Path;
use std::time::Duration;

use kd_tests::kd_mcp::{CLAUDE_INITIALIZE, CODEX_TOOLS_LIST, KdMcp, Plumbing};
use kd_tests::{Kdd, within};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, InitializeResult,
    ListToolsResult, ProtocolVersion,
};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

/// A forged capability, of the right form.
const FORGED: &str = "kdcap_0000000000000000000000000000000000000000000000000000000000000000";

/// The CLIs wait 1–2 s for their servers; kd answers well within that.
const INITIALIZE_BOUND: Duration = Duration::from_millis(500);

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {result}"))
}

#[test]
fn initialize_is_answered_at_once_with_no_daemon_running() {
    // A private directory where no daemon has ever run.
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = dir.path().join("kdd.sock");
    let mut mcp = KdMcp::spawn(&[("KD_SOCKET", socket.to_str().unwrap()), ("KD_RUN_TOKEN", FORGED)]);
    mcp.send(CLAUDE_INITIALIZE);
    let init = mcp.answer();
    let took = mcp.spawned.elapsed();
    assert!(took < INITIALIZE_BOUND, "initialize answered {took:?} after spawn (bound {INITIALIZE_BOUND:?})");
    assert_eq!(init["result"]["serverInfo"]["name"], "kd", "{init}");
    mcp.send(r#"{"method":"notifications/initialized","jsonrpc":"2.0"}"#);
    let listed = mcp.request(1, "tools/list", json!({}));
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(6), "{listed}");

    // Only a tool call looks for kdd, and does not start one.
    let r = mcp.call(2, "send", json!({"to": ["codex"], "body": "hello"}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(text_of(&r).starts_with(&format!("cannot reach kdd at {}", socket.display())), "{r}");
    assert!(!socket.exists(), "kd mcp started a daemon");
    mcp.close_stdin();
    let (status, stderr) = mcp.wait();
    assert!(status.success() && stderr.is_empty(), "{status} {stderr}");
}

/// The lines a recorded CLI sent its server named kd, and what that server
/// answered, by request id.
fn recorded(file: &str) -> (Vec<String>, Vec<Value>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (mut sent, mut answered) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let l: Value = serde_json::from_str(line).unwrap();
        match l["dir"].as_str() {
            // The CLI's line exactly as it wrote it.
            Some("cli->server") => sent.push(serde_json::to_string(&l["msg"]).unwrap()),
            Some("server->cli") => answered.push(l["msg"].clone()),
            _ => {}
        }
    }
    (sent, answered)
}

#[test]
fn each_clis_recorded_traffic_is_answered_as_it_expects() {
    for file in [
        "claude.mcp.jsonl",
        "codex-exec.mcp.jsonl",
        "app-server.mcp.jsonl",
        "codex-acp.mcp.jsonl",
        "claude-code-acp.mcp.jsonl",
    ] {
        let (sent, answered) = recorded(file);
        assert_eq!(sent.len(), 4, "{file}: initialize, initialized, tools/list, tools/call");
        // As the CLI starts it: no token in this replay, so the call fails.
        let mut mcp = KdMcp::spawn(&[("KD_SOCKET", "/nonexistent/kd/kdd.sock"), ("KD_MEMBER", "claude")]);
        let mut ours = Vec::new();
        for line in &sent {
            mcp.send(line);
            if serde_json::from_str::<Value>(line).unwrap().get("id").is_some() {
                ours.push(mcp.answer());
            }
        }
        assert_eq!(ours.len(), answered.len(), "{file}");
        for (mine, theirs) in ours.iter().zip(&answered) {
            assert_eq!(mine["jsonrpc"], "2.0", "{file}: {mine}");
            assert_eq!(mine["id"], theirs["id"], "{file}: {mine}");
            assert!(mine.get("error").is_none(), "{file}: {mine}");
        }
        // initialize: the CLI's own version back, tools only, named kd, with
        // instructions — as rmcp's model reads it.
        let init: InitializeResult = serde_json::from_value(ours[0]["result"].clone()).unwrap();
        assert_eq!(ours[0]["result"]["protocolVersion"], answered[0]["result"]["protocolVersion"], "{file}");
        assert_eq!(ours[0]["result"]["capabilities"], answered[0]["result"]["capabilities"], "{file}");
        assert_eq!(init.server_info.name, "kd");
        assert!(init.instructions.is_some_and(|i| i.contains("send messages to other members")), "{file}");
        // tools/list: every tool the CLI was shown is there, taking what it took.
        let tools: ListToolsResult = serde_json::from_value(ours[1]["result"].clone()).unwrap();
        for theirs in answered[1]["result"]["tools"].as_array().unwrap() {
            let name = theirs["name"].as_str().unwrap();
            let mine = tools.tools.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{file}: no {name}"));
            let schema = serde_json::to_value(&*mine.input_schema).unwrap();
            assert_eq!(schema["type"], "object");
            assert_eq!(schema["required"], theirs["inputSchema"]["required"], "{file}: {name}");
            for prop in theirs["inputSchema"]["properties"].as_object().unwrap().keys() {
                assert!(schema["properties"].get(prop).is_some(), "{file}: {name}.{prop}");
            }
            // What lets codex run it under approval never, unasked.
            let a = mine.annotations.clone().unwrap_or_else(|| panic!("{file}: {name} has no annotations"));
            let unasked = a.read_only_hint == Some(true)
                || (a.read_only_hint == Some(false)
                    && a.destructive_hint == Some(false)
                    && a.open_world_hint == Some(false));
            assert!(unasked, "{file}: {name}: {a:?}");
        }
        // tools/call: a result the CLI hands its model, failed with the reason.
        let call: CallToolResult = serde_json::from_value(ours[2]["result"].clone()).unwrap();
        assert_eq!(call.is_error, Some(true), "{file}");
        assert!(text_of(&ours[2]["result"]).contains("KD_RUN_TOKEN is not set"), "{file}: {}", ours[2]);
        mcp.close_stdin();
        let (status, stderr) = mcp.wait();
        assert!(status.success() && stderr.is_empty(), "{file}: {status} {stderr}");
    }
}

/// rmcp's client on `kd mcp` with `env`, speaking as codex does.
async fn rmcp_client(env: &[(&str, &str)]) -> rmcp::service::RunningService<rmcp::RoleClient, ClientConfig> {
    let mut cmd = tokio::process::Command::new(kd_tests::bin("kd"));
    cmd.arg("mcp").env_remove("KD_RUN_TOKEN").env_remove("KD_SOCKET").envs(env.iter().copied());
    let transport = TokioChildProcess::new(cmd).expect("spawn kd mcp");
    let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("codex-mcp-client", "0.169.0"))
        .with_protocol_version(ProtocolVersion::V_2025_06_18);
    within("rmcp initialize", info.serve(transport)).await.expect("initialize")
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(args) = arguments else { panic!("arguments are an object") };
    CallToolRequestParams::new(name.to_string()).with_arguments(args)
}

fn result_text(r: &CallToolResult) -> String {
    let v = serde_json::to_value(r).unwrap();
    text_of(&v).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn rmcp_lists_six_annotated_tools_and_a_forged_or_missing_token_is_refused_by_kdd() {
    let kdd = Kdd::start();
    let socket = kdd.socket.to_str().unwrap();

    let client = rmcp_client(&[("KD_SOCKET", socket), ("KD_RUN_TOKEN", FORGED)]).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_06_18);
    assert_eq!(info.server_info.as_ref().map(|s| s.name.as_str()), Some("kd"));
    let tools = within("tools/list", client.list_tools(None)).await.unwrap().tools;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["send", "inbox", "ack", "claim", "thread", "search"]);
    for t in &tools {
        let a = t.annotations.as_ref().unwrap_or_else(|| panic!("{} has no annotations", t.name));
        let read_only = matches!(t.name.as_ref(), "thread" | "search");
        assert_eq!(a.read_only_hint, Some(read_only), "{}", t.name);
        assert_eq!(a.open_world_hint, Some(false), "{}", t.name);
        if !read_only {
            assert_eq!(a.destructive_hint, Some(false), "{}", t.name);
        }
    }

    // A forged token: kdd refuses, and the model reads why.
    for (name, args) in [
        ("send", json!({"to": ["codex"], "body": "as the King?"})),
        ("inbox", json!({})),
        ("ack", json!({})),
        ("claim", json!({"resource": "src/lib.rs"})),
        ("thread", json!({"last": 5})),
        ("search", json!({"query": "anything"})),
    ] {
        let r = within("tools/call", client.call_tool(call(name, args))).await.expect("a result, not an error");
        assert_eq!(r.is_error, Some(true), "{name}");
        let why = result_text(&r);
        assert!(why.starts_with("refused by kd (forbidden): unknown capability"), "{name}: {why}");
    }
    // Nothing was posted anywhere.
    use kd_client::prelude::*;
    let threads = kdd.client().await.thread_list(None, None, None).await.unwrap();
    assert!(threads.is_empty(), "{threads:?}");
    client.cancel().await.unwrap();

    // No token at all: refused before kdd is asked.
    let client = rmcp_client(&[("KD_SOCKET", socket)]).await;
    let r = client.call_tool(call("send", json!({"to": ["codex"], "body": "hi"}))).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(result_text(&r).contains("KD_RUN_TOKEN is not set"), "{}", result_text(&r));
    // Bad arguments: the reason, as a result.
    let r = client.call_tool(call("claim", json!({"resource": "x", "mode": "steal"}))).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(result_text(&r).starts_with("bad arguments for claim: "), "{}", result_text(&r));
    client.cancel().await.unwrap();
}

#[test]
fn a_call_after_kdd_restarted_reaches_the_new_daemon() {
    let mut kdd = Kdd::start();
    let mut mcp = KdMcp::spawn(&[("KD_SOCKET", kdd.socket.to_str().unwrap()), ("KD_RUN_TOKEN", FORGED)]);
    mcp.handshake();
    let refused = |r: &Value| text_of(r).starts_with("refused by kd (forbidden): ");
    let first = mcp.call(1, "inbox", json!({}));
    assert!(refused(&first), "{first}");
    assert!(kdd.stop().success());
    let gone = mcp.call(2, "inbox", json!({}));
    assert_eq!(gone["isError"], true, "{gone}");
    assert!(text_of(&gone).contains("kdd"), "{gone}");
    kdd.launch().unwrap();
    // The connection to the first daemon is not used again.
    let again = mcp.call(3, "inbox", json!({}));
    assert!(refused(&again), "{again}");
}

#[test]
fn codex_gets_its_protocol_version_back() {
    let mut mcp = KdMcp::spawn(&[]);
    mcp.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"codex/auth-change":{}},"elicitation":{"form":{},"url":{}}},"clientInfo":{"name":"codex-mcp-client","title":"Codex","version":"0.169.0"}}}"#);
    assert_eq!(mcp.answer()["result"]["protocolVersion"], "2025-06-18");
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    mcp.send(CODEX_TOOLS_LIST);
    assert_eq!(mcp.answer()["result"]["tools"][0]["name"], "send");
}

#[test]
fn a_line_that_is_no_request_is_answered_not_dropped() {
    let mut mcp = KdMcp::spawn(&[]);
    mcp.handshake();
    mcp.send("this is not json");
    let a = mcp.answer();
    assert_eq!((&a["id"], &a["error"]["code"]), (&Value::Null, &json!(-32700)), "{a}");
    mcp.send(r#"{"jsonrpc":"2.0","id":2.5,"method":"tools/list"}"#);
    let a = mcp.answer();
    assert_eq!((&a["id"], &a["error"]["code"]), (&json!(2.5), &json!(-32600)), "{a}");
    let listed = mcp.request(3, "tools/list", json!({}));
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(6), "{listed}");
}

#[test]
fn stdin_eof_ends_it_quietly_over_pipes_and_sockets() {
    for plumbing in [Plumbing::Pipes, Plumbing::Sockets] {
        let mut mcp = KdMcp::spawn_with(&[], plumbing);
        mcp.handshake();
        mcp.close_stdin();
        let (status, stderr) = mcp.wait();
        assert!(status.success(), "{plumbing:?}: {status}");
        assert_eq!(stderr, "", "{plumbing:?}");
        // Before any handshake too.
        let mut mcp = KdMcp::spawn_with(&[], plumbing);
        mcp.close_stdin();
        let (status, stderr) = mcp.wait();
        assert!(status.success() && stderr.is_empty(), "{plumbing:?}: {status} {stderr}");
    }
}

#[test]
fn sigterm_and_sigint_end_it_quietly_while_it_reads() {
    use rustix::process::Signal;
    for plumbing in [Plumbing::Pipes, Plumbing::Sockets] {
        for signal in [Signal::TERM, Signal::INT] {
            let mut mcp = KdMcp::spawn_with(&[], plumbing);
            // Answered: its signal handlers are in place, and it waits on stdin.
            mcp.handshake();
            mcp.signal(signal);
            let (status, stderr) = mcp.wait();
            assert!(status.success(), "{plumbing:?} {signal:?}: {status}");
            assert_eq!(stderr, "", "{plumbing:?} {signal:?}");
        }
    }
}

/// A member's run acts through `kd mcp` with its run's token: what it sends
/// is stored as itself, on its thread, and reaches the addressee; once the
/// run ended, the token is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_member_acts_as_itself_through_kd_mcp() {
    use kd_client::prelude::*;
    use kd_proto::types::ThreadEvent as E;
    let hold = kd_tests::Hold::new();
    let ws = kd_tests::Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[])]);
    let token_file = ws.file("token");
    let record = format!("printf %s \"$KD_RUN_TOKEN\" > {token_file}");
    ws.set_agent(
        "claude",
        "env",
        json!({"FAKE_NAME": "claude", "FAKE_RUN": record, "FAKE_HOLD": hold.env(), "FAKE_HOLD_WHEN": "Go"}),
    );
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    c.council_send(t.clone(), "Go".into(), Some(vec!["claude".into()]), None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    // The run is held after its first piece, its token written before it.
    kd_tests::collect_until(&mut sub, |es| es.iter().any(|e| matches!(e, E::Delta { .. }))).await;
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert!(token.starts_with("kdcap_"), "the run's token: {token:?}");

    let mut mcp = KdMcp::spawn(&[("KD_SOCKET", kdd.socket.to_str().unwrap()), ("KD_RUN_TOKEN", &token)]);
    mcp.handshake();
    let sent = mcp.call(1, "send", json!({"to": ["codex"], "body": "hello from claude"}));
    assert_eq!(sent["isError"], false, "{sent}");
    assert!(text_of(&sent).starts_with("sent #") && text_of(&sent).contains(" to codex ("), "{sent}");
    let page = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let stored = page.iter().find(|m| m.body == "hello from claude").expect("the message is in the thread");
    assert_eq!((stored.from.as_str(), stored.to.clone()), ("claude", vec!["codex".to_string()]));

    let history = mcp.call(2, "thread", json!({"last": 5}));
    assert!(text_of(&history).contains("hello from claude"), "{history}");
    let claimed = mcp.call(3, "claim", json!({"resource": "src/lib.rs"}));
    assert_eq!(text_of(&claimed), "claimed src/lib.rs for writing");
    assert_eq!(text_of(&mcp.call(4, "ack", json!({}))), "you owe no acknowledgement");
    let inbox = mcp.call(5, "inbox", json!({}));
    assert_eq!(inbox["isError"], false, "{inbox}");

    // The run ends: its token with it.
    hold.release();
    kd_tests::collect_until(&mut sub, |es| {
        es.iter().any(|e| matches!(e, E::RunFinished { member, .. } if member == "claude"))
    })
    .await;
    let late = mcp.call(6, "send", json!({"to": ["codex"], "body": "too late"}));
    assert_eq!(late["isError"], true, "{late}");
    assert!(text_of(&late).starts_with("refused by kd (forbidden): "), "{late}");
}

/// Claude Code 2.1.332 defers MCP tools behind `ToolSearch` unless told
/// otherwise (the fake claude does so too, see mcp_wiring.rs): kd's tools
/// are listed to the model at once, so its first call is kd's own.
#[tokio::test(flavor = "multi_thread")]
async fn claude_has_kds_tools_at_once_without_searching_for_them() {
    let ws = kd_tests::Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let env = [("FAKE_MCP_CALL", "thread {}"), ("FAKE_RECORD", record.as_str())];
    ws.write_config(
        &json!({"council": {"members": ["claude"]}, "agents": {"claude": kd_tests::fake("claude", "claude", &env)}}),
    );
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Read the thread.").await;
    kd_tests::collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let call =
        kd_tests::records(&record).into_iter().find(|r| r["mcp"]["call"].is_object()).expect("a call")["mcp"].clone();
    assert_eq!(call["deferred"], false, "kd's tool was deferred behind ToolSearch: {call}");
    assert_eq!(call["is_error"], false, "{call}");
    let last = kd_tests::last_message(&c, &t).await;
    assert!(last.body.starts_with("Tool said: "), "{last:?}");
}
