//! Several kdd nodes on one PostgreSQL registry (issue 25): two daemons on
//! one machine, each with its own socket and `--node`, on one database.
//! What one writes the other lists and streams live; the registry's
//! invariants hold across them. PostgreSQL only (SQLite is one node).

use std::collections::BTreeSet;

use kd_client::prelude::*;
use kd_proto::types::{Message, MessageKind, ThreadEvent};
use kd_tests::{Hold, Kdd, Workspace, collect_until, run, settled, thread_in, within};

/// Two nodes, `a` and `b`, on one fresh registry; `None` on SQLite.
fn two_nodes() -> Option<(Kdd, Kdd)> {
    if kd_tests::engine() != kd_tests::Engine::Postgres {
        kd_tests::registry::not_on_this_engine("cluster", "several nodes share a PostgreSQL registry");
        return None;
    }
    let a = Kdd::start_with(&["--node", "a"]);
    let b = Kdd::start_node_beside(&a, &["--node", "b"]);
    Some((a, b))
}

/// Node `name` alone on a fresh registry; `None` on SQLite.
fn first_node(name: &str, args: &[&str]) -> Option<Kdd> {
    if kd_tests::engine() != kd_tests::Engine::Postgres {
        kd_tests::registry::not_on_this_engine("cluster", "several nodes share a PostgreSQL registry");
        return None;
    }
    Some(Kdd::start_with(&[&["--node", name], args].concat()))
}

/// Every message of `thread`.
async fn messages(c: &kd_client::Client, thread: &str) -> Vec<Message> {
    c.thread_messages(thread.into(), None, None, None, None).await.expect("thread.messages").into_vec()
}

