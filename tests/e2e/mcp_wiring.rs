//! kd's MCP server wired into every backend (issue 22): each fake reads the
//! server's configuration where its real CLI takes it, starts it as that
//! CLI does and calls a tool (see the fake's `mcp.rs`). Here the server is
//! the fake's stand-in for `kd mcp`, installed as the `kd` beside kdd: its
//! answer says what it was started with and what kdd says its token stands
//! for (`member.whoami`), so each test sees the capability and the socket
//! arrive, with no approval asked.

use kd_proto::types::{Message, MessageKind};
use kd_tests::{Beside, Kdd, Watched, Workspace, collect_until, ended, fake, records};
use serde_json::{Value, json};

const CALL: &str = r#"send {"to": ["codex"], "body": "hi from kd's tool"}"#;

/// A workspace whose one member `name` is a fake of `backend` (with
/// `agent`'s keys merged into its agent), recording to `record.jsonl`.
fn one_member(name: &str, backend: &str, env: &[(&str, &str)], agent: Value) -> Workspace {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let mut vars = vec![("FAKE_RECORD", record.as_str())];
    vars.extend_from_slice(env);
    let mut a = fake(backend, name, &vars);
    if let (Some(a), Some(extra)) = (a.as_object_mut(), agent.as_object()) {
        a.extend(extra.clone());
    }
    ws.write_config(&json!({"council": {"members": [name]}, "agents": {name: a}}));
    ws
}

/// Asks the workspace's council one question; the answer and the thread.
async fn ask(kdd: &Kdd, ws: &Workspace, context: Option<kd_proto::types::ContextMode>) -> (Message, String) {
    let Watched { c, t, mut sub } = Watched::open(kdd, ws, context).await;
    kd_tests::send_one_round(&c, &t, "Tell codex hi.").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    (kd_tests::last_message(&c, &t).await, t)
}

