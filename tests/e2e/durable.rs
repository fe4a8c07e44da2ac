//! Durable exchanges (F-J1..J3): a council round survives kill -9 of kdd,
//! a graceful restart and `kd cancel` does what it says — every answer
//! exactly once, interrupted partials replaced, crash-looping members
//! given up, backend sessions resumed.

use std::collections::BTreeMap;

use kd_client::prelude::*;
use kd_proto::types::{Aggregation, Completion, ContextMode, Message, MessageKind, Purpose, ThreadEvent};
use kd_tests::{Hold, Kdd, TestDb, Workspace, collect_until, records, settled, thread_in, within};

/// Sends `body` to `thread` for a first round and `auto` auto-rounds.
async fn ask(c: &kd_client::Client, thread: &str, body: &str, auto: u32) -> u64 {
    c.council_send(thread.into(), body.into(), None, None, None, None, None, Some(auto), None, None)
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
    c.council_send(t.to_string(), "@claude next".into(), None, None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { .. }))).await;
}

/// A question to `ws`'s one member, `member` (held by `hold`), cut by
/// kill -9 of kdd while it streams (its text saved), then kdd started
/// again with the hold released; kdd and the thread.
async fn cut_by_a_kill(ws: &Workspace, hold: &Hold, member: &str, context: Option<ContextMode>) -> (Kdd, String) {
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, ws, context).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    ask(&c, &t, "Plan the release.", 0).await;
    let cut = streaming(&mut sub, member, 1).await;
    kd_tests::saved(&kdd.db, &cut).await;
    drop((sub, c));
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    (kdd, t)
}

