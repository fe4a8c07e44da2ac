//! Durable exchanges (F-J1..J3): a council round survives kill -9 of kdd,
//! a graceful restart and `kd cancel` does what it says — every answer
//! exactly once, interrupted partials replaced, crash-looping members
//! given up, backend sessions resumed.

use std::collections::BTreeMap;
use std::path::Path;

use kd_client::KdApiClient;
use kd_proto::types::{ContextMode, Message, MessageKind, ThreadEvent};
use kd_tests::{Hold, Kdd, Workspace, collect_until, records, settled, thread_in, within};

/// Sends `body` to `thread` for a first round and `auto` auto-rounds.
async fn ask(c: &kd_client::Client, thread: &str, body: &str, auto: u32) -> u64 {
    c.council_send(thread.into(), body.into(), None, None, None, None, None, Some(auto), None)
        .await
        .expect("council.send")
        .message
        .seq
}

/// Every message of `thread`.
async fn messages(c: &kd_client::Client, thread: &str) -> Vec<Message> {
    c.thread_messages(thread.into(), None, None, None, None).await.expect("thread.messages").into_vec()
}

/// The members' answers (kind `agent`) by member and round.
fn answers(messages: &[Message]) -> BTreeMap<(String, u32), Vec<&Message>> {
    let mut by: BTreeMap<(String, u32), Vec<&Message>> = BTreeMap::new();
    for m in messages.iter().filter(|m| m.kind == MessageKind::Agent) {
        by.entry((m.from.clone(), m.round.unwrap_or(0))).or_default().push(m);
    }
    by
}

