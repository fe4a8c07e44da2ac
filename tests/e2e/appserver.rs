//! codex through `codex app-server` (the fake plays it as captured): live
//! deltas into `kd ask`, a failing turn, resume of threads started by
//! `codex exec` and by app-server, two threads through one process, and
//! the process killed mid-turn.

use kd_client::prelude::*;
use kd_proto::types::{ContextMode, MessageKind, ThreadEvent};
use kd_tests::{
    Kdd, Workspace, alive, collect_until, ended, records, send_one_round as send, thread_in, until_gone, within,
};
use tokio::io::AsyncReadExt;

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_prints_codex_as_it_streams() {
    let hold = kd_tests::Hold::new();
    let hold_s = hold.env();
    let env = [("FAKE_DELTAS", "2"), ("FAKE_TEXT", "First half. Second half."), ("FAKE_HOLD", hold_s.as_str())];
    let ws = Workspace::new(&[("codex", "codex", &env)]);
    let kdd = Kdd::start();
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).args(["ask", "--rounds", "0", "Go."]).stdout(std::process::Stdio::piped());
    let mut child = k.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // The first piece is printed while codex is still held mid-answer.
    let mut seen = String::new();
    within("the first piece on kd ask's stdout", async {
        let mut buf = [0u8; 1024];
        while !seen.contains("First half.") {
            let n = stdout.read(&mut buf).await.unwrap();
            assert!(n > 0, "kd ask ended early: {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await;
    assert!(!seen.contains("Second half."), "{seen:?}");
    assert!(hold.path.exists());
    hold.release();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).await.unwrap();
    assert!(child.wait().await.unwrap().success());
    assert!(format!("{seen}{rest}").contains("First half. Second half.\n"), "{seen}{rest}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_turn_is_an_error_with_the_apis_reason() {
    let ws = Workspace::new(&[("codex", "codex", &[("FAKE_ERROR", "stub: forced failure")])]);
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "FAIL400 now").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ThreadEvent::RunError { error, .. } if error == "codex: stub: forced failure")),
        "{events:?}"
    );
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Error, "codex: stub: forced failure"));
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_mode_resumes_the_codex_thread_whether_exec_or_app_server_started_it() {
    let ws = Workspace::new(&[]);
    let record = ws.file("codex.jsonl");
    let agent = |transport: &str| {
        let mut a = kd_tests::fake("codex", "codex", &[("FAKE_RECORD", &record)]);
        a["transport"] = transport.into();
        serde_json::json!({"council": {"members": ["codex"]}, "agents": {"codex": a}})
    };
    // The first answer through `codex exec`, the next two through app-server.
    ws.write_config(&agent("exec"));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, Some(ContextMode::Resume)).await;
    send(&c, &t, "One?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    ws.write_config(&agent("app-server"));
    send(&c, &t, "Two?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    send(&c, &t, "Three?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;

    let recs = records(&record);
    assert_eq!(recs.len(), 3, "{recs:?}");
    let exec_session = format!("fake-session-{}", recs[0]["pid"]);
    assert_eq!(recs[0]["argv"][0], "exec");
    for r in &recs[1..] {
        assert_eq!((r["argv"][0].as_str(), r["resumed"].as_bool()), (Some("app-server"), Some(true)), "{r}");
        assert_eq!(r["thread"], exec_session.as_str(), "the thread codex exec started");
    }
    // Each turn is given only what the thread said since the last one.
    let prompt = kd_tests::prompt_of(&recs[2]);
    assert!(prompt.contains("Three?") && !prompt.contains("Two?") && !prompt.contains("One?"), "{prompt}");
    let messages = c.thread_messages(t, None, None, None, None).await.unwrap();
    assert_eq!(messages.iter().filter(|m| m.kind == MessageKind::Agent).count(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_of_a_thread_codex_cannot_find_is_a_clear_error() {
    let ws = Workspace::new(&[("codex", "codex", &[("FAKE_SESSION_ID", "missing-thread")])]);
    ws.set_agent("codex", "transport", "exec".into());
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, Some(ContextMode::Resume)).await;
    send(&c, &t, "One?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    ws.set_agent("codex", "transport", "app-server".into());
    send(&c, &t, "Two?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(
        (last.kind, last.body.as_str()),
        (MessageKind::Error, "codex: cannot resume its codex thread: no rollout found for thread id missing-thread")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_threads_stream_through_one_app_server_at_once() {
    let hold = kd_tests::Hold::new();
    let hold_s = hold.env();
    let env = [("FAKE_DELTAS", "4"), ("FAKE_TEXT", "Answer for {turn}."), ("FAKE_HOLD", hold_s.as_str())];
    let ws = Workspace::new(&[("codex", "codex", &env)]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let (a, b) = (thread_in(&c, &ws, None).await, thread_in(&c, &ws, None).await);
    let mut sub_a = c.thread_subscribe(a.clone(), None, None).await.unwrap();
    let mut sub_b = c.thread_subscribe(b.clone(), None, None).await.unwrap();
    send(&c, &a, "A?").await;
    send(&c, &b, "B?").await;
    // Both stream their first piece, held there at the same time.
    let delta = |e: &[ThreadEvent]| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }));
    let first_a = collect_until(&mut sub_a, delta).await;
    let first_b = collect_until(&mut sub_b, delta).await;
    assert_eq!(kd_tests::run_pid(&first_a), kd_tests::run_pid(&first_b), "one app-server process");
    hold.release();
    let mut texts = Vec::new();
    for (t, first, sub) in [(&a, &first_a, &mut sub_a), (&b, &first_b, &mut sub_b)] {
        let events = collect_until(sub, |e| ended(e) == 1).await;
        let streamed: String = first
            .iter()
            .chain(&events)
            .filter_map(|e| match e {
                ThreadEvent::Delta { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let answer = kd_tests::last_message(&c, t).await;
        assert_eq!(answer.kind, MessageKind::Agent);
        assert_eq!(streamed, answer.body, "each thread gets its own deltas, in order");
        texts.push(answer.body);
    }
    assert_ne!(texts[0], texts[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_app_server_killed_mid_turn_is_an_error_and_the_next_question_starts_another() {
    let hold = kd_tests::Hold::new();
    let hold_s = hold.env();
    let env = [("FAKE_DELTAS", "2"), ("FAKE_TEXT", "Partial then rest."), ("FAKE_HOLD", hold_s.as_str())];
    let ws = Workspace::new(&[("codex", "codex", &env)]);
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Go.").await;
    let started = collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let pid = kd_tests::run_pid(&started);
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), rustix::process::Signal::KILL)
        .unwrap();
    until_gone(pid, "the app-server").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunError { .. })), "{events:?}");
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(last.kind, MessageKind::Error);
    assert!(
        last.body.starts_with("codex: the codex app-server was killed") && last.body.ends_with("\n---\nPartial t"),
        "the reason, then the partial text: {:?}",
        last.body
    );
    // The next question starts a new process and is answered.
    hold.release();
    send(&c, &t, "Again.").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let next = kd_tests::run_pid(&events);
    assert_ne!(next, pid);
    assert!(alive(next));
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Agent, "Partial then rest."));
}

/// kdd with a codex member whose app-server starts a long-lived child
/// (`how`, see `FAKE_CHILD`) and has answered once: the daemon, the
/// app-server's pid and the child's.
async fn app_server_with_a_child(how: &str) -> (Kdd, u32, u32, Workspace) {
    let ws = Workspace::new(&[]);
    let record = ws.file("r.jsonl");
    let env = [("FAKE_CHILD", how), ("FAKE_RECORD", record.as_str())];
    ws.write_config(&serde_json::json!({
        "council": {"members": ["codex"]},
        "agents": {"codex": kd_tests::fake("codex", "codex", &env)}
    }));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Go.").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let pid = kd_tests::run_pid(&events);
    let child = records(&record).iter().find_map(|r| r["child"].as_u64()).unwrap() as u32;
    assert!(alive(pid), "it waits for the next run");
    assert!(alive(child));
    (kdd, pid, child, ws)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_app_server_and_what_it_started_stop_with_the_daemon() {
    for how in ["group", "own-session"] {
        let (mut kdd, pid, child, _ws) = app_server_with_a_child(how).await;
        assert!(kdd.stop().success());
        until_gone(pid, "the app-server after kdd stopped").await;
        until_gone(child, &format!("the app-server's child ({how}) after kdd stopped")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_app_server_started_dies_when_a_killed_daemon_restarts() {
    for how in ["group", "own-session"] {
        let (mut kdd, pid, child, _ws) = app_server_with_a_child(how).await;
        kdd.kill9();
        until_gone(pid, "the app-server after kill -9").await;
        assert!(alive(child), "{how}: nothing but recovery kills it");
        kdd.launch().unwrap();
        until_gone(child, &format!("the app-server's child ({how}) after kdd restarted")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_codex_did_not_end_is_never_steered_by_the_next_question() {
    let ws = Workspace::new(&[]);
    let record = ws.file("codex.jsonl");
    let env = [("FAKE_HANG", "1"), ("FAKE_IGNORE_TERM", "1"), ("FAKE_RECORD", record.as_str())];
    ws.write_config(&serde_json::json!({
        "council": {"members": ["codex"]},
        "agents": {"codex": kd_tests::fake("codex", "codex", &env)}
    }));
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, Some(ContextMode::Resume)).await;
    send(&c, &t, "Hang.").await;
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    c.run_cancel(t.clone(), None, None).await.unwrap();
    collect_until(&mut sub, |e| ended(e) == 1).await;
    // codex is still in that turn: the next question is refused, not steered into it.
    send(&c, &t, "Next.").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert!(
        events.iter().any(|e| matches!(e, ThreadEvent::RunError { error, .. }
            if error == "codex: the turn did not start: the codex app-server has not ended this conversation's previous turn yet")),
        "{events:?}"
    );
    let recs = records(&record);
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["steered"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn members_read_only_unless_configured() {
    let ws = Workspace::new(&[]);
    let (a, b) = (ws.file("a.jsonl"), ws.file("b.jsonl"));
    let mut writer = kd_tests::fake("codex", "writer", &[("FAKE_RECORD", &b)]);
    writer["sandbox"] = "workspace-write".into();
    writer["approval"] = "on-request".into();
    ws.write_config(&serde_json::json!({
        "council": {"members": ["reader", "writer"]},
        "agents": {"reader": kd_tests::fake("codex", "reader", &[("FAKE_RECORD", &a)]), "writer": writer}
    }));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Go.").await;
    collect_until(&mut sub, |e| ended(e) == 2).await;
    let policy = |path: &str| {
        let r = &records(path)[0];
        (r["sandbox"].as_str().unwrap_or_default().to_string(), r["approval"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(policy(&a), ("read-only".to_string(), "never".to_string()));
    assert_eq!(policy(&b), ("workspace-write".to_string(), "on-request".to_string()));
}

fn activities(events: &[ThreadEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| if let ThreadEvent::Activity { what, .. } = e { Some(what.as_str()) } else { None })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_and_reasoning_are_shown_as_activity_not_answer_text() {
    let ws = Workspace::new(&[("codex", "codex", &[("FAKE_RUN", "echo hi"), ("FAKE_TEXT", "It said {run}.")])]);
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Run it.").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_eq!(activities(&events), ["thinking", "running /bin/bash -lc 'echo hi'"], "{events:?}");
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Agent, "It said hi."));
}

/// `kd config check` on `ws`, which must pass: its stdout.
async fn config_check(kdd: &Kdd, ws: &Workspace) -> String {
    let mut check = kdd.kd();
    check.current_dir(ws.dir.path()).args(["config", "check"]);
    let out = kd_tests::run(check).await;
    assert!(out.status.success(), "a note or a warning, not an error: {}", out.stderr);
    out.stdout
}

/// A codex member with `extra`'s keys, as the workspace's only member.
fn codex_with(ws: &Workspace, extra: serde_json::Value, env: &[(&str, &str)]) {
    let mut codex = kd_tests::fake("codex", "codex", env);
    codex.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    ws.write_config(&serde_json::json!({"council": {"members": ["codex"]}, "agents": {"codex": codex}}));
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_execs_flag_of_no_use_is_left_out_and_the_member_streams() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    codex_with(&ws, serde_json::json!({"extra_flags": ["--skip-git-repo-check"]}), &[("FAKE_RECORD", &record)]);
    let kdd = Kdd::start();
    let said = config_check(&kdd, &ws).await;
    assert!(
        said.lines().any(|l| l
            == "note: agents.codex.extra_flags: --skip-git-repo-check is a flag of codex exec, \
                                   which kd's codex app-server has no use for and refuses (ignored)"),
        "{said}"
    );
    assert!(!said.contains("warning"), "{said}");
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Q?").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Agent, "Answer from codex."));
    let deltas = events.iter().filter(|e| matches!(e, ThreadEvent::Delta { .. })).count();
    assert!(deltas > 1, "streamed through the app-server: {events:?}");
    let started = records(&record).remove(0);
    let argv: Vec<&str> = started["argv"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert_eq!(argv.first(), Some(&"app-server"), "{argv:?}");
    assert!(!argv.contains(&"--skip-git-repo-check"), "{argv:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_execs_flag_that_means_something_runs_the_member_through_codex_exec() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    codex_with(&ws, serde_json::json!({"extra_flags": ["--full-auto"]}), &[("FAKE_RECORD", &record)]);
    let kdd = Kdd::start();
    let said = config_check(&kdd, &ws).await;
    assert!(
        said.lines()
            .any(|l| l.starts_with("note: agents.codex.extra_flags: codex app-server does not take --full-auto")
                && l.contains("this member runs codex exec")),
        "{said}"
    );
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Q?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.kind, last.body.as_str()), (MessageKind::Agent, "Answer from codex."));
    let started = records(&record).remove(0);
    let argv: Vec<&str> = started["argv"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert_eq!(argv.first(), Some(&"exec"), "{argv:?}");
    assert!(argv.contains(&"--full-auto"), "{argv:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exec_only_flag_given_the_app_server_asked_for_is_named_by_kd_config_check_and_by_the_failed_start() {
    let ws = Workspace::new(&[]);
    codex_with(&ws, serde_json::json!({"transport": "app-server", "args": ["--full-auto"]}), &[]);
    let kdd = Kdd::start();
    let said = config_check(&kdd, &ws).await;
    assert!(
        said.lines().any(|l| l.starts_with("warning: agents.codex.args: codex app-server does not take --full-auto")),
        "{said}"
    );

    // Started anyway, codex refuses it: the message says why, not only
    // clap's last line ("For more information, try '--help'.").
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Q?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(last.kind, MessageKind::Error);
    let head = format!(
        "codex: cannot start {} app-server: initialize failed: the codex app-server exited (status 2): error: \
         unexpected argument '--full-auto' found\n",
        kd_tests::bin("fake-agent").display()
    );
    assert!(last.body.starts_with(&head), "the error line first: {:?}", last.body);
    assert!(last.body.contains("Usage: codex app-server") && last.body.ends_with("try '--help'."), "{:?}", last.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_app_server_is_stopped_and_the_next_run_starts_another() {
    // One started from a configuration since changed would otherwise run
    // until kdd stops.
    let ws = Workspace::new(&[("codex", "codex", &[])]);
    let kdd = Kdd::start_with(&["--agent-idle-ms", "100"]);
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "One?").await;
    let first = collect_until(&mut sub, |e| ended(e) == 1).await;
    let pid = kd_tests::run_pid(&first);
    until_gone(pid, "the idle app-server").await;
    ws.set_agent("codex", "env", serde_json::json!({"FAKE_NAME": "codex", "FAKE_TEXT": "Changed."}));
    send(&c, &t, "Two?").await;
    let second = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_ne!(kd_tests::run_pid(&second), pid, "another app-server");
    assert_eq!(kd_tests::last_message(&c, &t).await.body, "Changed.");
}
