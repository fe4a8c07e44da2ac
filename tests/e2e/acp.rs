//! An Agent Client Protocol member (`backend: "acp"`), played by
//! `fake-agent acp`: it streams, cancels, loads its session in resume mode,
//! and has its permission requests answered by the member's policy.

use kd_client::prelude::*;
use kd_proto::types::{ContextMode, MessageKind, ThreadEvent};
use kd_tests::{Kdd, Workspace, alive, bin, collect_until, ended, records, send_one_round as send};

/// A workspace whose one member `acp` is the fake ACP agent with `env`.
fn acp_member(env: &[(&str, &str)], extra: serde_json::Value) -> Workspace {
    let ws = Workspace::new(&[]);
    let mut vars = serde_json::Map::new();
    vars.insert("FAKE_NAME".into(), "acp".into());
    for (k, v) in env {
        vars.insert(k.to_string(), v.to_string().into());
    }
    let mut agent = serde_json::json!({"backend": "acp", "command": bin("fake-agent"), "args": ["acp"], "env": vars});
    if let (Some(a), Some(e)) = (agent.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    ws.write_config(&serde_json::json!({"council": {"members": ["acp"]}, "agents": {"acp": agent}}));
    ws
}

fn deltas(events: &[ThreadEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Delta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_member_streams_its_answer() {
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("r.jsonl").display().to_string();
    // Held after its first piece: the rest comes as later deltas.
    let hold = kd_tests::Hold::new();
    let env = [("FAKE_DELTAS", "4"), ("FAKE_HOLD", hold.var()), ("FAKE_RECORD", record.as_str())];
    let ws = acp_member(&env, serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "What about X?").await;
    let mut events = collect_until(&mut sub, |e| !deltas(e).is_empty()).await;
    hold.release();
    events.extend(collect_until(&mut sub, |e| ended(e) == 1).await);
    let streamed = deltas(&events);
    assert!(streamed.len() > 1, "piece by piece: {streamed:?}");
    assert_eq!(streamed.concat(), "Answer from acp.");
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Agent, "Answer from acp."));
    let recs = records(&record);
    assert_eq!(recs[0]["cwd"], ws.path(), "the session works in the thread's workspace");
    assert!(kd_tests::prompt_of(&recs[0]).ends_with("What about X?\n\n---\nYou are acp. Continue the discussion."));
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_sends_session_cancel_and_keeps_the_partial_text() {
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("r.jsonl").display().to_string();
    let text = format!("Answer {}", "word ".repeat(200));
    // Held after its first piece until the test ends: cancelled mid-answer.
    let hold = kd_tests::Hold::new();
    let env = [("FAKE_DELTAS", "20"), ("FAKE_HOLD", hold.var()), ("FAKE_TEXT", &text), ("FAKE_RECORD", &record)];
    let ws = acp_member(&env, serde_json::json!({}));
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Go on.").await;
    let started = collect_until(&mut sub, |e| !deltas(e).is_empty()).await;
    let pid = kd_tests::run_pid(&started);
    c.run_cancel(t.clone(), Some("acp".into()), None).await.unwrap();
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { .. })), "{events:?}");
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(last.kind, MessageKind::Interrupted);
    assert!(last.body.len() >= 3 && text.starts_with(&last.body), "{:?}", last.body);
    assert!(records(&record).iter().any(|r| r["cancelled"].is_string()), "session/cancel was sent");
    assert!(alive(pid), "the agent process serves the member's next run");
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_mode_loads_the_members_session() {
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("r.jsonl").display().to_string();
    let ws = acp_member(&[("FAKE_RECORD", &record)], serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, Some(ContextMode::Resume)).await;
    send(&c, &t, "One?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    send(&c, &t, "Two?").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(!deltas(&events).concat().contains("replayed"), "the replayed history is not the answer: {events:?}");
    let recs = records(&record);
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!((recs[0]["loaded"].as_bool(), recs[1]["loaded"].as_bool()), (Some(false), Some(true)));
    assert_eq!(recs[0]["session"], recs[1]["session"]);
    let prompt = kd_tests::prompt_of(&recs[1]);
    assert!(prompt.contains("Two?") && !prompt.contains("One?"), "only what is new: {prompt}");
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Agent, "Answer from acp."));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_cannot_load_sessions_is_a_clear_error_in_resume_mode() {
    let ws = acp_member(&[("FAKE_NO_LOAD", "1")], serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, Some(ContextMode::Resume)).await;
    send(&c, &t, "One?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    send(&c, &t, "Two?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(last.kind, MessageKind::Error);
    assert!(last.body.starts_with("acp: the agent cannot load a session"), "{}", last.body);
}

/// The option the agent got for a tool call of `kind` under `extra`
/// config, and the run's message. The fake asks as claude-code-acp does:
/// the kind only in the `tool_call` update before the request. No King's
/// client follows the thread (the test waits on the journal): what the
/// policy does not allow is answered by the member's `permissions`.
async fn permission(kind: &str, extra: serde_json::Value) -> (String, kd_proto::types::Message, Workspace) {
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("r.jsonl").display().to_string();
    let ws = acp_member(&[("FAKE_PERMISSION", kind), ("FAKE_RECORD", &record)], extra);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    send(&c, &t, "Edit it.").await;
    kd_tests::settled(&kdd.db, &t).await;
    let last = kd_tests::last_message(&c, &t).await;
    let recs = records(&record);
    let chosen = recs.iter().find_map(|r| r["permission"].as_str().map(str::to_string)).unwrap();
    (chosen, last, ws)
}

/// The option chosen for a tool call of `kind`; the run must have answered.
async fn allowed(kind: &str, extra: serde_json::Value) -> String {
    let (chosen, last, _ws) = permission(kind, extra).await;
    if chosen.starts_with("allow") {
        assert_eq!(
            (last.kind, last.body.as_str()),
            (MessageKind::Agent, "Let me check.\n\nAnswer from acp."),
            "{kind}: allowed, the answer goes on"
        );
    }
    chosen
}

#[tokio::test(flavor = "multi_thread")]
async fn permission_requests_are_decided_on_the_kind_the_tool_call_announced() {
    assert_eq!(allowed("read", serde_json::json!({})).await, "allow", "read-only by default: reads allowed");
    assert_eq!(allowed("search", serde_json::json!({})).await, "allow");
    assert_eq!(allowed("edit", serde_json::json!({})).await, "reject", "writes denied");
    assert_eq!(allowed("execute", serde_json::json!({})).await, "reject");
    assert_eq!(allowed("other", serde_json::json!({})).await, "reject", "an unknown kind is not a read");
    assert_eq!(allowed("edit", serde_json::json!({"permissions": "allow"})).await, "allow");
    assert_eq!(allowed("read", serde_json::json!({"permissions": "deny"})).await, "reject");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_tool_is_said_plainly_and_the_text_so_far_is_kept() {
    let (chosen, last, ws) = permission("edit", serde_json::json!({})).await;
    assert_eq!(chosen, "reject");
    assert_eq!(last.kind, MessageKind::Error);
    assert_eq!(
        last.body,
        format!("acp: refused by policy read-only: Write {}/notes.md\n\n---\nLet me check.", ws.path()),
        "not the adapter's internal error"
    );
    let (_, last, _ws) = permission("execute", serde_json::json!({"permissions": "deny"})).await;
    assert_eq!(last.body, "acp: refused by policy deny: `rm -rf build`\n\n---\nLet me check.");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_prompt_is_an_error_with_the_agents_reason() {
    let ws = acp_member(&[("FAKE_ERROR", "model overloaded")], serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Q?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Error, "acp: model overloaded"));
}

/// The agent's pid after one answered question.
async fn started_agent(env: &[(&str, &str)]) -> (Kdd, u32, Workspace) {
    let ws = acp_member(env, serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Q?").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    (kdd, kd_tests::run_pid(&events), ws)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_and_what_it_started_end_with_the_daemon() {
    // A child in the agent's process group does not die with kdd by itself
    // (only the agent has PR_SET_PDEATHSIG): kd kills the group, and what
    // left it for a session of its own by the agent's marker.
    for (how, eof) in [("group", true), ("group", false), ("own-session", true), ("own-session", false)] {
        let scratch = tempfile::tempdir().unwrap();
        let record = scratch.path().join("r.jsonl").display().to_string();
        let mut env = vec![("FAKE_CHILD", how), ("FAKE_RECORD", record.as_str())];
        if !eof {
            env.push(("FAKE_IGNORE_EOF", "1"));
        }
        let (mut kdd, pid, _ws) = started_agent(&env).await;
        let child = records(&record).iter().find_map(|r| r["child"].as_u64()).unwrap() as u32;
        assert!(alive(pid) && alive(child));
        assert!(kdd.stop().success());
        kd_tests::until_gone(pid, "the ACP agent after kdd stopped").await;
        kd_tests::until_gone(child, &format!("the agent's child ({how}) after kdd stopped")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_agent_started_dies_when_a_killed_daemon_restarts() {
    for how in ["group", "own-session"] {
        let scratch = tempfile::tempdir().unwrap();
        let record = scratch.path().join("r.jsonl").display().to_string();
        let (mut kdd, pid, _ws) = started_agent(&[("FAKE_CHILD", how), ("FAKE_RECORD", record.as_str())]).await;
        let child = records(&record).iter().find_map(|r| r["child"].as_u64()).unwrap() as u32;
        kdd.kill9();
        // The agent dies with kdd (PR_SET_PDEATHSIG); what it started does not.
        kd_tests::until_gone(pid, "the ACP agent after kill -9").await;
        assert!(alive(child), "{how}: nothing but recovery kills it");
        kdd.launch().unwrap();
        kd_tests::until_gone(child, &format!("the agent's child ({how}) after kdd restarted")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_and_plans_are_shown_as_activity_not_answer_text() {
    let ws = acp_member(&[("FAKE_RUN", "cargo test")], serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Test it.").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let activities: Vec<&str> = events
        .iter()
        .filter_map(|e| if let ThreadEvent::Activity { what, .. } = e { Some(what.as_str()) } else { None })
        .collect();
    assert_eq!(activities, ["plan: Answer", "cargo test"], "{events:?}");
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Agent, "Answer from acp."));
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_dead_agent_started_is_killed_and_the_next_question_starts_another() {
    for how in ["group", "group-stdout"] {
        dead_agent(how).await;
    }
}

/// `how`: the agent's child holds its stdout open (`group-stdout`) or not.
async fn dead_agent(how: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("r.jsonl").display().to_string();
    let (mut kdd, pid, ws) = started_agent(&[("FAKE_CHILD", how), ("FAKE_RECORD", record.as_str())]).await;
    let child = records(&record).iter().find_map(|r| r["child"].as_u64()).unwrap() as u32;
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), rustix::process::Signal::KILL)
        .unwrap();
    kd_tests::until_gone(pid, "the ACP agent").await;
    kd_tests::until_gone(child, "what the dead agent started").await;
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Again?").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunStarted { pid: p, .. } if *p != pid)), "{events:?}");
    assert_eq!(kd_tests::last_message(&c, &t).await.kind, MessageKind::Agent);
    // The new agent started a child too: a graceful stop ends it.
    let children: Vec<u32> = records(&record).iter().filter_map(|r| r["child"].as_u64()).map(|p| p as u32).collect();
    assert!(kdd.stop().success());
    for child in children {
        kd_tests::until_gone(child, "the second agent's child after kdd stopped").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_exits_at_start_is_explained_by_its_error_line_first() {
    let stderr = "npm warn exec The following package was not found and will be installed\n\
                  Error: Cannot find module '@zed-industries/claude-code-acp'\n\
                  \x20   at Module._resolveFilename (node:internal/modules/cjs/loader:1145:15)\n\
                  \n\
                  Node.js v22.3.0";
    let ws = acp_member(&[("FAKE_STDERR", stderr), ("FAKE_NO_OUTPUT", "1"), ("FAKE_EXIT", "1")], serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Q?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(last.kind, MessageKind::Error);
    assert_eq!(
        last.body,
        format!(
            "acp: cannot start {}: initialize failed: the ACP agent exited (status 1): Error: Cannot find module \
             '@zed-industries/claude-code-acp'\nnpm warn exec The following package was not found and will be \
             installed\n    at Module._resolveFilename (node:internal/modules/cjs/loader:1145:15)\nNode.js v22.3.0",
            kd_tests::bin("fake-agent").display()
        )
    );
}
