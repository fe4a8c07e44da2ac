//! An agent's whole process tree dies with its run (issue 9 item 5): what
//! a real CLI starts (node subprocesses, tool commands) must not outlive
//! the run, whether it ends, is cancelled, or its daemon is killed -9.

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use kd_tests::{Kdd, Workspace, alive, collect_until, ended, until_gone};

/// The pid of the child the fake agent named in its first delta (`child N`).
fn child_of(events: &[ThreadEvent]) -> Option<u32> {
    events.iter().find_map(|e| match e {
        ThreadEvent::Delta { text, .. } => text.split_whitespace().nth(1)?.parse().ok(),
        _ => None,
    })
}

/// Starts one run of a member that starts a long-lived child `how`, and
/// returns the child's pid once the agent has said it.
async fn run_with_child(kdd: &Kdd, how: &str, more: &[(&str, &str)]) -> Started {
    let mut env = vec![("FAKE_CHILD", how), ("FAKE_TEXT", "child {child} started"), ("FAKE_DELTAS", "1")];
    env.extend_from_slice(more);
    let ws = Workspace::new(&[("claude", "claude", &env)]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Start something.".into(), None, None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    let events = collect_until(&mut sub, |e| child_of(e).is_some()).await;
    let child = child_of(&events).unwrap();
    assert_ne!(child, 0, "the fake started its child");
    Started { c, t, sub, child, events, _ws: ws }
}

struct Started {
    c: kd_client::Client,
    t: String,
    sub: jsonrpsee::core::client::Subscription<ThreadEvent>,
    child: u32,
    events: Vec<ThreadEvent>,
    _ws: Workspace,
}

impl Started {
    fn leader(&self) -> u32 {
        kd_tests::run_pid(&self.events)
    }

    async fn until_ended(&mut self) {
        let mut seen = std::mem::take(&mut self.events);
        seen.extend(collect_until(&mut self.sub, |e| ended(e) == 1).await);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn what_an_agent_started_dies_when_its_run_ends() {
    let kdd = Kdd::start();
    // own-session: a child in a session of its own, reparented to kdd (the
    // agents' subreaper) when the agent exits — found among kdd's
    // descendants, where a run's end looks (issue 31).
    for how in ["group", "own-group", "own-session"] {
        let mut run = run_with_child(&kdd, how, &[]).await;
        run.until_ended().await;
        until_gone(run.child, &format!("the agent's child ({how}) to die with the run")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn what_an_agent_started_dies_when_its_run_is_cancelled() {
    let kdd = Kdd::start_with(&["--kill-grace-ms", "200"]);
    let mut run = run_with_child(&kdd, "own-group", &[("FAKE_HANG", "1")]).await;
    run.c.run_cancel(run.t.clone(), Some("claude".into()), None).await.unwrap();
    run.until_ended().await;
    until_gone(run.child, "the cancelled agent's child to die").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_kill_9_the_next_daemon_kills_what_the_agents_left() {
    let mut kdd = Kdd::start();
    let mut runs = Vec::new();
    for how in ["group", "own-group"] {
        runs.push((how, run_with_child(&kdd, how, &[("FAKE_HANG", "1")]).await));
    }
    kdd.kill9();
    for (how, run) in &runs {
        // The leader dies with the daemon (PDEATHSIG); what it started does not.
        until_gone(run.leader(), "the agent to die with its daemon").await;
        assert!(alive(run.child), "{how}: the child outlived the crash, as it would");
    }
    kdd.launch().unwrap();
    for (how, run) in &runs {
        until_gone(run.child, &format!("recovery to kill the child ({how})")).await;
    }
}

/// The harness leaves nothing behind: a test's `Kdd` dropped after its
/// daemon was killed also kills what the agents started that outlived it.
#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_test_daemon_leaves_nothing_its_agents_started() {
    let mut kdd = Kdd::start();
    let run = run_with_child(&kdd, "own-group", &[("FAKE_HANG", "1")]).await;
    kdd.kill9();
    until_gone(run.leader(), "the agent to die with its daemon").await;
    assert!(alive(run.child), "the child outlived the crash, as it would");
    drop(kdd);
    until_gone(run.child, "the harness to kill the orphan").await;
}

/// A command an agent started that outlives its daemon (kill -9) and then
/// runs `kd` (as an agent's shell does `kd send`) starts no daemon: kd
/// run by an agent never auto-starts kdd (its env says
/// `KD_NO_AUTOSTART=1`), or such an orphan would start one of its own on
/// the socket — on the default registry, not the daemon's — that nobody
/// stops (found: a kdd left by the e2e suite, parent 1, its socket in a
/// deleted /tmp/kd-e2e-* dir, logging to ~/.local/share/kd/kdd.log).
#[tokio::test(flavor = "multi_thread")]
async fn an_agents_command_outliving_a_killed_kdd_starts_no_daemon() {
    let mut kdd = Kdd::start();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let out = dir.path().join("out");
    let kd = kd_tests::bin("kd");
    let later = format!(
        "(while [ ! -e {go} ]; do sleep 0.02; done; {kd} threads >/dev/null 2>&1; echo $? > {out}.tmp; mv {out}.tmp {out}) \
         </dev/null >/dev/null 2>&1 &",
        go = go.display(),
        kd = kd.display(),
        out = out.display()
    );
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_RUN", later.as_str()), ("FAKE_HANG", "1")])]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Go.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    // The command ran (it is in the background) once the answer streams.
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    drop((sub, c));
    kdd.kill9();
    std::fs::write(&go, "").unwrap();
    let code = kd_tests::within("the orphan's kd to end", async {
        loop {
            if let Ok(code) = std::fs::read_to_string(&out) {
                return code;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let started = kd_tests::daemons_on(&kdd.socket);
    assert_eq!(code.trim(), "3", "kd could not reach kdd and said so (exit 3); daemons on the socket: {started:?}");
    assert!(started.is_empty(), "no daemon was started on the socket: {started:?}");
}