/// Waits until `thread` holds `n` answers.
async fn answered(c: &kd_client::Client, thread: &str, n: usize) {
    within("the answers", async {
        while messages(c, thread).await.iter().filter(|m| m.kind == MessageKind::Agent).count() < n {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Waits until `member`'s run of `round` has streamed its first piece (and
/// holds there); its run id.
async fn streaming(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, member: &str, round: u32) -> String {
    let mut run = None;
    collect_until(sub, |events| {
        if let Some(ThreadEvent::RunWaiting { run: r }) = events.last()
            && r.member == member
            && r.round == Some(round)
        {
            run = Some(r.id.clone());
        }
        matches!((events.last(), &run), (Some(ThreadEvent::Delta { run: d, .. }), Some(r)) if d == r)
    })
    .await;
    run.expect("the run")
}

/// Waits until run `run` has saved some of its text (what a kill keeps).
async fn saved(db: &Path, run: &str) {
    within("partial text saved", async {
        loop {
            let n: i64 = rusqlite::Connection::open(db)
                .and_then(|c| c.query_row("SELECT count(*) FROM run_partials WHERE run_id = ?1", [run], |r| r.get(0)))
                .unwrap_or(0);
            if n > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// `ws`'s council: three members, codex holding on `hold` when its prompt
/// holds `when`, each recording its runs in `record`.
fn council(ws: &Workspace, hold: &Hold, when: &str, record: &str) {
    let held: &[(&str, &str)] = &[("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", when), ("FAKE_RECORD", record)];
    let free: &[(&str, &str)] = &[("FAKE_RECORD", record)];
    let agents = serde_json::json!({
        "claude": kd_tests::fake("claude", "claude", free),
        "codex": kd_tests::fake("gemini", "codex", held),
        "cursor": kd_tests::fake("cursor", "cursor", free),
    });
    ws.write_config(&serde_json::json!({"council": {"members": ["claude", "codex", "cursor"]}, "agents": agents}));
}

/// A council of three on a running kdd, codex holding when its prompt
/// holds `when`, a question asked with `auto` auto-rounds, and codex's run
/// of `round` streaming (held).
struct Scene {
    hold: Hold,
    /// Every fake's `FAKE_RECORD` (in the workspace).
    record: String,
    kdd: Kdd,
    t: String,
    /// codex's held run.
    cut: String,
}

async fn scene(when: &str, auto: u32, round: u32, configure: impl FnOnce(&Workspace)) -> (Scene, Workspace) {
    let hold = Hold::new();
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    council(&ws, &hold, when, &record);
    configure(&ws);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    ask(&c, &t, "Plan the release.", auto).await;
    let cut = streaming(&mut sub, "codex", round).await;
    (Scene { hold, record, kdd, t, cut }, ws)
}

/// Sends a question of claude's alone and waits for its answer: the
/// resume pass is long over by then.
async fn a_later_question(kdd: &Kdd, t: &str) {
    let c = kdd.client().await;
    let mut sub = c.thread_subscribe(t.to_string(), None, None).await.unwrap();
    c.council_send(t.to_string(), "@claude next".into(), None, None, None, None, None, Some(0), None).await.unwrap();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { .. }))).await;
}

#[tokio::test]
async fn kill_9_mid_broadcast_and_two_auto_rounds_resumes_every_answer_exactly_once() {
    // codex holds in round 2: only then does its prompt hold cursor's answer.
    let (Scene { hold, record, mut kdd, t, cut, .. }, _ws) = scene("Answer from cursor", 2, 2, |_| {}).await;
    saved(&kdd.db, &cut).await;
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    let c = kdd.client().await;
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let all = messages(&c, &t).await;
    let by = answers(&all);
    for member in ["claude", "codex", "cursor"] {
        for round in 1..=3 {
            let n = by.get(&(member.to_string(), round)).map_or(0, Vec::len);
            assert_eq!(n, 1, "{member} answered round {round} {n} times: {all:#?}");
        }
    }
    assert_eq!(by.values().map(Vec::len).sum::<usize>(), 9);
    // The cut answer is kept as interrupted and replaced by the new one.
    let interrupted: Vec<&Message> = all.iter().filter(|m| m.kind == MessageKind::Interrupted).collect();
    assert_eq!(interrupted.len(), 1, "{interrupted:#?}");
    assert_eq!((interrupted[0].from.as_str(), interrupted[0].round), ("codex", Some(2)));
    let again = &by[&("codex".to_string(), 2)][0];
    assert_eq!(again.replaces, Some(interrupted[0].seq), "the new answer replaces the cut one");
    // codex was asked three times for three rounds, plus once again for the
    // cut one; the others once per round.
    let asked: Vec<String> = records(&record).iter().map(kd_tests::prompt_of).collect();
    let codex_again = asked.iter().filter(|p| p.contains("kd restarted while you were answering")).count();
    assert_eq!(codex_again, 1, "one run was asked again");
}

#[tokio::test]
async fn a_member_cut_twice_is_left_failed_and_the_round_goes_on() {
    // codex holds in every run: it never finishes.
    let (Scene { hold, record, mut kdd, t, .. }, _ws) = scene("", 0, 1, |_| {}).await;
    // claude and cursor answer; codex holds.
    answered(&kdd.client().await, &t, 2).await;
    kdd.kill9();
    kdd.launch().unwrap();
    // Resumed: codex is asked again and holds again.
    let c = kdd.client().await;
    within("codex asked again", async {
        while !c.run_list(Some(t.clone())).await.unwrap().iter().any(|r| r.member == "codex" && r.pid.is_some()) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    drop(c);
    kdd.kill9();
    kdd.launch().unwrap();
    let c = kdd.client().await;
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let all = messages(&c, &t).await;
    let cut: Vec<&Message> = all.iter().filter(|m| m.from == "codex" && m.kind == MessageKind::Interrupted).collect();
    assert_eq!(cut.len(), 2, "{all:#?}");
    let failed: Vec<&Message> = all.iter().filter(|m| m.from == "codex" && m.kind == MessageKind::Error).collect();
    assert_eq!(failed.len(), 1, "{all:#?}");
    assert!(failed[0].body.contains("council.resume_attempts"), "{}", failed[0].body);
    assert_eq!(failed[0].replaces, Some(cut[1].seq), "the error takes the last cut answer's place");
    let by = answers(&all);
    assert_eq!(by.len(), 2, "claude and cursor answered once each: {by:#?}");
    assert!(by.values().all(|v| v.len() == 1));
    assert_eq!(records(&record).len(), 2 + 2, "codex ran twice, claude and cursor once each");
    hold.release();
}

#[tokio::test]
async fn a_cut_run_is_resumed_in_its_backend_session_with_what_it_had_said() {
    for context in [ContextMode::History, ContextMode::Resume] {
        let hold = Hold::new();
        let tmp = tempfile::tempdir().unwrap();
        let record = tmp.path().join("record").display().to_string();
        let env: &[(&str, &str)] = &[("FAKE_HOLD", hold.var()), ("FAKE_RECORD", &record), ("FAKE_DELTAS", "4")];
        let ws = Workspace::new(&[("claude", "claude", env)]);
        let mut kdd = Kdd::start();
        let c = kdd.client().await;
        let t = thread_in(&c, &ws, Some(context)).await;
        let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
        ask(&c, &t, "Plan the release.", 0).await;
        let cut = streaming(&mut sub, "claude", 1).await;
        saved(&kdd.db, &cut).await;
        drop((sub, c));
        kdd.kill9();
        hold.release();
        kdd.launch().unwrap();
        let c = kdd.client().await;
        settled(&kdd.db, &t).await;
        let runs = records(&record);
        assert_eq!(runs.len(), 2, "{context:?}: {runs:#?}");
        let first_pid = runs[0]["pid"].as_u64().unwrap();
        let argv: Vec<String> =
            runs[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
        let session = format!("fake-session-{first_pid}");
        assert!(argv.windows(2).any(|w| w == ["--resume", session.as_str()]), "{context:?}: {argv:?}");
        let prompt = kd_tests::prompt_of(&runs[1]);
        assert!(prompt.contains("What you had written so far"), "{context:?}: {prompt}");
        let all = messages(&c, &t).await;
        let cut = all.iter().find(|m| m.kind == MessageKind::Interrupted).expect("the cut answer");
        assert!(!cut.body.is_empty() && prompt.contains(cut.body.trim()), "{context:?}: the partial is given back");
        let answer = all.iter().find(|m| m.kind == MessageKind::Agent).expect("the answer");
        assert_eq!(answer.replaces, Some(cut.seq));
    }
}

#[tokio::test]
async fn a_graceful_restart_mid_round_completes_the_round() {
    let (Scene { hold, mut kdd, t, .. }, _ws) = scene("Answer from cursor", 1, 2, |_| {}).await;
    hold.release();
    kdd.restart();
    let c = kdd.client().await;
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let all = messages(&c, &t).await;
    let by = answers(&all);
    assert_eq!(by.len(), 6, "three members, two rounds: {by:#?}");
    assert!(by.values().all(|v| v.len() == 1), "{by:#?}");
    // The stop said where it cut the exchange.
    let events = c.events_list(Some(t.clone()), None, None, None, Some(1000), None).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "exchange.cut"), "{events:#?}");
    assert!(events.iter().any(|e| e.kind == "exchange.resume"), "{events:#?}");
}

#[tokio::test]
async fn kd_cancel_before_the_kill_means_nothing_resumes() {
    let (Scene { hold, record, mut kdd, t, .. }, _ws) = scene("Answer from cursor", 2, 2, |_| {}).await;
    let out = kdd.kd().args(["cancel", &t]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = records(&record).len();
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    let x = settled(&kdd.db, &t).await;
    assert_eq!(x[0].0, "stopped");
    assert!(x[0].1.as_deref().unwrap_or_default().contains("cancelled"), "{x:?}");
    // A later question is answered, and only it: no one of the cancelled
    // exchange was asked again.
    a_later_question(&kdd, &t).await;
    assert_eq!(records(&record).len(), before + 1, "only the new question's run");
}

#[tokio::test]
async fn an_exchange_older_than_resume_within_is_stopped_and_said() {
    let configure = |ws: &Workspace| ws.set_council("resume_within", serde_json::json!("1h"));
    let (Scene { hold, record, mut kdd, t, .. }, _ws) = scene("Plan", 0, 1, configure).await;
    kdd.kill9();
    hold.release();
    // The exchange began two hours ago, as far as the journal knows.
    let conn = rusqlite::Connection::open(&kdd.db).unwrap();
    conn.execute("UPDATE exchanges SET created_at = created_at - 7200000", []).unwrap();
    drop(conn);
    let before = records(&record).len();
    kdd.launch().unwrap();
    let x = settled(&kdd.db, &t).await;
    assert_eq!(x, vec![("stopped".to_string(), Some("expired".to_string()))]);
    let c = kdd.client().await;
    let all = messages(&c, &t).await;
    let said = all.iter().find(|m| m.from == "kd" && m.body.contains("council.resume_within")).expect("kd says why");
    assert!(said.body.contains("2 h") && said.body.contains("kd retry"), "{}", said.body);
    assert_eq!(records(&record).len(), before, "no one was asked again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_codex_turn_is_asked_again_in_its_app_server_thread() {
    let hold = Hold::new();
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record").display().to_string();
    let env: &[(&str, &str)] = &[("FAKE_HOLD", hold.var()), ("FAKE_RECORD", &record), ("FAKE_DELTAS", "4")];
    let ws = Workspace::new(&[("codex", "codex", env)]);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    ask(&c, &t, "Plan the release.", 0).await;
    let cut = streaming(&mut sub, "codex", 1).await;
    saved(&kdd.db, &cut).await;
    drop((sub, c));
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let turns = records(&record);
    assert_eq!(turns.len(), 2, "{turns:#?}");
    assert_eq!(turns[0]["resumed"].as_bool(), Some(false), "{turns:#?}");
    assert_eq!(turns[1]["resumed"].as_bool(), Some(true), "the cut thread is resumed: {turns:#?}");
    assert_eq!(turns[1]["thread"], turns[0]["thread"], "{turns:#?}");
    assert!(kd_tests::prompt_of(&turns[1]).contains("What you had written so far"), "{turns:#?}");
}

#[tokio::test]
async fn a_hand_off_cut_by_a_kill_is_answered_once_after_the_restart() {
    let hold = Hold::new();
    let claude: &[(&str, &str)] = &[("FAKE_TEXT", "@codex check the numbers")];
    let codex: &[(&str, &str)] = &[("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", "check the numbers")];
    let ws = Workspace::new(&[("claude", "claude", claude), ("codex", "gemini", codex)]);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    ask(&c, &t, "Plan the release.", 0).await;
    // codex's answer to claude's hand-off holds (its own turn does not).
    let mut handoff = None;
    collect_until(&mut sub, |events| {
        if let Some(ThreadEvent::RunWaiting { run }) = events.last()
            && run.member == "codex"
            && run.reply_to != Some(1)
        {
            handoff = Some(run.id.clone());
        }
        matches!((events.last(), &handoff), (Some(ThreadEvent::Delta { run: d, .. }), Some(r)) if d == r)
    })
    .await;
    answered(&c, &t, 2).await;
    drop((sub, c));
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let c = kdd.client().await;
    let all = messages(&c, &t).await;
    let from_codex: Vec<&Message> = all.iter().filter(|m| m.from == "codex").collect();
    let kinds: Vec<MessageKind> = from_codex.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, [MessageKind::Agent, MessageKind::Interrupted, MessageKind::Agent], "{all:#?}");
    assert_eq!(from_codex[2].replaces, Some(from_codex[1].seq), "the hand-off's answer replaces the cut one");
    assert_eq!(from_codex[2].reply_to, from_codex[1].reply_to, "it answers claude's hand-off");
}

#[tokio::test]
async fn a_retry_cut_by_a_kill_is_asked_again_and_replaces_in_order() {
    let hold = Hold::new();
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_ERROR", "overloaded")])]);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    ask(&c, &t, "Plan the release.", 0).await;
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    // The retry holds mid-answer, and kdd dies.
    ws.set_agent("claude", "env", serde_json::json!({"FAKE_NAME": "claude", "FAKE_HOLD": hold.var()}));
    let retried = c.council_retry(t.clone(), None, None).await.unwrap();
    assert_eq!(retried.len(), 1);
    let cut = retried[0].id.clone();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { run, .. } if *run == cut))).await;
    drop((sub, c));
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    let x = settled(&kdd.db, &t).await;
    assert!(x.iter().all(|(state, _)| state == "done"), "{x:?}");
    let c = kdd.client().await;
    let all = messages(&c, &t).await;
    let claude: Vec<&Message> = all.iter().filter(|m| m.from == "claude").collect();
    let kinds: Vec<MessageKind> = claude.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, [MessageKind::Error, MessageKind::Interrupted, MessageKind::Agent], "{all:#?}");
    assert_eq!(claude[1].replaces, Some(claude[0].seq));
    assert_eq!(claude[2].replaces, Some(claude[1].seq), "the answer takes the cut retry's place");
    let shown = kd_proto::types::display_order(&all);
    assert_eq!(shown.iter().filter(|m| m.from == "claude").count(), 1, "one answer is shown: {shown:#?}");
}

#[tokio::test]
async fn a_routed_message_cut_by_a_kill_is_answered_once_after_the_restart() {
    let hold = Hold::new();
    let codex: &[(&str, &str)] = &[("FAKE_HOLD", hold.var())];
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "gemini", codex)]);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let routed = c
        .message_route(
            t.clone(),
            "king".into(),
            "Check the numbers.".into(),
            Some(vec!["codex".into()]),
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap();
    let run = routed.deliveries[0].run.clone().expect("codex is asked now");
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { run: r, .. } if *r == run))).await;
    drop((sub, c));
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let c = kdd.client().await;
    let all = messages(&c, &t).await;
    let kinds: Vec<MessageKind> = all.iter().filter(|m| m.from == "codex").map(|m| m.kind).collect();
    assert_eq!(kinds, [MessageKind::Interrupted, MessageKind::Agent], "{all:#?}");
    let answer = all.iter().find(|m| m.kind == MessageKind::Agent).unwrap();
    assert_eq!(answer.reply_to, Some(routed.message.seq), "it answers the routed message");
}

#[tokio::test]
async fn kd_daemon_stop_no_resume_ends_the_exchanges_for_good() {
    let (Scene { hold, record, mut kdd, t, .. }, _ws) = scene("Answer from cursor", 2, 2, |_| {}).await;
    let out = kdd.kd().args(["daemon", "stop", "--no-resume"]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    kdd.wait_exit();
    let before = records(&record).len();
    hold.release();
    kdd.launch().unwrap();
    let x = kd_tests::exchanges(&kdd.db, &t);
    assert_eq!(x.len(), 1);
    assert_eq!(x[0].0, "stopped");
    assert!(x[0].1.as_deref().unwrap_or_default().contains("--no-resume"), "{x:?}");
    // A later question runs, and only it: nothing of the ended one resumed.
    a_later_question(&kdd, &t).await;
    let c = kdd.client().await;
    assert_eq!(records(&record).len(), before + 1, "only the new question's run");
    let all = messages(&c, &t).await;
    let cut = all.iter().filter(|m| m.kind == MessageKind::Interrupted).count();
    assert_eq!(cut, 1, "codex's cut answer stays as it was: {all:#?}");
}
