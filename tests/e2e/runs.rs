//! Agent runs against fake agents: streaming, prompts, resume, cancel,
//! timeout, bad agents, two clients, crash recovery.

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::{ContextMode, MessageKind, RunStatus, SessionStatus, ThreadEvent};
use kd_tests::{
    Kdd, Workspace, alive, collect_until, ended, prompt_of, records, run, send_one_round as send, thread_in, within,
};

const FAST_KILL: &[&str] = &["--kill-grace-ms", "300"];

fn messages_of(events: &[ThreadEvent]) -> Vec<&kd_proto::types::Message> {
    events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Message { message } => Some(message.as_ref()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_members_stream_concurrently_and_every_answer_lands_after_its_deltas() {
    // Each member streams its first piece, then holds until all three are
    // streaming at once.
    let hold = kd_tests::Hold::new();
    let env = [("FAKE_DELTAS", "8"), ("FAKE_HOLD", hold.var())];
    let ws = Workspace::new(&[("claude", "claude", &env), ("codex", "codex", &env), ("gemini", "gemini", &env)]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), Some(0), None).await.unwrap();
    let sent = send(&c, &t, "What about X?").await;
    assert_eq!(sent.runs.iter().map(|r| r.run.member.as_str()).collect::<Vec<_>>(), ["claude", "codex", "gemini"]);
    let streaming =
        |e: &[ThreadEvent], m: &str| e.iter().any(|e| matches!(e, ThreadEvent::Delta { member, .. } if member == m));
    let mut events = collect_until(&mut sub, |e| ["claude", "codex", "gemini"].iter().all(|m| streaming(e, m))).await;
    assert_eq!(ended(&events), 0, "all three stream at once");
    hold.release();
    events.extend(collect_until(&mut sub, |e| ended(e) == 3).await);

    for member in ["claude", "codex", "gemini"] {
        let first_delta = events.iter().position(|e| matches!(e, ThreadEvent::Delta { member: m, .. } if m == member));
        let message =
            events.iter().position(|e| matches!(e, ThreadEvent::Message { message } if message.from == member));
        let (Some(d), Some(m)) = (first_delta, message) else { panic!("{member}: no delta or message in {events:?}") };
        assert!(d < m, "{member}: a delta must come before the final message");
        let streamed: String = events
            .iter()
            .filter_map(|e| match e {
                ThreadEvent::Delta { member: m, text, .. } if m == member => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(streamed, format!("Answer from {member}."));
    }
    // Every member streams piece by piece (lines that arrive in one read
    // make one delta: at least the piece before the hold and what came
    // after it), codex through its app-server.
    let deltas =
        |m: &str| events.iter().filter(|e| matches!(e, ThreadEvent::Delta { member, .. } if member == m)).count();
    assert!(deltas("claude") > 1 && deltas("gemini") > 1 && deltas("codex") > 1, "{events:?}");
    let stored = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!(stored.len(), 4);
    let mut answers: Vec<(String, String, MessageKind, Option<u64>)> =
        stored[1..].iter().map(|m| (m.from.clone(), m.body.clone(), m.kind, m.reply_to)).collect();
    answers.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        answers,
        ["claude", "codex", "gemini"]
            .map(|m| (m.to_string(), format!("Answer from {m}."), MessageKind::Agent, Some(1)))
            .to_vec()
    );
    let claude = stored.iter().find(|m| m.from == "claude").unwrap();
    let meta = claude.run.as_ref().unwrap();
    assert_eq!(meta.backend.as_deref(), Some("claude"));
    assert_eq!(meta.cost_usd, Some(0.0012));
    assert!(meta.backend_session_id.as_deref().unwrap().starts_with("fake-session-"));
    assert_eq!(meta.exit_status, Some(0));
    assert!(c.run_list(None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_receives_exactly_preamble_agent_prompt_and_history() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let fake = |backend: &str| {
        let mut a = kd_tests::fake(backend, backend, &[("FAKE_RECORD", &record)]);
        a["prompts"] = serde_json::json!({"council": "Be brief."});
        a
    };
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"], "preamble": "You advise the King.", "coordination_hint": false},
        "agents": {"claude": fake("claude"), "codex": fake("codex")}
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    for (from, to, body) in [("king", &[][..], "First question?"), ("codex", &["claude"][..], "Claude, look.")] {
        kd_tests::append(&c, &t, from, body, to).await;
    }
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "What now?\nTwo lines.").await;
    collect_until(&mut sub, |e| ended(e) == 2).await;

    let recs = records(&record);
    assert_eq!(recs.len(), 2);
    let history = |target: &str| {
        format!(
            "You advise the King.\n\nBe brief.\n\n[Previous conversation]\nking: First question?\n\ncodex (to claude): Claude, look.\n\nking: What now?\nTwo lines.\n\n---\nYou are {target}. Continue the discussion."
        )
    };
    let claude =
        recs.iter().find(|r| r["argv"].as_array().unwrap().iter().any(|a| a == "--include-partial-messages")).unwrap();
    let argv: Vec<&str> = claude["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(argv[..5], ["-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages"]);
    // …and kd's MCP server (see mcp_wiring.rs) with its permission tool
    // (approvals.rs), nothing else.
    assert_eq!(
        (argv.len(), argv[5], argv[7], argv[8], argv[9], argv[10]),
        (11, "--mcp-config", "--allowedTools", "mcp__kd", "--permission-prompt-tool", "mcp__kd__approve"),
        "{argv:?}"
    );
    assert_eq!(claude["stdin"], history("claude"), "claude reads the prompt on stdin");
    assert_eq!(claude["cwd"], ws.path(), "the agent runs in the thread's workspace");
    let codex = recs.iter().find(|r| r["argv"][0] == "app-server").unwrap();
    assert_eq!(
        codex["argv"],
        serde_json::json!([
            "app-server",
            "-c",
            "analytics.enabled=false",
            "-c",
            "otel.metrics_exporter=none",
            "--disable",
            "plugins"
        ])
    );
    assert_eq!(codex["stdin"], history("codex"), "codex gets the prompt in turn/start");
    assert_eq!(codex["cwd"], ws.path(), "the codex thread works in the thread's workspace");
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_mode_passes_the_previous_session_and_a_concurrent_resume_is_refused() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_RECORD", &record), ("FAKE_SESSION_ID", "S-42")])}
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, Some(ContextMode::Resume)).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "One?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    send(&c, &t, "Two?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;

    let recs = records(&record);
    assert_eq!(recs.len(), 2);
    assert!(
        !recs[0]["argv"].as_array().unwrap().iter().any(|a| a == "--resume"),
        "no session to resume the first time"
    );
    let argv: Vec<&str> = recs[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(argv.windows(2).any(|w| w == ["--resume", "S-42"]), "{argv:?}");
    assert_eq!(
        recs[1]["stdin"], "[New messages]\nking: Two?\n\n---\nYou are claude. Continue the discussion.",
        "a resumed session gets only what it has not seen"
    );
    let sessions = c.session_list(Some(t.clone()), Some("claude".into()), None).await.unwrap();
    assert_eq!(sessions.len(), 1, "one session per thread and agent");
    assert_eq!((sessions[0].status, sessions[0].backend_session_id.as_deref()), (SessionStatus::Idle, Some("S-42")));

    // Someone else holds the session: the run is refused, never forked.
    c.session_resume(sessions[0].id.clone(), Some("other tool".into()), None).await.unwrap();
    send(&c, &t, "Three?").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let error = events.iter().find_map(|e| match e {
        ThreadEvent::RunError { error, .. } => Some(error.clone()),
        _ => None,
    });
    assert!(
        error.as_deref().is_some_and(|e| e.contains("Session already active") && e.contains("other tool")),
        "{error:?}"
    );
    assert_eq!(records(&record).len(), 2, "no third agent process");
    // Another thread never carries this thread's session.
    let other = thread_in(&c, &ws, Some(ContextMode::Resume)).await;
    let mut sub2 = c.thread_subscribe(other.clone(), None, None).await.unwrap();
    send(&c, &other, "Fresh?").await;
    collect_until(&mut sub2, |e| ended(e) == 1).await;
    let third = &records(&record)[2];
    assert!(!third["argv"].as_array().unwrap().iter().any(|a| a == "--resume"));
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_mode_gives_each_member_every_message_it_has_not_seen_exactly_once() {
    let ws = Workspace::new(&[]);
    let (claude_rec, codex_rec) = (ws.file("claude.jsonl"), ws.file("codex.jsonl"));
    // claude is held in each first round until codex's answer is stored.
    let configure = |hold: &kd_tests::Hold| {
        let claude_env: &[(&str, &str)] =
            &[("FAKE_RECORD", &claude_rec), ("FAKE_TEXT", "From claude: {pid}."), ("FAKE_HOLD", &hold.env())];
        let codex_env: &[(&str, &str)] = &[("FAKE_RECORD", &codex_rec), ("FAKE_TEXT", "From codex: {turn}.")];
        ws.write_config(&serde_json::json!({
            "council": {"members": ["claude", "codex"]},
            "agents": {"claude": kd_tests::fake("claude", "claude", claude_env), "codex": kd_tests::fake("codex", "codex", codex_env)}
        }));
    };
    let codex_done_claude_held = |e: &[ThreadEvent]| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "codex"))
            && e.iter().any(|e| matches!(e, ThreadEvent::Delta { member, .. } if member == "claude"))
    };
    let hold = kd_tests::Hold::new();
    configure(&hold);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, Some(ContextMode::Resume)).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "First question?").await;
    let mut events = collect_until(&mut sub, codex_done_claude_held).await;
    hold.release();
    events.extend(collect_until(&mut sub, |e| ended(e) == 1).await);
    assert_eq!(ended(&events), 2);
    // A second question with a discussion round: 2 parallel answers (claude
    // held again until codex's is in), then 2 turns.
    let hold = kd_tests::Hold::new();
    configure(&hold);
    c.council_send(t.clone(), "Second question?".into(), None, None, None, None, None, Some(1), None, None)
        .await
        .unwrap();
    let mut events = collect_until(&mut sub, codex_done_claude_held).await;
    hold.release();
    let rest = ended(&events);
    events.extend(collect_until(&mut sub, |e| rest + ended(e) == 4).await);

    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!(messages.len(), 8, "{messages:#?}");
    for (me, other, record) in [("claude", "codex", &claude_rec), ("codex", "claude", &codex_rec)] {
        let prompts: Vec<String> = records(record).iter().map(prompt_of).collect();
        assert_eq!(prompts.len(), 3, "{me}: three runs");
        let all = prompts.join("\n=====\n");
        let seen_by_last_run = messages
            .iter()
            .filter(|m| m.from == other || m.from == "king")
            .filter(|m| m.seq < messages.iter().rfind(|x| x.from == me).map(|x| x.seq).unwrap_or(0));
        for m in seen_by_last_run {
            assert_eq!(
                all.matches(&m.body).count(),
                1,
                "{me} got {:?} {} times:\n{all}",
                m.body,
                all.matches(&m.body).count()
            );
        }
        for (i, p) in prompts.iter().enumerate().skip(1) {
            assert!(p.starts_with("[New messages]\n"), "{me} prompt {i}: {p}");
            assert!(!p.contains(&format!("From {me}:")), "{me} is never told its own answers again: {p}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_backend_takes_a_two_mib_history() {
    let ws = Workspace::new(&[]);
    let backends = ["claude", "codex", "cursor", "gemini", "command"];
    let mut agents = serde_json::Map::new();
    for b in backends {
        let record = ws.file(&format!("{b}.jsonl"));
        let mut def = kd_tests::fake(b, b, &[("FAKE_RECORD", &record)]);
        if b == "command" {
            def["backend"] = "command".into();
        }
        agents.insert(b.to_string(), def);
    }
    ws.write_config(&serde_json::json!({"council": {"members": backends}, "agents": agents}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    // A 2 MiB message in the thread: every prompt is over 2 MiB.
    let big: String = "0123456789abcdef".repeat(2 * 1024 * 1024 / 16);
    kd_tests::append(&c, &t, "king", big.clone(), &[]).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Summarise the above.").await;
    let events = collect_until(&mut sub, |e| ended(e) == backends.len()).await;
    let errors: Vec<&ThreadEvent> = events.iter().filter(|e| matches!(e, ThreadEvent::RunError { .. })).collect();
    assert!(errors.is_empty(), "{errors:?}");
    for b in backends {
        let recs = records(&ws.file(&format!("{b}.jsonl")));
        assert_eq!(recs.len(), 1, "{b}");
        let prompt = prompt_of(&recs[0]);
        assert!(
            prompt.contains(&big)
                && prompt.ends_with(
                    "Summarise the above.\n\n---\nYou are {b}. Continue the discussion.".replace("{b}", b).as_str()
                ),
            "{b}: the whole history, {} bytes",
            prompt.len()
        );
        let argv_bytes: usize =
            recs[0]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap_or("").len()).sum();
        assert!(argv_bytes < 128 * 1024, "{b}: the prompt is not in argv ({argv_bytes} bytes)");
    }
}

/// A long answer, for runs that must still be streaming a while later.
fn long_text() -> String {
    format!("Answer {}", "word ".repeat(600))
}

/// Cancels a run mid-stream; `exec` runs codex as `codex exec --json`,
/// which streams nothing before its answer is whole.
async fn cancel_mid_stream(backend: &str, exec: bool) {
    let text = long_text();
    let scratch = tempfile::tempdir().unwrap();
    let record = scratch.path().join("record.jsonl").display().to_string();
    // Held after its first piece until the test ends: cancelled mid-stream.
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[(
        backend,
        backend,
        &[("FAKE_DELTAS", "400"), ("FAKE_HOLD", &hold.env()), ("FAKE_TEXT", &text), ("FAKE_RECORD", &record)],
    )]);
    if exec {
        ws.set_agent(backend, "transport", "exec".into());
    }
    let kdd = Kdd::start_with(FAST_KILL);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Go on.").await;
    let started = collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))
            || (exec && e.iter().any(|e| matches!(e, ThreadEvent::RunStarted { .. })))
    })
    .await;
    let pid = started
        .iter()
        .find_map(|e| match e {
            ThreadEvent::RunStarted { pid, .. } => Some(*pid),
            _ => None,
        })
        .unwrap();
    let cancelled = c.run_cancel(t.clone(), Some(backend.into()), None).await.unwrap();
    assert_eq!(cancelled.len(), 1);
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { .. })), "{backend}: {events:?}");
    let stored = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let last = stored.last().unwrap();
    assert_eq!(last.kind, MessageKind::Interrupted, "{backend}");
    if !exec {
        let body = last.body.as_str();
        assert!(
            body.len() >= 3 && body.len() < text.len() && text.starts_with(body),
            "{backend}: the partial text is kept: {body:?}"
        );
    }
    let runs = c.events_list(Some(t.clone()), None, Some("run.cancel".into()), None, None, None).await.unwrap();
    assert_eq!(runs.len(), 1);
    if backend == "codex" && !exec {
        // The turn was interrupted (`turn/interrupt`); the app-server lives
        // on for the next run.
        let recs = records(&record);
        assert_eq!(recs.iter().filter(|r| r["interrupted"].is_string()).count(), 1, "{recs:?}");
        assert_eq!(recs[1]["interrupted"], recs[0]["turn"]);
        assert!(alive(pid), "the codex app-server serves the next run");
    } else {
        assert!(!alive(pid), "{backend}: the agent process is gone");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_mid_stream_claude() {
    cancel_mid_stream("claude", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_mid_stream_codex() {
    cancel_mid_stream("codex", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_mid_stream_codex_exec() {
    cancel_mid_stream("codex", true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_mid_stream_cursor() {
    cancel_mid_stream("cursor", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_mid_stream_gemini() {
    cancel_mid_stream("gemini", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_mid_stream_command() {
    cancel_mid_stream("command", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let ws = Workspace::new(&[("gemini", "gemini", &[("FAKE_HANG", "1"), ("FAKE_IGNORE_TERM", "1")])]);
    let kdd = Kdd::start_with(FAST_KILL);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Hang.").await;
    let events =
        collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { chars, .. } if *chars > 10)))
            .await;
    let pid = kd_tests::run_pid(&events);
    c.run_cancel(t.clone(), None, None).await.unwrap();
    collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(!alive(pid));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_over_its_timeout_is_an_error_message() {
    over_timeout(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_turn_over_its_timeout_is_interrupted_and_an_error_message() {
    over_timeout(false).await;
}

async fn over_timeout(exec: bool) {
    let ws = Workspace::new(&[("codex", "codex", &[("FAKE_HANG", "1")])]);
    if exec {
        ws.set_agent("codex", "transport", "exec".into());
    }
    let kdd = Kdd::start_with(FAST_KILL);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Hang.".into(), None, None, None, Some(1), None, Some(0), None, None).await.unwrap();
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let pid = kd_tests::run_pid(&events);
    assert!(
        events.iter().any(|e| matches!(e, ThreadEvent::RunError { timed_out: true, error, .. } if error == "codex: timed out after 1 s")),
        "{events:?}"
    );
    let last = kd_tests::last_message(&c, &t).await;
    // The app-server streamed before it hung: that text is kept.
    let body =
        if exec { "codex: timed out after 1 s" } else { "codex: timed out after 1 s\n\n---\nAnswer from codex." };
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Error, body));
    // A process per run is killed; the app-server stays for the next run.
    assert_eq!(alive(pid), !exec);
}

/// Sends to one member and returns its final message.
async fn answer_of(member_backend: &str, agent: serde_json::Value) -> kd_proto::types::Message {
    let ws = Workspace::new(&[]);
    ws.write_config(&serde_json::json!({"council": {"members": [member_backend]}, "agents": {member_backend: agent}}));
    let kdd = Kdd::start_with(FAST_KILL);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Q?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    // The daemon is unharmed.
    c.daemon_status().await.unwrap();
    last
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_binary_says_which_and_how_to_configure_it() {
    let m = answer_of("claude", serde_json::json!({"command": "kd-no-such-claude"})).await;
    assert_eq!(m.kind, MessageKind::Error);
    assert_eq!(m.body, "claude: kd-no-such-claude not found in PATH — install it or set agents.claude.command");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_cursor_names_the_binaries_it_looked_for() {
    // A daemon whose PATH has neither of Cursor's binaries.
    let empty = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[]);
    ws.write_config(
        &serde_json::json!({"council": {"members": ["ghost"]}, "agents": {"ghost": {"backend": "cursor"}}}),
    );
    let kdd = Kdd::start_env(FAST_KILL, &[("PATH", empty.path().to_str().unwrap())]);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Q?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let m = kd_tests::last_message(&c, &t).await;
    assert_eq!(
        (m.kind, m.body.as_str()),
        (
            MessageKind::Error,
            "ghost: Cursor's CLI (agent or cursor-agent) not found in PATH — install it or set agents.ghost.command"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_long_lived_agent_says_which_and_how_to_configure_it() {
    let m = answer_of("codex", serde_json::json!({"command": "kd-no-such-codex"})).await;
    assert_eq!(
        (m.kind, m.body.as_str()),
        (MessageKind::Error, "codex: kd-no-such-codex not found in PATH — install it or set agents.codex.command")
    );
    let m = answer_of("helper", serde_json::json!({"backend": "acp", "command": "/opt/none/acp-agent"})).await;
    assert_eq!(
        (m.kind, m.body.as_str()),
        (MessageKind::Error, "helper: /opt/none/acp-agent not found — install it or set agents.helper.command")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_non_utf8_and_a_huge_line_are_skipped() {
    let env: &[(&str, &str)] = &[("FAKE_GARBAGE", "5"), ("FAKE_NON_UTF8", "1"), ("FAKE_HUGE_LINE", "9437184")];
    for backend in ["claude", "gemini"] {
        let m = answer_of(backend, kd_tests::fake(backend, backend, env)).await;
        assert_eq!(
            (m.kind, m.body.as_str()),
            (MessageKind::Agent, format!("Answer from {backend}.").as_str()),
            "{backend}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_only_and_no_output_are_clear_errors() {
    let m = answer_of(
        "gemini",
        kd_tests::fake("gemini", "gemini", &[("FAKE_GARBAGE", "4"), ("FAKE_DELTAS", "0"), ("FAKE_TEXT", " ")]),
    )
    .await;
    assert_eq!(m.kind, MessageKind::Error);
    assert!(m.body.starts_with("gemini: no answer (4 unreadable lines of output)"), "{}", m.body);
    let mut exec = kd_tests::fake("codex", "codex", &[("FAKE_NO_OUTPUT", "1")]);
    exec["transport"] = "exec".into();
    let m = answer_of("codex", exec).await;
    assert_eq!((m.kind, m.body.as_str()), (MessageKind::Error, "codex: no answer"));
    // An app-server that exits at once, saying why on stderr.
    let env = [("FAKE_NO_OUTPUT", "1"), ("FAKE_EXIT", "3"), ("FAKE_STDERR", "error: no such subcommand")];
    let m = answer_of("codex", kd_tests::fake("codex", "codex", &env)).await;
    assert_eq!(m.kind, MessageKind::Error);
    let bin = kd_tests::bin("fake-agent");
    assert_eq!(
        m.body,
        format!(
            "codex: cannot start {} app-server: initialize failed: the codex app-server exited (status 3): error: \
             no such subcommand",
            bin.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_are_judged_by_is_error_fatal_events_and_exit_status() {
    let m = answer_of(
        "claude",
        kd_tests::fake("claude", "claude", &[("FAKE_ERROR", "API Error: 529 Overloaded"), ("FAKE_DELTAS", "0")]),
    )
    .await;
    assert_eq!((m.kind, m.body.as_str()), (MessageKind::Error, "claude: API Error: 529 Overloaded"));
    let m = answer_of("codex", kd_tests::fake("codex", "codex", &[("FAKE_ERROR", "stream disconnected")])).await;
    assert_eq!(m.body, "codex: stream disconnected");
    let m = answer_of(
        "cursor",
        kd_tests::fake("cursor", "cursor", &[("FAKE_ERROR", "auth expired"), ("FAKE_DELTAS", "0")]),
    )
    .await;
    assert_eq!(m.body, "cursor: exited with status 1: auth expired");
    let m =
        answer_of("bot", kd_tests::fake("command", "bot", &[("FAKE_EXIT", "3"), ("FAKE_STDERR", "disk full")])).await;
    assert_eq!(m.kind, MessageKind::Error);
    assert!(m.body.starts_with("bot: exited with status 3: disk full"), "{}", m.body);
    assert_eq!(m.run.as_ref().and_then(|r| r.exit_status), Some(3));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_echoed_speaker_label_is_stripped_from_stream_and_message() {
    let ws = Workspace::new(&[("codex", "gemini", &[("FAKE_ECHO_LABEL", "1"), ("FAKE_DELTAS", "12")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Q?").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let streamed: String = events
        .iter()
        .filter_map(|e| if let ThreadEvent::Delta { text, .. } = e { Some(text.as_str()) } else { None })
        .collect();
    assert_eq!(streamed, "Answer from codex.");
    let answer = messages_of(&events).into_iter().find(|m| m.from == "codex").unwrap();
    assert_eq!(answer.body, "Answer from codex.");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_clients_see_the_same_stream_and_the_member_runs_once_at_a_time() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let hold = kd_tests::Hold::new();
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_RECORD", &record), ("FAKE_DELTAS", "20"), ("FAKE_HOLD", &hold.env()), ("FAKE_TEXT", &"abcd".repeat(10))])}
    }));
    let kdd = Kdd::start();
    let (a, b) = (kdd.client().await, kdd.client().await);
    let t = thread_in(&a, &ws, None).await;
    let mut sub_a = a.thread_subscribe(t.clone(), None, None).await.unwrap();
    let mut sub_b = b.thread_subscribe(t.clone(), None, None).await.unwrap();
    let first = send(&a, &t, "From A").await;
    let is_delta = |e: &[ThreadEvent]| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }));
    let mut ea = collect_until(&mut sub_a, is_delta).await;
    let mut eb = collect_until(&mut sub_b, is_delta).await;
    // B asks something else while claude answers A: a run of its own,
    // after the one in flight.
    let second = send(&b, &t, "From B").await;
    assert!(!first.runs[0].attached && !second.runs[0].attached);
    assert_ne!(first.runs[0].run.id, second.runs[0].run.id);
    assert_eq!(second.runs[0].run.status, RunStatus::Queued);
    hold.release();
    ea.extend(collect_until(&mut sub_a, |e| ended(e) == 2).await);
    eb.extend(collect_until(&mut sub_b, |e| ended(e) == 2).await);
    let deltas = |events: &[ThreadEvent], run: &str| -> Vec<(String, u64)> {
        events
            .iter()
            .filter_map(|e| match e {
                ThreadEvent::Delta { run: r, text, chars, .. } if r == run => Some((text.clone(), *chars)),
                _ => None,
            })
            .collect()
    };
    for run in [&first.runs[0].run.id, &second.runs[0].run.id] {
        assert_eq!(deltas(&ea, run), deltas(&eb, run), "both clients see the same stream");
        assert_eq!(deltas(&ea, run).iter().map(|d| d.0.as_str()).collect::<String>(), "abcd".repeat(10));
    }
    assert!(deltas(&ea, &first.runs[0].run.id).len() > 1, "streamed in pieces");
    // One agent process per question, the second started after the first ended.
    assert_eq!(records(&record).len(), 2, "one agent process per question");
    let at = |pred: &dyn Fn(&ThreadEvent) -> bool| ea.iter().position(pred).unwrap();
    let first_end = at(&|e| matches!(e, ThreadEvent::RunFinished { run, .. } if *run == first.runs[0].run.id));
    let second_start = at(&|e| matches!(e, ThreadEvent::RunStarted { run, .. } if *run == second.runs[0].run.id));
    assert!(first_end < second_start, "never twice at once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_joining_mid_run_gets_the_text_so_far_then_live_deltas() {
    // The first of four pieces (20 characters) streams, then the run holds.
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[(
        "gemini",
        "gemini",
        &[("FAKE_DELTAS", "4"), ("FAKE_HOLD", &hold.env()), ("FAKE_TEXT", &"abcdefghij".repeat(8))],
    )]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut first = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Go.").await;
    collect_until(&mut first, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { chars, .. } if *chars >= 20)))
        .await;
    let late = kdd.client().await;
    let mut sub = late.thread_subscribe(t.clone(), None, None).await.unwrap();
    let mut events = collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    hold.release();
    events.extend(collect_until(&mut sub, |e| ended(e) == 1).await);
    assert!(
        matches!(&events[0], ThreadEvent::Round { round: 1, state: kd_proto::types::RoundState::Running, .. }),
        "first, where the exchange stands: {:?}",
        events[0]
    );
    let events = &events[1..];
    assert!(matches!(&events[0], ThreadEvent::RunWaiting { run } if run.member == "gemini"), "{:?}", events[0]);
    assert!(matches!(&events[1], ThreadEvent::RunStarted { .. }));
    let ThreadEvent::Delta { text, chars, .. } = &events[2] else { panic!("{:?}", events[2]) };
    assert!(*chars == 20 && text.chars().count() as u64 == *chars, "the first delta is all the text so far");
    let streamed: String = events
        .iter()
        .filter_map(|e| if let ThreadEvent::Delta { text, .. } = e { Some(text.as_str()) } else { None })
        .collect();
    assert_eq!(streamed, "abcdefghij".repeat(8), "no gap, no repeat");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_list_shows_pids_and_the_status_counts_runs() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_HANG", "1")]), ("codex", "codex", &[("FAKE_HANG", "1")])]);
    let kdd = Kdd::start_with(FAST_KILL);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Go.").await;
    collect_until(&mut sub, |e| e.iter().filter(|e| matches!(e, ThreadEvent::RunStarted { .. })).count() == 2).await;
    let runs = c.run_list(Some(t.clone())).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.status == RunStatus::Streaming && r.pid.is_some_and(alive)));
    assert_eq!(c.daemon_status().await.unwrap().runs_in_flight, 2);
    let out = kd_tests::run({
        let mut k = kdd.kd();
        k.arg("runs");
        k
    })
    .await;
    for r in &runs {
        assert!(out.stdout.contains(&r.pid.unwrap().to_string()), "{}", out.stdout);
    }
    let out = kd_tests::run({
        let mut k = kdd.kd();
        k.args(["cancel", &t, "--member", "codex"]);
        k
    })
    .await;
    assert!(out.stdout.starts_with("cancelled codex ("), "{}", out.stdout);
    collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_eq!(c.run_list(None).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_members_and_empty_councils_are_refused_with_the_member_list() {
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let e = ClientError::from(
        c.council_send(t.clone(), "Q".into(), Some(vec!["gpt".into()]), None, None, None, None, None, None, None)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
    assert_eq!(e.to_string(), "unknown member gpt; the members are claude, codex");
    ws.write_config(&serde_json::json!({"council": {"auto_rounds": 0}}));
    let e = ClientError::from(
        c.council_send(t.clone(), "Q".into(), None, None, None, None, None, None, None, None).await.unwrap_err(),
    );
    assert!(e.to_string().contains("council.auto_rounds"), "{e}");
    assert_eq!(c.thread_messages(t, None, None, None, None).await.unwrap().len(), 0, "nothing is sent on a bad config");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_three_streaming_runs_leaves_nothing_behind() {
    let text = long_text();
    // Each run streams its first piece and holds there until the kill.
    let hold = kd_tests::Hold::new();
    let slow: &[(&str, &str)] = &[("FAKE_DELTAS", "20"), ("FAKE_HOLD", &hold.env()), ("FAKE_TEXT", &text)];
    let ws = Workspace::new(&[("claude", "claude", slow), ("codex", "gemini", slow), ("cursor", "cursor", slow)]);
    ws.without_resume();
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let done = thread_in(&c, &ws, None).await;
    kd_tests::append(&c, &done, "king", "kept", &[]).await;
    let t = thread_in(&c, &ws, Some(ContextMode::Resume)).await;
    send(&c, &t, "Stream.").await;
    // Wait until every run's partial text has been saved at least once.
    within("partial text saved", async {
        loop {
            let saved =
                kdd.db.try_query("SELECT count(DISTINCT run_id) FROM run_partials", &[]).map_or(0, |r| r[0][0].int());
            if saved == 3 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let pids: Vec<u32> = c.run_list(None).await.unwrap().iter().filter_map(|r| r.pid).collect();
    assert_eq!(pids.len(), 3);
    assert!(c.session_list(None, None, Some(SessionStatus::Active)).await.unwrap().len() == 3);
    drop(c);
    kdd.kill9();
    kdd.launch().unwrap();
    let c = kdd.client().await;
    for pid in &pids {
        assert!(!alive(*pid), "agent {pid} outlived the daemon");
    }
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!(messages.len(), 4);
    for m in &messages[1..] {
        assert_eq!(m.kind, MessageKind::Interrupted);
        assert!(m.body.len() > 1 && text.starts_with(&m.body), "the saved partial text: {:?}", m.body);
    }
    assert_eq!(c.thread_messages(done, None, None, None, None).await.unwrap()[0].body, "kept");
    assert!(c.session_list(None, None, Some(SessionStatus::Active)).await.unwrap().is_empty());
    assert!(c.lock_list(None).await.unwrap().is_empty());
    assert!(c.run_list(None).await.unwrap().is_empty());
    drop(c);
    kdd.stop();
    assert_eq!(kdd.db.integrity(), "ok");
}

/// A kill -9 of kdd after its agent started but before the agent's pid
/// was recorded: what the agent started is killed all the same when kdd
/// starts again (found by its run's marker), before anything is resumed.
/// It lived on, and once wrote into the worktree of the run that resumed
/// it (CI: a rebase concluded with what that leftover wrote).
#[tokio::test(flavor = "multi_thread")]
async fn what_an_agent_started_is_killed_at_the_next_start_when_kdd_died_before_recording_its_pid() {
    let hold = kd_tests::Hold::new();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("left.pid");
    let run = format!("echo $$ > {}; while test -f {}; do sleep 0.02; done", pidfile.display(), hold.var());
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_RUN", run.as_str())])]);
    ws.without_resume();
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    send(&c, &t, "Start something.").await;
    let left: u32 = within("the agent's command started", async {
        loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()) {
                break pid;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    drop(c);
    kdd.kill9();
    assert!(alive(left), "the agent's command outlives kdd (only the agent dies with it)");
    // The registry as kdd left it had it died before the pid's record.
    let cleared = kdd.db.execute("UPDATE runs SET pid = NULL, pid_start = NULL", &[]);
    assert_eq!(cleared, 1, "the run cut");
    kdd.launch().unwrap();
    within("what the agent started is killed", async {
        while alive(left) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    let c = kdd.client().await;
    let messages = c.thread_messages(t, None, None, None, None).await.unwrap();
    assert_eq!(messages.last().map(|m| m.kind), Some(MessageKind::Interrupted), "the run is recorded as cut");
    hold.release();
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_shutdown_records_runs_in_flight_as_interrupted() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_HANG", "1")])]);
    let mut kdd = Kdd::start_with(FAST_KILL);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Go.").await;
    let events = collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let pid = kd_tests::run_pid(&events);
    let ack = c.daemon_shutdown(None).await.unwrap();
    assert_eq!(ack.runs_cancelled, 1);
    let status = kdd.wait_exit();
    assert!(status.success());
    assert!(!alive(pid));
    kdd.launch().unwrap();
    let c = kdd.client().await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(last.kind, MessageKind::Interrupted);
    assert_eq!(last.body, "Answer from claude.");
}

#[tokio::test(flavor = "multi_thread")]
async fn history_mode_runs_record_their_backend_session_and_a_held_session_its_pid() {
    let ws = Workspace::new(&[]);
    let hold = ws.file("hold");
    std::fs::write(&hold, b"").unwrap();
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_SESSION_ID", "claude-s-1"), ("FAKE_HOLD", &hold)])}
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    send(&c, &t, "Q?").await;
    let events = collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let pid = events.iter().find_map(|e| match e {
        ThreadEvent::RunStarted { pid, .. } => Some(*pid),
        _ => None,
    });
    let held = c.session_list(Some(t.clone()), Some("claude".into()), None).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].status, held[0].pid), (SessionStatus::Active, pid), "held by the run's agent");
    std::fs::remove_file(&hold).unwrap();
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let done = c.session_list(Some(t.clone()), Some("claude".into()), None).await.unwrap();
    assert_eq!(
        (done[0].status, done[0].backend_session_id.as_deref(), done[0].pid),
        (SessionStatus::Completed, Some("claude-s-1"), None),
        "what ran, to resume by hand"
    );
    let out = run({
        let mut k = kdd.kd();
        k.args(["sessions", "--thread", &t]);
        k
    })
    .await;
    assert!(out.stdout.contains("claude-s-1") && out.stdout.contains("completed"), "{}", out.stdout);
}