/// What the stand-in said through the agent's `Tool said: …` answer.
fn said(answer: &Message) -> Value {
    assert_eq!(answer.kind, MessageKind::Agent, "{answer:?}");
    let json = answer.body.strip_prefix("Tool said: ").unwrap_or_else(|| panic!("no tool result: {:?}", answer.body));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// The call's record line (`{"mcp": …}`).
fn call_record(record: &str) -> Value {
    records(record).into_iter().find(|r| r["mcp"]["call"].is_object()).map(|r| r["mcp"].clone()).expect("a call")
}

/// What every backend's server must have: the run's capability, standing
/// for the member on its thread, and the daemon's socket.
fn assert_acts_as(said: &Value, kdd: &Kdd, member: &str, thread: &str) {
    let who = &said["whoami"];
    assert_eq!((who["member"].as_str(), who["thread"].as_str()), (Some(member), Some(thread)), "{said}");
    assert_eq!(said["env"]["KD_SOCKET"], kdd.socket.display().to_string(), "{said}");
    assert!(said["env"]["KD_RUN_TOKEN"].as_str().is_some_and(|t| t.starts_with("kdcap_")), "{said}");
    assert_eq!((said["env"]["KD_MEMBER"].as_str(), said["env"]["KD_THREAD"].as_str()), (Some(member), Some(thread)));
    assert_eq!((said["tool"].as_str(), said["arguments"]["body"].as_str()), (Some("send"), Some("hi from kd's tool")));
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_is_given_kds_server_in_mcp_config_and_its_tools_allowed() {
    let ws = one_member("claude", "claude", &[("FAKE_MCP_CALL", CALL)], json!({"args": ["--allowedTools", "Read"]}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let (answer, t) = ask(&kdd, &ws, None).await;
    let said = said(&answer);
    assert_acts_as(&said, &kdd, "claude", &t);
    assert!(said["whoami"]["run"].as_str().is_some_and(|r| r.starts_with("r-")), "the run's own grant: {said}");
    assert_eq!(said["inherited"], true, "claude gives its server its own environment");
    let recs = records(&ws.file("record.jsonl"));
    let argv: Vec<&str> = recs[0]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(argv.windows(2).any(|w| w == ["--allowedTools", "mcp__kd"]), "{argv:?}");
    assert!(argv.windows(2).any(|w| w == ["--allowedTools", "Read"]), "the member's own still apply: {argv:?}");
    assert!(!argv.iter().any(|a| a.contains("kdcap_")), "no capability on a command line: {argv:?}");
    assert_eq!(recs[0]["mcp"]["command"], kdd.kd_beside().display().to_string());
    assert_eq!(recs[0]["mcp"]["args"], json!(["mcp"]));
    let call = call_record(&ws.file("record.jsonl"));
    assert_eq!(call["server"]["name"], "kd");
    assert_eq!(call["tools"], json!(["send", "inbox", "ack", "claim", "thread", "search"]));
}

/// The fake claude defers a server's tools behind `ToolSearch` as Claude
/// Code 2.1.332 does (the stand-in's tools say nothing of loading), and
/// loads them at once when tool search is off: the model searches first,
/// then calls.
#[tokio::test(flavor = "multi_thread")]
async fn the_fake_claude_defers_tools_as_claude_does_unless_told_not_to() {
    for (env, deferred) in [(vec![], true), (vec![("ENABLE_TOOL_SEARCH", "false")], false)] {
        let mut vars = vec![("FAKE_MCP_CALL", CALL)];
        vars.extend(env);
        let ws = one_member("claude", "claude", &vars, json!({}));
        let kdd = Kdd::start_beside(Beside::StandIn, &[]);
        let (answer, t) = ask(&kdd, &ws, None).await;
        assert_acts_as(&said(&answer), &kdd, "claude", &t);
        let call = call_record(&ws.file("record.jsonl"));
        assert_eq!(call["deferred"], deferred, "{call}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_exec_is_given_kds_server_approved_with_the_variables_named() {
    let ws = one_member("codex", "codex", &[("FAKE_MCP_CALL", CALL)], json!({"transport": "exec"}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let (answer, t) = ask(&kdd, &ws, None).await;
    let said = said(&answer);
    assert_acts_as(&said, &kdd, "codex", &t);
    assert_eq!(said["inherited"], false, "codex gives its server only what the config names");
    let recs = records(&ws.file("record.jsonl"));
    assert_eq!(recs[0]["mcp"]["approval"], "approve");
    let argv = recs[0]["argv"].to_string();
    assert!(!argv.contains("kdcap_"), "no capability on a command line: {argv}");
}

/// The fake refuses the call as codex does under approval `never`, so the
/// test above proves kd's `default_tools_approval_mode`.
#[tokio::test(flavor = "multi_thread")]
async fn codex_exec_refuses_a_call_that_needs_approval_as_codex_does() {
    let override_ = r#"mcp_servers.kd.default_tools_approval_mode="prompt""#;
    let agent = json!({"transport": "exec", "args": ["-c", override_]});
    let ws = one_member("codex", "codex", &[("FAKE_MCP_CALL", CALL)], agent);
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let (answer, _) = ask(&kdd, &ws, None).await;
    assert_eq!(answer.body, "Tool said: MCP tool call requires approval, but approval policy is never");
    let call = call_record(&ws.file("record.jsonl"));
    assert!(call.get("result").is_none(), "nothing reached the server's tools/call: {call}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_with_mcp_off_gets_no_server_and_the_shell_hint() {
    for backend in ["claude", "codex"] {
        let agent = if backend == "codex" { json!({"mcp": false, "transport": "exec"}) } else { json!({"mcp": false}) };
        let ws = one_member(backend, backend, &[("FAKE_MCP_CALL", CALL)], agent);
        let kdd = Kdd::start_beside(Beside::StandIn, &[]);
        let (answer, _) = ask(&kdd, &ws, None).await;
        assert_eq!(answer.body, "Tool said: (no MCP server kd was configured)", "{backend}");
        let recs = records(&ws.file("record.jsonl"));
        assert_eq!(recs[0]["mcp"], Value::Null, "{backend}");
        let argv = recs[0]["argv"].to_string();
        assert!(!argv.contains("mcp"), "{backend}: {argv}");
        let prompt = kd_tests::prompt_of(&recs[0]);
        assert!(prompt.contains("`kd send --to NAME"), "{backend}: {prompt}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_preamble_names_kds_tools_to_a_member_that_has_them() {
    let ws = one_member("claude", "claude", &[], json!({}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    ask(&kdd, &ws, None).await;
    let prompt = kd_tests::prompt_of(&records(&ws.file("record.jsonl"))[0]);
    assert!(prompt.contains("The tools of the MCP server `kd`"), "{prompt}");
    for tool in ["`send`", "`inbox`", "`ack`", "`claim`", "`thread`", "`search`"] {
        assert!(prompt.contains(tool), "{tool}: {prompt}");
    }
    assert!(!prompt.contains("kd send --to"), "{prompt}");
}

/// What kdd says of a token now: `member.whoami`'s result or error message.
async fn whoami(kdd: &Kdd, token: &str) -> Result<Value, String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "member.whoami", "params": {"token": token}});
    let answer = kd_tests::rpc_post(&kdd.socket, &body.to_string());
    match answer.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err(answer["error"]["message"].as_str().unwrap_or_default().to_string()),
    }
}

/// Waits until `record` has a line `done` accepts.
async fn until_recorded(record: &str, done: impl Fn(&Value) -> bool) {
    kd_tests::within("a record line", async {
        while !records(record).iter().any(&done) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// `shared/captures/mcp/app-server.jsonl`: `thread/start` carries the
/// server in `config`; the thread's server acts by a grant of its own (no
/// run); a thread of history mode is let go after its run, and its token
/// with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_codex_app_server_thread_is_opened_with_kds_server_and_let_go_after_a_history_run() {
    let scratch = tempfile::tempdir().unwrap();
    let unloads = scratch.path().join("unloads.jsonl").display().to_string();
    let ws = one_member("codex", "codex", &[("FAKE_MCP_CALL", CALL), ("FAKE_RECORD_UNLOAD", &unloads)], json!({}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let (answer, t) = ask(&kdd, &ws, None).await;
    let said = said(&answer);
    assert_acts_as(&said, &kdd, "codex", &t);
    assert_eq!(said["whoami"]["run"], Value::Null, "the thread's own grant, not the run's: {said}");
    assert_eq!(said["inherited"], false, "codex gives its server only the config's env");
    assert_eq!(said["client"], "codex-mcp-client");
    let record = ws.file("record.jsonl");
    let turn = records(&record).into_iter().find(|r| r["turn"].is_string()).unwrap();
    assert_eq!(turn["mcp"]["approval"], "approve");
    assert_eq!(turn["mcp"]["command"], kdd.kd_beside().display().to_string());
    let thread = turn["thread"].as_str().unwrap().to_string();
    until_recorded(&unloads, |r| r["unsubscribed"] == thread.as_str()).await;
    let token = said["env"]["KD_RUN_TOKEN"].as_str().unwrap();
    let refused = whoami(&kdd, token).await.unwrap_err();
    assert!(refused.contains("unknown capability"), "revoked with its thread: {refused}");
}

/// In resume mode the thread stays loaded: its server and token serve the
/// member's next run too, and stay known between runs (refused only
/// because no run is in flight).
#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_codex_thread_keeps_its_server_and_token_across_runs() {
    let scratch = tempfile::tempdir().unwrap();
    let unloads = scratch.path().join("unloads.jsonl").display().to_string();
    let ws = one_member("codex", "codex", &[("FAKE_MCP_CALL", CALL), ("FAKE_RECORD_UNLOAD", &unloads)], json!({}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let Watched { c, t, mut sub } = Watched::open(&kdd, &ws, Some(kd_proto::types::ContextMode::Resume)).await;
    let mut seen = Vec::new();
    for n in 1..=2 {
        kd_tests::send_one_round(&c, &t, &format!("Question {n}?")).await;
        collect_until(&mut sub, |e| ended(e) == 1).await;
        let said = said(&kd_tests::last_message(&c, &t).await);
        assert_acts_as(&said, &kdd, "codex", &t);
        seen.push((said["pid"].clone(), said["env"]["KD_RUN_TOKEN"].as_str().unwrap().to_string()));
        let between = whoami(&kdd, &seen[0].1).await.unwrap_err();
        assert!(between.contains("has ended"), "known, but no run of codex is in flight: {between}");
    }
    assert_eq!(seen[0], seen[1], "one server per loaded thread, one token");
    let turns: Vec<Value> = records(&ws.file("record.jsonl")).into_iter().filter(|r| r["turn"].is_string()).collect();
    assert_eq!((turns[1]["resumed"].as_bool(), &turns[1]["thread"]), (Some(true), &turns[0]["thread"]));
    assert!(records(&unloads).is_empty(), "a thread resumed again is kept loaded");
}

/// An ACP member: the fake ACP agent (`fake-agent acp`) with `env`.
fn acp_member(env: &[(&str, &str)], agent: Value) -> Workspace {
    let mut a = json!({"args": ["acp"]});
    if let (Some(a), Some(extra)) = (a.as_object_mut(), agent.as_object()) {
        a.extend(extra.clone());
    }
    one_member("acp", "acp", env, a)
}

/// `shared/captures/mcp/claude-code-acp.jsonl`: `session/new` carries
/// `mcpServers` and the `_meta` that allows kd's tools, so no permission is
/// asked; the session's server acts by a grant of its own, revoked after a
/// run of history mode.
#[tokio::test(flavor = "multi_thread")]
async fn an_acp_session_is_given_kds_server_and_claude_code_acps_allowance() {
    let ws = acp_member(&[("FAKE_MCP_CALL", CALL)], json!({}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let (answer, t) = ask(&kdd, &ws, None).await;
    let said = said(&answer);
    assert_acts_as(&said, &kdd, "acp", &t);
    assert_eq!(said["whoami"]["run"], Value::Null, "the session's own grant: {said}");
    assert_eq!(said["client"], "claude-code");
    let recs = records(&ws.file("record.jsonl"));
    assert!(!recs.iter().any(|r| r["permission"].is_string()), "no permission asked: {recs:?}");
    let prompt = recs.iter().find(|r| r["session"].is_string()).unwrap();
    assert_eq!(prompt["allowed"], json!(["mcp__kd"]));
    assert_eq!(prompt["mcp"]["command"], kdd.kd_beside().display().to_string());
    let refused = whoami(&kdd, said["env"]["KD_RUN_TOKEN"].as_str().unwrap()).await.unwrap_err();
    assert!(refused.contains("unknown capability"), "a session of history mode is not loaded again: {refused}");
}

/// `shared/captures/mcp/codex-acp.unannotated.jsonl`: codex-acp asks
/// "Approve MCP tool call" (`rawInput.server_name: "kd"`); kd allows its
/// own tools whatever the member's policy, and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn kd_allows_its_own_tools_when_codex_acp_asks_whatever_the_policy() {
    let env = [("FAKE_MCP_CALL", CALL), ("FAKE_ACP", "codex-acp")];
    let ws = acp_member(&env, json!({"permissions": "deny"}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let (answer, t) = ask(&kdd, &ws, None).await;
    let said = said(&answer);
    assert_acts_as(&said, &kdd, "acp", &t);
    assert_eq!((said["client"].as_str(), said["inherited"].as_bool()), (Some("codex-mcp-client"), Some(false)));
    let recs = records(&ws.file("record.jsonl"));
    let asked: Vec<&Value> = recs.iter().filter(|r| r["permission"].is_string()).collect();
    assert_eq!(asked.len(), 1, "{recs:?}");
    assert_eq!(asked[0]["permission"], "approved");

    // Without kd's server, a server of that name is nobody kd vouches for.
    let ws = acp_member(&env, json!({"permissions": "deny", "mcp": false}));
    let (answer, _) = ask(&kdd, &ws, None).await;
    assert_eq!(answer.body, "Tool said: (no MCP server kd was configured)");
    let recs = records(&ws.file("record.jsonl"));
    assert_eq!(recs.iter().find(|r| r["session"].is_string()).unwrap()["mcp"], Value::Null);
}

/// In resume mode the session is loaded again (`session/load` with
/// `mcpServers`), with the token it was opened with.
#[tokio::test(flavor = "multi_thread")]
async fn a_loaded_acp_session_keeps_its_token() {
    let ws = acp_member(&[("FAKE_MCP_CALL", CALL)], json!({}));
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let Watched { c, t, mut sub } = Watched::open(&kdd, &ws, Some(kd_proto::types::ContextMode::Resume)).await;
    for n in 1..=2 {
        kd_tests::send_one_round(&c, &t, &format!("Question {n}?")).await;
        collect_until(&mut sub, |e| ended(e) == 1).await;
        assert_acts_as(&said(&kd_tests::last_message(&c, &t).await), &kdd, "acp", &t);
    }
    let prompts: Vec<Value> =
        records(&ws.file("record.jsonl")).into_iter().filter(|r| r["session"].is_string()).collect();
    assert_eq!((prompts[0]["loaded"].as_bool(), prompts[1]["loaded"].as_bool()), (Some(false), Some(true)));
    let token = |p: &Value| p["mcp"]["env"]["KD_RUN_TOKEN"].as_str().unwrap().to_string();
    assert_eq!(token(&prompts[0]), token(&prompts[1]));
}

/// gemini takes the server from a system-defaults file of the run's own
/// (`GEMINI_CLI_SYSTEM_DEFAULTS_PATH`), in kdd's directory, with the
/// user's own defaults kept, `trust` so that no call asks, gone after the run.
#[tokio::test(flavor = "multi_thread")]
async fn gemini_is_given_kds_server_in_a_settings_file_of_the_runs_own() {
    let scratch = tempfile::tempdir().unwrap();
    let theirs = scratch.path().join("system-defaults.json");
    std::fs::write(&theirs, r#"{"ui": {"theme": "x"}, "mcpServers": {"theirs": {"command": "/bin/true"}}}"#).unwrap();
    let theirs = theirs.display().to_string();
    let ws = one_member(
        "gemini",
        "gemini",
        &[("FAKE_MCP_CALL", CALL), ("GEMINI_CLI_SYSTEM_DEFAULTS_PATH", &theirs)],
        json!({}),
    );
    let kdd = Kdd::start_beside(Beside::StandIn, &[]);
    let (answer, t) = ask(&kdd, &ws, None).await;
    let said = said(&answer);
    assert_acts_as(&said, &kdd, "gemini", &t);
    let recs = records(&ws.file("record.jsonl"));
    let defaults = &recs[0]["gemini_defaults"];
    let path = defaults["path"].as_str().unwrap();
    assert_ne!(path, theirs);
    assert!(path.starts_with(&kdd.socket.parent().unwrap().display().to_string()), "kdd's own directory: {path}");
    assert_eq!(defaults["settings"]["ui"]["theme"], "x", "the user's defaults are kept");
    assert_eq!(defaults["settings"]["mcpServers"]["theirs"]["command"], "/bin/true");
    assert_eq!(defaults["settings"]["mcpServers"]["kd"]["trust"], true);
    assert!(!std::path::Path::new(path).exists(), "gone with the run");
}

/// Runs `kd ARGS` in the workspace against `kdd`.
async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// kdd finds the `kd` for the server beside itself, else `KD_KD`, else on
/// `PATH`; with none, runs go without kd's tools, told the shell commands,
/// and `kd doctor` and `kd config check` say why.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_kd_runs_go_without_kds_server_and_doctor_and_config_check_say_so() {
    let ws = one_member("claude", "claude", &[("FAKE_MCP_CALL", CALL)], json!({}));
    let kdd = Kdd::start_beside(Beside::Nothing, &[("PATH", "/usr/bin:/bin")]);
    let (answer, _) = ask(&kdd, &ws, None).await;
    assert_eq!(answer.body, "Tool said: (no MCP server kd was configured)");
    let prompt = kd_tests::prompt_of(&records(&ws.file("record.jsonl"))[0]);
    assert!(prompt.contains("`kd send --to NAME"), "without the tools, the shell commands: {prompt}");
    let missing = "council.mcp: no kd found beside kdd, in KD_KD or on PATH to serve kd's MCP server (kd mcp): \
                   claude run without kd's tools";
    let check = kd(&kdd, &ws, &["config", "check"]).await;
    assert!(check.status.success(), "{}", check.stderr);
    assert!(check.stdout.lines().any(|l| l == format!("warning: {missing}")), "{}", check.stdout);
    let doctor = kd(&kdd, &ws, &["doctor"]).await;
    assert!(doctor.status.success(), "a warning, not a failure: {}", doctor.stdout);
    assert!(doctor.stdout.lines().any(|l| l == format!("warn  mcp: {missing}")), "{}", doctor.stdout);
    drop(kdd);

    // KD_KD names one.
    let stand_in = kd_tests::bin("fake-agent").display().to_string();
    let kdd = Kdd::start_beside(Beside::Nothing, &[("PATH", "/usr/bin:/bin"), ("KD_KD", &stand_in)]);
    let (answer, t) = ask(&kdd, &ws, None).await;
    assert_acts_as(&said(&answer), &kdd, "claude", &t);
    let doctor = kd(&kdd, &ws, &["doctor"]).await;
    let line = format!("ok    mcp: {stand_in} mcp serves kd's tools to claude");
    assert!(doctor.stdout.lines().any(|l| l == line), "{}", doctor.stdout);
}

/// The usual daemon's `kd` is the one built beside it.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_names_the_kd_beside_kdd() {
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[]), ("cursor", "cursor", &[])]);
    let kdd = Kdd::start();
    let doctor = kd(&kdd, &ws, &["doctor"]).await;
    let line = format!("ok    mcp: {} mcp serves kd's tools to claude, codex", kd_tests::bin("kd").display());
    assert!(doctor.stdout.lines().any(|l| l == line), "cursor takes no per-run server: {}", doctor.stdout);
}

/// The whole path, for every backend: the King asks `sender` (a fake of
/// `backend`); its run calls `send` to `peer` through kd's real MCP server
/// (`kd mcp`, the `kd` built beside kdd), acting by the run's capability;
/// the message is stored from `sender` (never the King) and reaches `peer`,
/// whose run answers it.
async fn a_send_through_kds_tool_reaches_the_other_member_as_itself(backend: &str, env: &[(&str, &str)], agent: Value) {
    let call = r#"send {"to": ["peer"], "body": "hello peer, from my tool"}"#;
    let ws = Workspace::new(&[]);
    let mut vars = vec![("FAKE_MCP_CALL", call)];
    vars.extend_from_slice(env);
    let mut sender = fake(backend, "sender", &vars);
    if let (Some(a), Some(extra)) = (sender.as_object_mut(), agent.as_object()) {
        a.extend(extra.clone());
    }
    let peer = fake("claude", "peer", &[("FAKE_TEXT", "Got it.")]);
    ws.write_config(&json!({"council": {"members": ["sender", "peer"]}, "agents": {"sender": sender, "peer": peer}}));
    let kdd = Kdd::start();
    let Watched { c, t, mut sub } = Watched::open(&kdd, &ws, None).await;
    use kd_client::prelude::*;
    c.council_send(
        t.clone(),
        "Greet peer.".into(),
        Some(vec!["sender".into()]),
        None,
        None,
        None,
        None,
        Some(0),
        None,
        None,
    )
    .await
    .expect("council.send");
    collect_until(&mut sub, |e| ended(e) == 2).await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let sent = messages.iter().find(|m| m.body == "hello peer, from my tool").unwrap_or_else(|| panic!("{messages:?}"));
    assert_eq!(
        (sent.from.as_str(), sent.to.clone()),
        ("sender", vec!["peer".to_string()]),
        "stored as itself: {sent:?}"
    );
    let answer = messages.iter().find(|m| m.from == "sender" && m.body.starts_with("Tool said: ")).unwrap();
    assert_eq!(answer.kind, MessageKind::Agent, "{answer:?}");
    assert!(!messages.iter().any(|m| m.from == "king" && m.body.contains("hello peer")), "never as the King");
    let reply = messages.iter().find(|m| m.from == "peer").unwrap_or_else(|| panic!("peer never ran: {messages:?}"));
    assert_eq!(reply.body, "Got it.");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_sends_through_kds_tool_as_itself() {
    a_send_through_kds_tool_reaches_the_other_member_as_itself("claude", &[], json!({})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_exec_sends_through_kds_tool_as_itself() {
    a_send_through_kds_tool_reaches_the_other_member_as_itself("codex", &[], json!({"transport": "exec"})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_app_server_sends_through_kds_tool_as_itself() {
    a_send_through_kds_tool_reaches_the_other_member_as_itself("codex", &[], json!({})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_acp_sends_through_kds_tool_as_itself() {
    a_send_through_kds_tool_reaches_the_other_member_as_itself("acp", &[], json!({"args": ["acp"]})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_acp_sends_through_kds_tool_as_itself() {
    let env = [("FAKE_ACP", "codex-acp")];
    a_send_through_kds_tool_reaches_the_other_member_as_itself("acp", &env, json!({"args": ["acp"]})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_sends_through_kds_tool_as_itself() {
    a_send_through_kds_tool_reaches_the_other_member_as_itself("gemini", &[], json!({})).await;
}

/// A `kd` that does not serve kd's tools (here `false`, which exits at
/// once) is a failed check: kd doctor starts the server as a CLI would and
/// asks it `initialize`, instead of trusting that a file is there.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_fails_a_kd_mcp_that_does_not_answer_initialize() {
    let ws = one_member("claude", "claude", &[], json!({}));
    let kdd = Kdd::start_beside(Beside::Nothing, &[("PATH", "/usr/bin:/bin"), ("KD_KD", "/bin/false")]);
    let doctor = kd(&kdd, &ws, &["doctor"]).await;
    let line = "FAIL  mcp: /bin/false mcp ended without answering initialize: members run without kd's tools";
    assert!(doctor.stdout.lines().any(|l| l == line), "{}", doctor.stdout);
    assert!(!doctor.status.success(), "a failed check fails kd doctor");
}