#[tokio::test]
async fn kill_9_mid_broadcast_and_two_auto_rounds_resumes_every_answer_exactly_once() {
    // codex holds in round 2: only then does its prompt hold cursor's answer.
    let (Scene { hold, record, mut kdd, t, cut, .. }, _ws) = scene("Answer from cursor", 2, 2, |_| {}).await;
    kd_tests::saved(&kdd.db, &cut).await;
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

/// Waits until the fakes have recorded `n` runs in `record`.
async fn ran(record: &str, n: usize) {
    within("the fakes to record their runs", async {
        while records(record).len() < n {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_member_cut_twice_is_left_failed_and_the_round_goes_on() {
    // codex holds in every run: it never finishes.
    let (Scene { hold, record, mut kdd, t, .. }, _ws) = scene("", 0, 1, |_| {}).await;
    // claude and cursor answer; codex holds.
    answered(&kdd.client().await, &t, 2).await;
    // codex's fake has started (it records its prompt before it holds).
    ran(&record, 3).await;
    kdd.kill9();
    kdd.launch().unwrap();
    // Resumed: codex is asked again and holds again (found in CI: its run
    // having a pid does not mean the fake has recorded it yet).
    ran(&record, 4).await;
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
        let (kdd, t) = cut_by_a_kill(&ws, &hold, "claude", Some(context)).await;
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
    kdd.db.execute("UPDATE exchanges SET created_at = created_at - 7200000", &[]);
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
    let (kdd, t) = cut_by_a_kill(&ws, &hold, "codex", None).await;
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
    let retried = c.council_retry(t.clone(), None, None, None).await.unwrap();
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

/// What each voter answers: claude, codex and cursor say "Use a queue.",
/// "Use a lock." and "Use a channel."
fn said(member: &str) -> &'static str {
    match member {
        "claude" => "Use a queue.",
        "codex" => "Use a lock.",
        _ => "Use a channel.",
    }
}

/// Three voters ranking by content (codex wins, claude second), cursor
/// the chair; `held` holds on `hold` when its prompt holds `when`.
fn voters(held: &str, hold: &Hold, when: &str, record: &str) -> Workspace {
    let rules = |ranking: &str| {
        serde_json::json!([
            ["[Evaluation]", format!("Fine.\nFINAL RANKING:\n{ranking}")],
            ["[Synthesis]", "Final: use a lock."]
        ])
        .to_string()
    };
    let rules = [
        ("claude", "claude", rules("1. {label:Use a lock.}\n2. {label:Use a channel.}")),
        ("codex", "gemini", rules("1. {label:Use a queue.}\n2. {label:Use a channel.}")),
        ("cursor", "cursor", rules("1. {label:Use a lock.}\n2. {label:Use a queue.}")),
    ];
    let envs: Vec<Vec<(&str, &str)>> = rules
        .iter()
        .map(|(name, _, r)| {
            let mut env = vec![("FAKE_TEXT", said(name)), ("FAKE_RULES", r.as_str()), ("FAKE_RECORD", record)];
            if *name == held {
                env.extend([("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", when)]);
            }
            env
        })
        .collect();
    let members: Vec<kd_tests::Member<'_>> =
        rules.iter().zip(&envs).map(|((name, backend, _), env)| (*name, *backend, env.as_slice())).collect();
    Workspace::new(&members)
}

/// `complete` on a client of its own, left to run (kdd may die under it).
fn calling(
    kdd: &Kdd,
    t: &str,
    aggregation: Aggregation,
    chair: Option<&'static str>,
    id: &'static str,
) -> tokio::task::JoinHandle<Result<Completion, jsonrpsee::core::client::Error>> {
    let (socket, t) = (kdd.socket.clone(), t.to_string());
    tokio::spawn(async move {
        let c = kd_client::Client::connect(&socket).await.expect("connect");
        complete(&c, &t, aggregation, chair, id).await
    })
}

/// Asks `completion.agents` of every member, as `id`.
async fn complete(
    c: &kd_client::Client,
    thread: &str,
    aggregation: Aggregation,
    chair: Option<&str>,
    id: &str,
) -> Result<Completion, jsonrpsee::core::client::Error> {
    let vote = Some(aggregation == Aggregation::Synthesize);
    c.completion_agents(
        thread.into(),
        "How do we share the cache?".into(),
        None,
        None,
        None,
        Some(aggregation),
        vote,
        chair.map(str::to_string),
        Some(id.into()),
        None,
    )
    .await
}

/// Waits until `member` has a run of `thread` for `purpose` (`ballot`,
/// `synthesis`) that has saved some of its text; its id.
async fn held_run(db: &TestDb, thread: &str, member: &str, purpose: &str) -> String {
    let run = within("the held run", async {
        loop {
            let run: Option<String> = db
                .try_query(
                    "SELECT id FROM runs WHERE thread_id = $1 AND member = $2 AND purpose = $3",
                    &[thread.into(), member.into(), purpose.into()],
                )
                .ok()
                .and_then(|rows| rows.first().map(|r| r[0].text().to_string()));
            if let Some(run) = run {
                return run;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    kd_tests::saved(db, &run).await;
    run
}

/// The label each answer's text was shown under in these ballot prompts
/// (the same in every prompt, or the test fails).
fn shown_labels(prompts: &[String]) -> BTreeMap<String, String> {
    let mut by_text = BTreeMap::new();
    for p in prompts {
        let lines: Vec<&str> = p.lines().collect();
        for w in lines.windows(2) {
            if w[0].starts_with("Response ") && w[0].ends_with(':') {
                let label = w[0].trim_end_matches(':').to_string();
                let before = by_text.insert(w[1].to_string(), label.clone());
                assert!(before.as_ref().is_none_or(|b| *b == label), "{} shown as {before:?} and {label}", w[1]);
            }
        }
    }
    by_text
}

/// The messages of `kind` for `purpose`.
fn of(all: &[Message], kind: MessageKind, purpose: Option<Purpose>) -> Vec<&Message> {
    all.iter().filter(|m| m.kind == kind && m.purpose == purpose).collect()
}

/// The prompts recorded that hold `needle`.
fn prompts_with(record: &str, needle: &str) -> Vec<String> {
    records(record).iter().map(kd_tests::prompt_of).filter(|p| p.contains(needle)).collect()
}

#[tokio::test]
async fn kill_9_mid_ballot_finishes_the_vote_once() {
    cut_mid_ballot(false).await;
}

#[tokio::test]
async fn a_graceful_restart_mid_ballot_writes_no_tally_until_the_ballots_are_in() {
    cut_mid_ballot(true).await;
}

/// A vote cut while claude's ballot streams — by kill -9, or by a
/// graceful restart (`graceful`) — finishes once after the restart.
async fn cut_mid_ballot(graceful: bool) {
    let hold = Hold::new();
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record").display().to_string();
    let ws = voters("claude", &hold, "[Evaluation]", &record);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let asked = calling(&kdd, &t, Aggregation::Vote, None, "c-mid-ballot");
    // claude's ballot holds, the others are in.
    held_run(&kdd.db, &t, "claude", "ballot").await;
    within("two ballots", async {
        while of(&messages(&c, &t).await, MessageKind::Agent, Some(Purpose::Ballot)).len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let before = shown_labels(&prompts_with(&record, "[Evaluation]"));
    assert_eq!(before.len(), 3, "each answer shown under one label: {before:?}");
    drop(c);
    if graceful {
        // The stop writes no tally of the ballots in so far.
        kdd.restart();
    } else {
        kdd.kill9();
        kdd.launch().unwrap();
    }
    assert!(asked.await.unwrap().is_err(), "the first call went with the daemon");
    hold.release();
    let c = kdd.client().await;
    // Asked again by its id, the completion is the one resumed.
    let done = within("the resumed vote", complete(&c, &t, Aggregation::Vote, None, "c-mid-ballot")).await.unwrap();
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let tally = done.tally.expect("the tally");
    for l in &tally.labels {
        assert_eq!(before.get(said(&l.member)), Some(&l.label), "the tally's labels are the ballots' before the kill");
    }
    let scores: Vec<(&str, u32)> = tally.scores.iter().map(|s| (s.member.as_str(), s.points)).collect();
    assert_eq!(scores, [("codex", 2), ("claude", 1), ("cursor", 0)]);
    assert_eq!(tally.winner.as_deref(), Some("codex"));
    // 3 answers, 3 ballots, 1 tally, each once; claude's cut ballot replaced.
    let all = messages(&c, &t).await;
    let mut answered: Vec<&str> = of(&all, MessageKind::Agent, None).iter().map(|m| m.from.as_str()).collect();
    answered.sort_unstable();
    assert_eq!(answered, ["claude", "codex", "cursor"], "{all:#?}");
    let ballots = of(&all, MessageKind::Agent, Some(Purpose::Ballot));
    let mut voters: Vec<&str> = ballots.iter().map(|m| m.from.as_str()).collect();
    voters.sort_unstable();
    assert_eq!(voters, ["claude", "codex", "cursor"], "{all:#?}");
    let cut = of(&all, MessageKind::Interrupted, Some(Purpose::Ballot));
    assert_eq!(cut.len(), 1, "{all:#?}");
    let again = ballots.iter().find(|m| m.from == "claude").unwrap();
    assert_eq!(again.replaces, Some(cut[0].seq), "the new ballot replaces the cut one");
    let tallies = of(&all, MessageKind::System, Some(Purpose::Tally));
    assert_eq!(tallies.len(), 1, "{all:#?}");
    assert_eq!(Some(tallies[0].seq), tally.seq);
    assert!(tallies[0].body.starts_with("Vote: codex wins."), "{}", tallies[0].body);
    // No answer was asked again; only claude's ballot was.
    let asked = prompts_with(&record, "How do we share the cache?");
    assert_eq!(asked.iter().filter(|p| !p.contains("[Evaluation]")).count(), 3, "each answer asked once");
    let ballot_runs = prompts_with(&record, "[Evaluation]");
    assert_eq!(ballot_runs.len(), 4, "3 ballots and claude's asked again");
    assert_eq!(ballot_runs.iter().filter(|p| p.contains("kd restarted while you were answering")).count(), 1);
    // Asked once more, the done completion gives its stored result.
    let again = complete(&c, &t, Aggregation::Vote, None, "c-mid-ballot").await.unwrap();
    assert_eq!(again.tally.and_then(|t| t.seq), tally.seq);
}

#[tokio::test]
async fn kill_9_mid_synthesis_writes_one_synthesis() {
    let hold = Hold::new();
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record").display().to_string();
    let ws = voters("cursor", &hold, "[Synthesis]", &record);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    let asked = calling(&kdd, &t, Aggregation::Synthesize, Some("cursor"), "c-mid-synthesis");
    held_run(&kdd.db, &t, "cursor", "synthesis").await;
    drop(c);
    kdd.kill9();
    assert!(asked.await.unwrap().is_err(), "the first call went with the daemon");
    hold.release();
    kdd.launch().unwrap();
    let c = kdd.client().await;
    let done =
        within("the resumed synthesis", complete(&c, &t, Aggregation::Synthesize, Some("cursor"), "c-mid-synthesis"))
            .await
            .unwrap();
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let synthesis = done.synthesis.expect("the synthesis");
    assert_eq!((synthesis.member.as_str(), synthesis.text.as_str()), ("cursor", "Final: use a lock."));
    assert_eq!(done.tally.as_ref().and_then(|t| t.winner.as_deref()), Some("codex"));
    let all = messages(&c, &t).await;
    assert_eq!(of(&all, MessageKind::Agent, None).len(), 3, "{all:#?}");
    assert_eq!(of(&all, MessageKind::Agent, Some(Purpose::Ballot)).len(), 3, "{all:#?}");
    assert_eq!(of(&all, MessageKind::System, Some(Purpose::Tally)).len(), 1, "{all:#?}");
    let written = of(&all, MessageKind::Agent, Some(Purpose::Synthesis));
    assert_eq!(written.len(), 1, "one synthesis: {all:#?}");
    let cut = of(&all, MessageKind::Interrupted, Some(Purpose::Synthesis));
    assert_eq!(cut.len(), 1, "{all:#?}");
    assert_eq!(written[0].replaces, Some(cut[0].seq));
    assert_eq!(Some(written[0].seq), synthesis.seq);
    assert_eq!(prompts_with(&record, "[Evaluation]").len(), 3, "no ballot asked again");
    assert_eq!(prompts_with(&record, "[Synthesis]").len(), 2, "the cut synthesis asked again, once");
}

/// The label `needle` is shown under in a ballot prompt.
fn label_of(prompt: &str, needle: &str) -> Option<String> {
    let at = prompt.find(needle)?;
    prompt[..at]
        .lines()
        .rev()
        .find(|l| l.starts_with("Response ") && l.ends_with(':'))
        .map(|l| l.trim_end_matches(':').to_string())
}

#[tokio::test]
async fn a_kd_work_vote_cut_by_kill_9_tallies_once_after_the_restart() {
    let hold = Hold::new();
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record").display().to_string();
    let work_of = |m: &str| match m {
        "claude" => "alpha work",
        "codex" => "beta work",
        _ => "gamma work",
    };
    // Written in a member's worktree only (where .git is a file).
    let writes = |m: &str| format!("if test -f .git; then printf '%s\\n' '{}' > impl.txt; fi", work_of(m));
    let ranking = "FINAL RANKING:\n1. {label:+alpha work}\n2. {label:+beta work}\n3. {label:+gamma work}";
    let rules = serde_json::json!([["[Evaluation]", ranking]]).to_string();
    let runs: Vec<String> = ["claude", "codex", "cursor"].iter().map(|m| writes(m)).collect();
    let env = |i: usize| {
        let mut env = vec![("FAKE_RUN", runs[i].as_str()), ("FAKE_RULES", rules.as_str()), ("FAKE_RECORD", &record)];
        if i == 0 {
            env.extend([("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", "[Evaluation]")]);
        }
        env
    };
    let envs = [env(0), env(1), env(2)];
    let ws = Workspace::new(&[
        ("claude", "claude", &envs[0]),
        ("codex", "claude", &envs[1]),
        ("cursor", "claude", &envs[2]),
    ]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let started = c.work_start(ws.path(), "Write impl.txt".into(), None, Some(true), None, None).await.unwrap();
    let t = started.thread;
    // claude's ballot holds; the others are in.
    held_run(&kdd.db, &t, "claude", "ballot").await;
    within("two ballots", async {
        while of(&messages(&c, &t).await, MessageKind::Agent, Some(Purpose::Ballot)).len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let before: Vec<String> = prompts_with(&record, "[Evaluation]");
    assert_eq!(before.len(), 3);
    drop(c);
    kdd.kill9();
    hold.release();
    kdd.launch().unwrap();
    let c = kdd.client().await;
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let all = messages(&c, &t).await;
    let tallies = of(&all, MessageKind::System, Some(Purpose::Tally));
    assert_eq!(tallies.len(), 1, "{all:#?}");
    assert!(tallies[0].body.starts_with("Vote: claude wins."), "{}", tallies[0].body);
    // The tally's labels are those the ballots showed before the kill.
    for m in ["claude", "codex", "cursor"] {
        let shown: Vec<Option<String>> = before.iter().map(|p| label_of(p, &format!("+{}", work_of(m)))).collect();
        let label = shown.iter().flatten().next().expect("shown to someone").clone();
        assert!(shown.iter().flatten().all(|l| *l == label), "{m} shown as {shown:?}");
        assert!(tallies[0].body.contains(&format!("| {label} | {m} |")), "{m} as {label}: {}", tallies[0].body);
    }
    let ballots = of(&all, MessageKind::Agent, Some(Purpose::Ballot));
    assert_eq!(ballots.len(), 3, "{all:#?}");
    let cut = of(&all, MessageKind::Interrupted, Some(Purpose::Ballot));
    assert_eq!(cut.len(), 1, "{all:#?}");
    assert_eq!(ballots.iter().find(|m| m.from == "claude").and_then(|m| m.replaces), Some(cut[0].seq));
    assert_eq!(prompts_with(&record, "[Evaluation]").len(), 4, "only claude's ballot asked again");
    // The work itself was done once by each member.
    assert_eq!(prompts_with(&record, "Write impl.txt").len() - 4, 3);
}

#[tokio::test]
async fn a_completion_named_again_is_joined_and_one_cancelled_is_a_conflict() {
    let hold = Hold::new();
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record").display().to_string();
    let ws = voters("claude", &hold, "[Evaluation]", &record);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_in(&c, &ws, None).await;
    // Named twice while it runs: one completion, both calls get it.
    let first = calling(&kdd, &t, Aggregation::Vote, None, "c-twice");
    held_run(&kdd.db, &t, "claude", "ballot").await;
    let second = calling(&kdd, &t, Aggregation::Vote, None, "c-twice");
    hold.release();
    let (a, b) = (first.await.unwrap().unwrap(), second.await.unwrap().unwrap());
    assert_eq!(a.id, "c-twice");
    assert_eq!(a, b, "the same completion, whole");
    let scores: Vec<(String, u32)> =
        a.tally.expect("the tally").scores.into_iter().map(|s| (s.member, s.points)).collect();
    assert_eq!(scores, [("codex".to_string(), 2), ("claude".to_string(), 1), ("cursor".to_string(), 0)]);
    assert_eq!(prompts_with(&record, "[Evaluation]").len(), 3, "each ballot asked once");
    assert_eq!(prompts_with(&record, "How do we share the cache?").len(), 6, "3 answers and 3 ballots");
    // Cancelled by the King, it is over for good: named again, a conflict.
    let hold = Hold::new();
    let ws = voters("cursor", &hold, "[Evaluation]", &record);
    let t = thread_in(&c, &ws, None).await;
    let asked = calling(&kdd, &t, Aggregation::Vote, None, "c-stopped");
    held_run(&kdd.db, &t, "cursor", "ballot").await;
    let out = kdd.kd().args(["cancel", &t]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    hold.release();
    let e = asked.await.unwrap().expect_err("the cancelled completion");
    assert!(e.to_string().contains("stopped"), "{e}");
    let again = complete(&c, &t, Aggregation::Vote, None, "c-stopped").await.expect_err("named again");
    assert!(
        e.to_string().contains("cancelled by the King") || again.to_string().contains("cancelled by the King"),
        "{again}"
    );
    assert!(of(&messages(&c, &t).await, MessageKind::System, Some(Purpose::Tally)).is_empty(), "no tally");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_acp_member_in_resume_mode_loads_its_session_and_is_told_what_it_had_said() {
    let hold = Hold::new();
    let tmp = tempfile::tempdir().unwrap();
    let record = tmp.path().join("record").display().to_string();
    let ws = Workspace::new(&[]);
    let env =
        serde_json::json!({"FAKE_NAME": "acp", "FAKE_HOLD": hold.var(), "FAKE_RECORD": record, "FAKE_DELTAS": "4"});
    let agent =
        serde_json::json!({"backend": "acp", "command": kd_tests::bin("fake-agent"), "args": ["acp"], "env": env});
    ws.write_config(&serde_json::json!({"council": {"members": ["acp"]}, "agents": {"acp": agent}}));
    let (kdd, t) = cut_by_a_kill(&ws, &hold, "acp", Some(ContextMode::Resume)).await;
    assert_eq!(settled(&kdd.db, &t).await, vec![("done".to_string(), None)]);
    let prompts = records(&record);
    assert_eq!(prompts.len(), 2, "{prompts:#?}");
    assert_eq!(prompts[1]["loaded"].as_bool(), Some(true), "its session is loaded: {prompts:#?}");
    assert_eq!(prompts[1]["session"], prompts[0]["session"], "{prompts:#?}");
    let prompt = kd_tests::prompt_of(&prompts[1]);
    assert!(prompt.contains("Plan the release."), "the question it was cut answering: {prompt}");
    let all = messages(&kdd.client().await, &t).await;
    let cut = all.iter().find(|m| m.kind == MessageKind::Interrupted).expect("the cut answer");
    assert!(prompt.contains("What you had written so far"), "{prompt}");
    assert!(!cut.body.is_empty() && prompt.contains(cut.body.trim()), "the partial is given back: {prompt}");
    let answer = all.iter().find(|m| m.kind == MessageKind::Agent).expect("the answer");
    assert_eq!(answer.replaces, Some(cut.seq));
}
