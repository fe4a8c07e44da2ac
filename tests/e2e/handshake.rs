//! A long-lived agent (a codex app-server, an ACP agent) that never answers
//! a request — the `initialize` handshake, or one of a run's own — holds up
//! neither its run past the member's timeout, nor `run.cancel`, nor the
//! daemon's stop; a process abandoned mid-handshake is killed.

use kd_client::prelude::*;
use kd_proto::types::{MessageKind, ThreadEvent};
use kd_tests::{Kdd, Workspace, alive, collect_until, ended, records, send_one_round as send, until_gone, within};

/// A workspace whose one member `hung` is the fake `backend` (`acp` or
/// `codex`, through app-server) with `env`, and `timeout` seconds.
fn hung(backend: &str, env: &[(&str, &str)], timeout: Option<u64>) -> Workspace {
    let ws = Workspace::new(&[]);
    let mut agent = kd_tests::fake(backend, "hung", env);
    if backend == "acp" {
        agent["args"] = serde_json::json!(["acp"]);
    }
    if let Some(t) = timeout {
        agent["timeout"] = t.into();
    }
    ws.write_config(&serde_json::json!({"council": {"members": ["hung"]}, "agents": {"hung": agent}}));
    ws
}

/// Waits until the fake got the request it will never answer; its pid.
async fn silent(record: &str, method: &str) -> u32 {
    within(&format!("the agent to get {method}"), async {
        loop {
            let got = records(record).iter().find(|r| r["silent"] == method).and_then(|r| r["pid"].as_u64());
            if let Some(pid) = got {
                return pid as u32;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_never_answered_times_the_run_out_at_the_members_timeout() {
    for (backend, method) in
        [("acp", "initialize"), ("acp", "session/new"), ("codex", "initialize"), ("codex", "thread/start")]
    {
        let ws = hung(backend, &[("FAKE_SILENT", method)], Some(1));
        let kdd = Kdd::start();
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Q?").await;
        let events = collect_until(&mut sub, |e| ended(e) == 1).await;
        assert!(
            events.iter().any(|e| matches!(e, ThreadEvent::RunError { timed_out: true, .. })),
            "{backend} {method}: {events:?}"
        );
        let last = kd_tests::last_message(&c, &t).await;
        assert_eq!(last.kind, MessageKind::Error, "{backend} {method}");
        assert!(last.body.starts_with("hung: timed out after 1 s waiting for "), "{backend} {method}: {}", last.body);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_cancel_during_a_handshake_never_answered_is_prompt_and_kills_the_agent() {
    for backend in ["acp", "codex"] {
        let scratch = tempfile::tempdir().unwrap();
        let record = scratch.path().join("r.jsonl").display().to_string();
        // The run would wait ten minutes: only the cancel can end it in time.
        let ws = hung(backend, &[("FAKE_SILENT", "initialize"), ("FAKE_RECORD", &record)], Some(600));
        let kdd = Kdd::start();
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Q?").await;
        let pid = silent(&record, "initialize").await;
        c.run_cancel(t.clone(), Some("hung".into()), None).await.unwrap();
        let events = collect_until(&mut sub, |e| ended(e) == 1).await;
        assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { .. })), "{backend}: {events:?}");
        until_gone(pid, "the agent whose start was abandoned").await;
        // The next question starts another agent, which is not the hung one.
        assert!(!alive(pid));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_stops_while_a_handshake_is_never_answered() {
    for backend in ["acp", "codex"] {
        let scratch = tempfile::tempdir().unwrap();
        let record = scratch.path().join("r.jsonl").display().to_string();
        let env = [("FAKE_SILENT", "initialize"), ("FAKE_RECORD", record.as_str()), ("FAKE_IGNORE_EOF", "1")];
        let ws = hung(backend, &env, Some(600));
        let mut kdd = Kdd::start();
        let kd_tests::Watched { c, t, sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Q?").await;
        let pid = silent(&record, "initialize").await;
        drop(sub);
        drop(c);
        // The harness kills a daemon that has not exited by its deadline.
        let started = std::time::Instant::now();
        assert!(kdd.stop().success(), "{backend}: kdd exited on SIGTERM by itself");
        eprintln!("{backend}: kdd stopped in {:?}", started.elapsed());
        until_gone(pid, "the agent after kdd stopped").await;
    }
}