/// A one-member council (claude, held on `hold`) in a new workspace, a
/// thread of it made on `kdd`, a question asked there and claude's run
/// streaming (held): the workspace, the thread and the run.
async fn held_question(kdd: &Kdd, hold: &Hold) -> (Workspace, String, String) {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_HOLD", hold.var()), ("FAKE_TEXT", "Answered once.")])]);
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    kd_tests::send_one_round(&c, &t, "Hold on.").await;
    let mut run = None;
    collect_until(&mut sub, |events| {
        run = events.iter().find_map(|e| match e {
            ThreadEvent::Delta { run, .. } => Some(run.clone()),
            _ => None,
        });
        run.is_some()
    })
    .await;
    (ws, t, run.expect("claude's run streams"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_starting_beside_a_busy_one_leaves_its_runs_and_exchanges_alone() {
    let Some(a) = first_node("a", &[]) else { return };
    let hold = Hold::new();
    let (_ws, t, run) = held_question(&a, &hold).await;
    // b starts (its recovery and resume pass are over once it is ready) and
    // serves a while: a's run is a's, in flight, not left by a dead daemon.
    let b = Kdd::start_node_beside(&a, &["--node", "b"]);
    kd_tests::new_thread(&b.client().await, &kd_tests::workspace("elsewhere")).await;
    let status = a.db.one("SELECT status FROM runs WHERE id = $1", &[run.as_str().into()]);
    assert_eq!(status.text(), "streaming", "node b left node a's run alone");
    hold.release();
    assert_eq!(settled(&a.db, &t).await, vec![("done".to_string(), None)]);
    let answers = said(&a.client().await, &t).await;
    assert_eq!(answers, [("claude".to_string(), MessageKind::Agent)], "one answer, nothing interrupted");
    let by = a.db.query("SELECT node_id FROM runs WHERE thread_id = $1", &[t.as_str().into()]);
    assert_eq!(by.iter().map(|r| r[0].text().to_string()).collect::<Vec<_>>(), ["a"], "one run, on a");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_made_on_node_a_is_listed_on_b_and_its_round_streams_live_there() {
    let Some((a, b)) = two_nodes() else { return };
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Streamed from node a, in pieces.")])]);
    let (ca, cb) = (a.client().await, b.client().await);
    let t = kd_tests::new_thread(&ca, &ws.path()).await;
    let listed = cb.thread_list(None, None, None).await.unwrap();
    assert!(listed.iter().any(|x| x.id == t), "node b lists node a's thread: {listed:?}");
    let mut on_b = cb.thread_subscribe(t.clone(), None, None).await.unwrap();
    kd_tests::send_one_round(&ca, &t, "Who answers?").await;
    let seen = collect_until(&mut on_b, |events| {
        events.iter().any(|e| matches!(e, ThreadEvent::Message { message } if message.from == "claude"))
    })
    .await;
    let deltas: String = seen
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Delta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "Streamed from node a, in pieces.", "every delta, in order: {seen:#?}");
    let king = seen.iter().position(|e| matches!(e, ThreadEvent::Message { message } if message.from == "king"));
    let first_delta = seen.iter().position(|e| matches!(e, ThreadEvent::Delta { .. }));
    assert!(king < first_delta, "the question before the answer's deltas: {seen:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn appends_from_both_nodes_at_once_leave_the_threads_seq_dense() {
    let Some((a, b)) = two_nodes() else { return };
    let t = kd_tests::new_thread(&a.client().await, &kd_tests::workspace("dense")).await;
    let per_writer = 40;
    let mut writers = Vec::new();
    for (i, kdd) in [&a, &b, &a, &b].into_iter().enumerate() {
        let c = kdd.client().await;
        let t = t.clone();
        writers.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for n in 0..per_writer {
                seqs.push(kd_tests::append(&c, &t, "king", format!("writer {i} message {n}"), &[]).await.seq);
            }
            seqs
        }));
    }
    let mut all = BTreeSet::new();
    for w in writers {
        for seq in w.await.unwrap() {
            assert!(all.insert(seq), "seq {seq} given twice");
        }
    }
    let total = 4 * per_writer;
    assert_eq!(all, (1..=total).collect(), "dense: 1..={total}");
    // Both nodes read the same thread.
    for kdd in [&a, &b] {
        let page = kdd.client().await.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
        assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=total).collect::<Vec<_>>());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_held_on_node_a_is_refused_on_b_naming_the_holder_and_the_node() {
    let Some((a, b)) = two_nodes() else { return };
    let (ca, cb) = (a.client().await, b.client().await);
    let t = kd_tests::new_thread(&ca, &kd_tests::workspace("resume")).await;
    let s = ca.session_start(t, "claude".into(), None, Some("claude".into()), Some(a.pid), None).await.unwrap();
    let refused = cb.session_resume(s.id.clone(), Some("codex".into()), Some(b.pid)).await.unwrap_err().to_string();
    assert!(refused.contains(&format!("{} is held by claude on node a", s.id)), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_daemon_status_and_kd_doctor_name_the_engine_this_node_and_the_other() {
    let Some((a, b)) = two_nodes() else { return };
    let mut k = b.kd();
    k.args(["daemon", "status"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("(postgres, schema "), "{}", out.stdout);
    assert!(out.stdout.contains("  node      b\n"), "{}", out.stdout);
    assert!(out.stdout.contains("  others    a ("), "{}", out.stdout);
    assert!(out.stdout.contains(&format!("pid {}", a.pid)), "{}", out.stdout);
    // kd doctor checks the nodes and their clocks.
    let mut k = b.kd();
    k.arg("doctor");
    let out = run(k).await;
    assert!(out.stdout.contains("2 live (a, b), this one b; clocks within 1000 ms"), "{}", out.stdout);
    // A third kdd may not take a live node's name.
    let taken = tokio::task::spawn_blocking({
        let db = a.db.shared();
        move || Kdd::try_start_on(db, &["--node", "a"])
    });
    let why = within("a refused start", taken).await.unwrap().err().expect("node a's name is taken");
    assert!(why.contains("node a is already live"), "{why}");
}

/// Leases and polls short enough for a test (the defaults: 15 s, 2 s).
const FAST: [&str; 4] = ["--cluster-lease-ms", "1500", "--cluster-poll-ms", "100"];

/// Nodes `a` and `b` with [`FAST`] leases on one fresh registry; `None` on
/// SQLite.
fn fast_nodes() -> Option<(Kdd, Kdd)> {
    let a = first_node("a", &FAST)?;
    let b = Kdd::start_node_beside(&a, &[&["--node", "b"], &FAST[..]].concat());
    Some((a, b))
}

/// Who said what on `thread`, the King aside.
async fn said(c: &kd_client::Client, thread: &str) -> Vec<(String, MessageKind)> {
    messages(c, thread).await.into_iter().filter(|m| m.from != "king").map(|m| (m.from, m.kind)).collect()
}

/// claude's answer cut, then given again.
fn cut_then_answered() -> Vec<(String, MessageKind)> {
    vec![("claude".into(), MessageKind::Interrupted), ("claude".into(), MessageKind::Agent)]
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_node_a_mid_round_b_records_its_run_interrupted_after_the_lease_and_resumes_it() {
    let Some((mut a, b)) = fast_nodes() else { return };
    let hold = Hold::new();
    let (_ws, t, cut) = held_question(&a, &hold).await;
    kd_tests::saved(&a.db, &cut).await;
    a.kill9();
    // What a's agent does now goes nowhere: b asks again, unheld.
    hold.release();
    assert_eq!(settled(&b.db, &t).await, vec![("done".to_string(), None)]);
    let cb = b.client().await;
    assert_eq!(said(&cb, &t).await, cut_then_answered());
    let all = messages(&cb, &t).await;
    assert_eq!(all[2].replaces, Some(all[1].seq), "the new answer replaces the cut one");
    let runs = b.db.query(
        "SELECT node_id, status, error FROM runs WHERE thread_id = $1 ORDER BY started_at",
        &[t.as_str().into()],
    );
    let runs: Vec<(String, String, Option<String>)> =
        runs.iter().map(|r| (r[0].text().to_string(), r[1].text().to_string(), r[2].opt_text())).collect();
    assert_eq!((runs[0].0.as_str(), runs[0].1.as_str()), ("a", "interrupted"), "{runs:?}");
    let why = runs[0].2.clone().unwrap_or_default();
    assert!(why.starts_with("node a was lost while the run was in flight"), "{why}");
    assert_eq!((runs[1].0.as_str(), runs[1].1.as_str()), ("b", "done"), "asked again on b: {runs:?}");
    assert_eq!(runs.len(), 2, "{runs:?}");
    let state = b.db.one("SELECT state FROM nodes WHERE id = 'a'", &[]);
    assert_eq!(state.text(), "dead");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_sent_on_b_to_a_thread_of_as_workspace_is_answered_by_as_members() {
    let Some((a, b)) = fast_nodes() else { return };
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Answered where the code is.")])]);
    let (ca, cb) = (a.client().await, b.client().await);
    let t = thread_in(&ca, &ws, None).await;
    // The thread learns its members from a first question, asked on a.
    kd_tests::send_one_round(&ca, &t, "First.").await;
    settled(&a.db, &t).await;
    let mut on_b = cb.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = kd_tests::send_one_round(&cb, &t, "Second, from b.").await;
    assert_eq!(sent.notice.as_deref(), Some("node a has this thread's workspace: its members answer there"));
    let seen = collect_until(&mut on_b, |events| {
        events.iter().any(|e| matches!(e, ThreadEvent::Message { message } if message.from == "claude"))
    })
    .await;
    assert!(seen.iter().any(|e| matches!(e, ThreadEvent::Delta { .. })), "b's client sees a's run live: {seen:#?}");
    let x = settled(&b.db, &t).await;
    assert!(x.iter().all(|(state, _)| state == "done"), "{x:?}");
    let runs = b.db.query(
        "SELECT node_id, status, reply_to FROM runs WHERE thread_id = $1 ORDER BY started_at",
        &[t.as_str().into()],
    );
    let runs: Vec<(String, String, i64)> =
        runs.iter().map(|r| (r[0].text().to_string(), r[1].text().to_string(), r[2].int())).collect();
    let second = sent.message.seq as i64;
    assert_eq!(runs.last(), Some(&("a".to_string(), "done".to_string(), second)), "run on a: {runs:?}");
    let all = messages(&cb, &t).await;
    let answer = all.iter().find(|m| m.reply_to == Some(sent.message.seq)).expect("an answer to b's question");
    assert_eq!((answer.from.as_str(), answer.body.as_str()), ("claude", "Answered where the code is."));
    // What starts runs without a King's question is done on a, not routed:
    // refused on b, naming a.
    let refused = cb.council_retry(t.clone(), None, None, None).await.unwrap_err().to_string();
    assert!(refused.contains(&format!("thread {t}'s workspace is node a's: its members run there")), "{refused}");
    let refused = cb.thread_summarize(t.clone(), None).await.unwrap_err().to_string();
    assert!(refused.contains("its members run there"), "{refused}");
    let refused = cb.thread_delete(t.clone(), Some(true)).await.unwrap_err().to_string();
    assert!(refused.contains("its members run there"), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_stalled_past_its_lease_is_taken_over_writes_nothing_after_and_stops() {
    let Some((mut a, b)) = fast_nodes() else { return };
    let hold = Hold::new();
    let (_ws, t, cut) = held_question(&a, &hold).await;
    kd_tests::saved(&a.db, &cut).await;
    // A suspended laptop: a stops answering, its agent goes on.
    a.pause();
    within("b to record a's run interrupted", async {
        while b.db.one("SELECT status FROM runs WHERE id = $1", &[cut.as_str().into()]).text() != "interrupted" {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    // a's agent finishes its answer while a cannot read it; b asks again.
    hold.release();
    assert_eq!(settled(&b.db, &t).await, vec![("done".to_string(), None)], "b took the question over");
    // a wakes.
    a.resume();
    // (a's registry is the test's: a is kept until the end.)
    let (mut a, status) = tokio::task::spawn_blocking(move || {
        let status = a.wait_exit();
        (a, status)
    })
    .await
    .unwrap();
    // It stops with the status that says so, which a service manager restarts
    // (Restart=on-failure): a status of 0 would leave the node down.
    assert_eq!(status.code(), Some(75), "a stops, having been declared dead: {status}");
    assert_eq!(said(&b.client().await, &t).await, cut_then_answered(), "a wrote nothing");
    let on_b = b.db.one("SELECT node_id FROM runs WHERE status = 'done' AND thread_id = $1", &[t.as_str().into()]);
    assert_eq!(on_b.text(), "b");
    // Started again, as its service manager does, it is a live node again.
    a.launch().unwrap();
    let live = a.db.one("SELECT state FROM nodes WHERE id = 'a'", &[]);
    assert_eq!(live.text(), "live");
    a.client().await.daemon_status().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_does_not_start_a_daemon_of_its_own_where_a_node_of_a_shared_registry_stopped() {
    let Some(mut a) = first_node("a", &[]) else { return };
    // kd daemon restart would start a daemon of kd's choosing in its place:
    // it leaves the node running and says so.
    let mut k = a.kd();
    k.env_remove("KD_DB").args(["daemon", "restart"]);
    let out = run(k).await;
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(out.stderr.contains("is node a of a shared registry"), "{}", out.stderr);
    assert!(a.is_running() && std::os::unix::net::UnixStream::connect(&a.socket).is_ok(), "a serves on");
    assert!(a.stop().success());
    let mut k = a.kd();
    k.env_remove("KD_NO_AUTOSTART").env_remove("KD_DB").env("XDG_DATA_HOME", a.dir.path());
    k.args(["daemon", "start"]);
    let out = run(k).await;
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(out.stderr.contains("was served by node a of postgres://"), "{}", out.stderr);
    // kd may start kdd by itself (no KD_NO_AUTOSTART), and would start
    // one on a registry of its own: it says what stopped instead.
    let mut k = a.kd();
    k.env_remove("KD_NO_AUTOSTART").env_remove("KD_DB").env("XDG_DATA_HOME", a.dir.path()).arg("threads");
    let out = run(k).await;
    assert_eq!(out.status.code(), Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("which served node a of postgres://"), "{}", out.stderr);
    assert!(out.stderr.contains("kd starts no node by itself"), "{}", out.stderr);
    assert!(std::os::unix::net::UnixStream::connect(&a.socket).is_err(), "no kdd was started on its socket");
    // Started again, the node serves as before.
    a.launch().unwrap();
    let mut k = a.kd();
    k.arg("threads");
    assert!(run(k).await.status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_on_b_prints_the_answer_given_after_a_stops_gracefully_mid_answer_and_exits_0() {
    let Some((mut a, b)) = fast_nodes() else { return };
    let hold = Hold::new();
    let claude: &[(&str, &str)] =
        &[("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", "Second"), ("FAKE_TEXT", "Answered once.")];
    let ws = Workspace::new(&[("claude", "claude", claude)]);
    // The workspace's trunk, made on a.
    let mut k = a.kd();
    k.current_dir(ws.dir.path()).args(["ask", "First?"]);
    assert!(run(k).await.status.success());
    let ca = a.client().await;
    let t = ca.thread_current(ws.path(), None).await.unwrap().expect("the trunk").id;
    let mut on_a = ca.thread_subscribe(t.clone(), None, None).await.unwrap();
    let mut k = b.kd();
    k.current_dir(ws.dir.path()).args(["ask", "Second?"]);
    let asking = tokio::spawn(run(k));
    collect_until(&mut on_a, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    drop((on_a, ca));
    assert!(a.stop().success());
    hold.release();
    let out = asking.await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.matches("Answered once.").count(), 1, "{}", out.stdout);
    assert_eq!(said(&b.client().await, &t).await[1..], cut_then_answered()[..], "asked again on b");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_on_b_stops_the_runs_of_as_thread_on_a() {
    let Some((a, b)) = fast_nodes() else { return };
    let hold = Hold::new();
    let (_ws, t, first) = held_question(&a, &hold).await;
    let cb = b.client().await;
    // kd cancel on b: the run on a is stopped there.
    let stopped = cb.council_interrupt(t.clone(), Some(true)).await.unwrap();
    assert_eq!(stopped.runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [first.as_str()]);
    assert!(stopped.stopped_exchange);
    let ended = |db: &kd_tests::TestDb, run: &str| {
        db.one("SELECT status FROM runs WHERE id = $1", &[run.into()]).text().to_string()
    };
    within("a to stop its run", async {
        while ended(&b.db, &first) != "cancelled" {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    // Ctrl+C of a kd ask on b: one run, by its id.
    let ca = a.client().await;
    let mut on_a = ca.thread_subscribe(t.clone(), None, None).await.unwrap();
    kd_tests::send_one_round(&cb, &t, "Again?").await;
    let mut second = None;
    collect_until(&mut on_a, |events| {
        second = events.iter().find_map(|e| match e {
            ThreadEvent::Delta { run, .. } if *run != first => Some(run.clone()),
            _ => None,
        });
        second.is_some()
    })
    .await;
    let second = second.unwrap();
    let stopped = cb.run_cancel(t.clone(), None, Some(second.clone())).await.unwrap();
    assert_eq!(stopped.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [second.as_str()]);
    within("a to stop the second run", async {
        while ended(&b.db, &second) != "cancelled" {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    hold.release();
}

/// Node a killed -9 while one of its runs waits on the King's approval,
/// and never started again: when b reaps a, that approval is `cancelled`
/// (by no one, saying the node was lost) and the King's clients on b are
/// told (`approval_decided`), rather than left pending forever (a node
/// cancels its own only at its next start).
#[tokio::test(flavor = "multi_thread")]
async fn approvals_pending_on_a_node_killed_for_good_are_cancelled_when_it_is_reaped() {
    use kd_proto::approval::{ApprovalEvent, ApprovalState};
    let Some((mut a, b)) = fast_nodes() else { return };
    let ws = Workspace::new(&[]);
    crate::approvals::asking(&ws, "x-lost", serde_json::json!({}));
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&a, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let events =
        collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::ApprovalRequested { .. }))).await;
    let id = events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ApprovalRequested { approval } => Some(approval.id.clone()),
            _ => None,
        })
        .unwrap();
    // The King follows the approvals on b.
    let cb = b.client().await;
    let mut king = cb.approval_subscribe().await.unwrap();
    drop((sub, c));
    a.kill9();
    let decided = within("b to cancel a's approval", async {
        while let Some(e) = king.next().await {
            if let ApprovalEvent::Decided { approval } = e.unwrap()
                && approval.id == id
            {
                return approval;
            }
        }
        panic!("the approvals subscription ended");
    })
    .await;
    assert_eq!((decided.state, decided.decided_by), (ApprovalState::Cancelled, None), "{decided:?}");
    let why = decided.message.clone().unwrap_or_default();
    assert!(why.contains("node a was lost"), "{why}");
    let listed = cb.approval_list(Some(true), Some(t.clone()), None).await.unwrap();
    let kept = listed.iter().find(|x| x.id == id).expect("kept");
    assert_eq!(kept.state, ApprovalState::Cancelled);
    assert_eq!(b.db.one("SELECT state FROM nodes WHERE id = 'a'", &[]).text(), "dead");
}
