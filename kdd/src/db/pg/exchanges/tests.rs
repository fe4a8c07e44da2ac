//! The journal's rules on PostgreSQL: SQLite's cases (`db/sqlite/exchanges/tests.rs`)
//! on a fresh database, and what only concurrency shows — one run of many
//! takes a step, two steps ending at once settle their exchange.

use std::sync::Arc;

use kd_proto::types::{MessageKind, RunMeta, RunStatus};
use serde_json::json;

use super::*;
use crate::db::Outbox;
use crate::db::fixtures::run_of;
use crate::db::outage::Again;
use crate::db::pg::testing::{self, TestDb};
use crate::db::pg::{Pg, runs};
use crate::db::runs::Finish;

/// A fresh registry holding thread `t1`.
pub(crate) async fn db() -> Option<(Pg, TestDb)> {
    let (pg, db) = testing::fresh().await?;
    let c = pg.conn().await.unwrap();
    c.execute("INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t1', '/w', 1, 1)", &[])
        .await
        .unwrap();
    Some((pg, db))
}

pub(crate) fn key(round: u32, member: &str, purpose: Purpose, cause: u64) -> StepKey {
    StepKey { round, member: member.into(), purpose, cause }
}

fn new_council(seq: u64, members: &[&str]) -> NewExchange {
    NewExchange {
        path: None,
        thread: "t1".into(),
        seq,
        kind: Kind::Council,
        correlation_id: None,
        plan: json!({"mode": "broadcast", "rounds": 2, "first": members}),
        first_steps: members.iter().map(|m| key(1, m, Purpose::Answer, 0)).collect(),
    }
}

async fn council(c: &impl GenericClient, seq: u64, members: &[&str]) -> Exchange {
    begin(c, 10, &new_council(seq, members)).await.unwrap()
}

async fn the_step(c: &impl GenericClient, x: ExchangeId, k: &StepKey) -> Step {
    match open_step(c, 20, x, k).await.unwrap() {
        Opened::Step(s) => s,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_exchange_keeps_the_path_its_agents_are_found_on() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    let x = NewExchange { path: Some("/home/u/.nvm/bin:/usr/bin".into()), ..new_council(1, &["claude"]) };
    let begun = begin(&c, 10, &x).await.unwrap();
    assert_eq!(begun.path.as_deref(), Some("/home/u/.nvm/bin:/usr/bin"));
    assert_eq!(get(&c, begun.id).await.unwrap().unwrap().path, begun.path);
    assert_eq!(council(&c, 2, &["claude"]).await.path, None, "none sent: the daemon's own");
}

#[tokio::test]
async fn a_step_exists_once_and_is_taken_by_one_run_only() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    let x = council(&c, 1, &["claude", "codex"]).await;
    assert_eq!(steps(&c, x.id).await.unwrap().len(), 2);
    let k = key(1, "claude", Purpose::Answer, 0);
    let s = the_step(&c, x.id, &k).await;
    assert_eq!(the_step(&c, x.id, &k).await.id, s.id, "asked again, the same step");
    assert!(step_started(&c, 21, s.id, "r-1", Some(1)).await.unwrap());
    assert!(!step_started(&c, 22, s.id, "r-2", Some(1)).await.unwrap(), "a second run does not take it");
    let s = the_step(&c, x.id, &k).await;
    assert_eq!((s.state, s.run_id.as_deref(), s.attempts), (StepState::Running, Some("r-1"), 1));
    // A hand-off to the same member in the same round is a step of its own.
    let h = the_step(&c, x.id, &key(1, "claude", Purpose::Handoff, 7)).await;
    assert_ne!(h.id, s.id);
}

#[tokio::test]
async fn an_interrupted_step_is_pending_again_with_what_the_next_answer_replaces() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    let x = council(&c, 1, &["claude", "codex"]).await;
    let k = key(1, "claude", Purpose::Answer, 0);
    let s = the_step(&c, x.id, &k).await;
    step_started(&c, 21, s.id, "r-1", Some(1)).await.unwrap();
    step_session(&c, "r-1", "claude-session-9").await.unwrap();
    // The backend session saved while it ran is kept.
    let end = RunEnd::Interrupted { seq: 2, backend_session: Some("claude-session-10".into()) };
    step_finished(&c, 30, "r-1", &end).await.unwrap();
    let s = the_step(&c, x.id, &k).await;
    assert_eq!(
        (s.state, s.replaces_seq, s.backend_session.as_deref()),
        (StepState::Pending, Some(2), Some("claude-session-9"))
    );
    // Taken again by the resumed run, it keeps its place and replaces.
    assert!(step_started(&c, 40, s.id, "r-2", Some(5)).await.unwrap());
    let s = the_step(&c, x.id, &k).await;
    assert_eq!((s.reply_to, s.attempts, s.replaces_seq), (Some(1), 2, Some(2)));
    // The first run's end, come late, changes nothing.
    step_finished(&c, 41, "r-1", &RunEnd::Done { seq: 99 }).await.unwrap();
    assert_eq!(the_step(&c, x.id, &k).await.state, StepState::Running);
    step_finished(&c, 50, "r-2", &RunEnd::Done { seq: 3 }).await.unwrap();
    let s = the_step(&c, x.id, &k).await;
    assert_eq!((s.state, s.message_seq), (StepState::Done, Some(3)));
    // A run that saved no backend session while it ran leaves the one its
    // end gives on the step.
    let k = key(1, "codex", Purpose::Answer, 0);
    step_started(&c, 60, the_step(&c, x.id, &k).await.id, "r-3", Some(1)).await.unwrap();
    let end = RunEnd::Interrupted { seq: 4, backend_session: Some("codex-session-7".into()) };
    step_finished(&c, 61, "r-3", &end).await.unwrap();
    let s = the_step(&c, x.id, &k).await;
    assert_eq!((s.state, s.backend_session.as_deref()), (StepState::Pending, Some("codex-session-7")));
}

#[tokio::test]
async fn an_exchange_is_done_once_its_plan_is_taken_and_no_step_is_unfinished() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    let x = council(&c, 1, &["claude", "codex"]).await;
    for (m, run, seq) in [("claude", "r-1", 2), ("codex", "r-2", 3)] {
        let s = the_step(&c, x.id, &key(1, m, Purpose::Answer, 0)).await;
        step_started(&c, 21, s.id, run, Some(1)).await.unwrap();
        if m == "claude" {
            step_finished(&c, 30, run, &RunEnd::Done { seq }).await.unwrap();
        }
    }
    plan_done(&c, 31, x.id, None).await.unwrap();
    assert_eq!(get(&c, x.id).await.unwrap().unwrap().state, ExchangeState::Open, "codex still runs");
    assert_eq!(unfinished(&c).await.unwrap().len(), 1);
    step_finished(&c, 32, "r-2", &RunEnd::Failed { seq: 3, reason: "timed out".into() }).await.unwrap();
    assert_eq!(get(&c, x.id).await.unwrap().unwrap().state, ExchangeState::Done);
    assert!(unfinished(&c).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_new_king_message_supersedes_the_open_exchange_and_a_stopped_one_takes_no_step() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    let old = council(&c, 1, &["claude", "codex"]).await;
    let s = the_step(&c, old.id, &key(1, "claude", Purpose::Answer, 0)).await;
    step_started(&c, 21, s.id, "r-1", Some(1)).await.unwrap();
    let new = council(&c, 5, &["claude"]).await;
    let old_now = get(&c, old.id).await.unwrap().unwrap();
    assert_eq!(old_now.state, ExchangeState::Stopped);
    assert!(old_now.reason.unwrap().contains("superseded"));
    let by_member: Vec<(String, StepState)> =
        steps(&c, old.id).await.unwrap().into_iter().map(|s| (s.key.member, s.state)).collect();
    assert_eq!(by_member, [("claude".to_string(), StepState::Running), ("codex".to_string(), StepState::Cancelled)]);
    // The question's first answers were asked all the same: a run launched
    // for codex's before the new message came still takes its step (CI
    // found a question lost so), and only once.
    let codex = steps(&c, old.id).await.unwrap()[1].id;
    assert!(step_started(&c, 22, codex, "r-2", Some(1)).await.unwrap(), "codex's launched run takes its step");
    assert!(!step_started(&c, 23, codex, "r-3", Some(1)).await.unwrap(), "once");
    assert_eq!(
        open_step(&c, 30, old.id, &key(2, "codex", Purpose::Answer, 0)).await.unwrap(),
        Opened::Ended(ExchangeState::Stopped)
    );
    // Its run in flight, interrupted, is not asked again.
    step_finished(&c, 31, "r-1", &RunEnd::Interrupted { seq: 3, backend_session: None }).await.unwrap();
    assert_eq!(steps(&c, old.id).await.unwrap()[0].state, StepState::Cancelled);
    assert_eq!(unfinished(&c).await.unwrap().iter().map(|x| x.id).collect::<Vec<_>>(), [new.id]);
    // A completion is not superseded by a King message.
    let completion = NewExchange {
        path: None,
        thread: "t1".into(),
        seq: 6,
        kind: Kind::Completion,
        correlation_id: Some("c-1".into()),
        plan: json!({"aggregation": "vote"}),
        first_steps: vec![],
    };
    let x = begin(&c, 40, &completion).await.unwrap();
    council(&c, 7, &["codex"]).await;
    assert_eq!(get(&c, x.id).await.unwrap().unwrap().state, ExchangeState::Open);
}

#[tokio::test]
async fn one_message_begins_one_exchange_of_a_kind() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    council(&c, 1, &["claude"]).await;
    let again = NewExchange {
        path: None,
        thread: "t1".into(),
        seq: 1,
        kind: Kind::Council,
        correlation_id: None,
        plan: json!({}),
        first_steps: vec![],
    };
    // The first was superseded by then, yet one message begins one exchange of a kind.
    assert!(begin(&c, 11, &again).await.is_err());
}

#[tokio::test]
async fn a_run_takes_its_step_as_it_is_recorded_and_a_second_one_is_refused_whole() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    let out = &mut Outbox::default();
    let x = council(&c, 1, &["claude"]).await;
    let s = the_step(&c, x.id, &key(1, "claude", Purpose::Answer, 0)).await;
    runs::insert(&c, 21, &run_of("r-1", "claude"), Some(s.id), out).await.unwrap();
    let refused = runs::insert(&c, 22, &run_of("r-2", "claude"), Some(s.id), out).await;
    assert!(matches!(refused, Err(DbError::StepTaken(id)) if id == s.id), "{refused:?}");
    let rows: i64 = c.query_one("SELECT count(*) FROM runs WHERE id = 'r-2'", &[]).await.unwrap().get(0);
    assert_eq!(rows, 0, "the refused run left no row");
}

#[tokio::test]
async fn recovery_makes_a_cut_step_pending_with_its_interrupted_message_to_replace() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    let out = &mut Outbox::default();
    let king = crate::db::messages::NewMessage::new("t1", "king", vec!["all".into()], MessageKind::King, "Q".into());
    crate::db::pg::messages::append(&c, 5, king, out).await.unwrap();
    let x = council(&c, 1, &["claude"]).await;
    let k = key(1, "claude", Purpose::Answer, 0);
    let s = the_step(&c, x.id, &k).await;
    runs::insert(&c, 21, &run_of("r-1", "claude"), Some(s.id), out).await.unwrap();
    runs::append_partial(&c, "r-1", "half an ans").await.unwrap();
    assert_eq!(runs::recover(&c, 30, None, crate::db::runs::STOPPED_IN_FLIGHT, out).await.unwrap(), 1);
    let s = the_step(&c, x.id, &k).await;
    let row = c
        .query_one(
            "SELECT kind, body FROM messages WHERE thread_id = 't1' AND seq = $1",
            &[&(s.replaces_seq.unwrap() as i64)],
        )
        .await
        .unwrap();
    let (kind, body): (String, String) = (row.get(0), row.get(1));
    assert_eq!(
        (s.state, s.attempts, kind.as_str(), body.as_str()),
        (StepState::Pending, 1, "interrupted", "half an ans")
    );
    // Its next run answers, once.
    runs::insert(&c, 40, &run_of("r-2", "claude"), Some(s.id), out).await.unwrap();
    let s = the_step(&c, x.id, &k).await;
    assert_eq!((s.state, s.attempts, s.run_id.as_deref()), (StepState::Running, 2, Some("r-2")));
}

/// Waits (10 s at most) until `n` other sessions of this database wait for
/// a lock: the concurrent takers are all blocked behind the first.
async fn until_waiting_for_a_lock(c: &impl GenericClient, n: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting >= n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{waiting} of {n} transactions wait for a lock");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_many_runs_taking_one_step_at_once_one_takes_it_and_the_others_are_refused_whole() {
    let Some((pg, _db)) = db().await else { return };
    let pg = Arc::new(pg);
    let c = pg.conn().await.unwrap();
    let x = council(&c, 1, &["claude"]).await;
    let s = the_step(&c, x.id, &key(1, "claude", Purpose::Answer, 0)).await;
    // A first taker holds the step, uncommitted, while eight more ask for it.
    let mut first = pg.conn().await.unwrap();
    let tx = first.transaction().await.unwrap();
    runs::insert(&tx, 21, &run_of("r-0", "claude"), Some(s.id), &mut Outbox::default()).await.unwrap();
    let takers: Vec<_> = (1..=8)
        .map(|i| {
            let pg = pg.clone();
            tokio::spawn(
                async move { pg.insert_run(run_of(&format!("r-{i}"), "claude"), Some(s.id), Again::First).await },
            )
        })
        .collect();
    until_waiting_for_a_lock(&c, 8).await;
    tx.commit().await.unwrap();
    for t in takers {
        let refused = t.await.unwrap();
        assert!(matches!(refused, Err(DbError::StepTaken(id)) if id == s.id), "{refused:?}");
    }
    let runs: Vec<String> = c.query("SELECT id FROM runs", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(runs, ["r-0"]);
    let s = the_step(&c, x.id, &key(1, "claude", Purpose::Answer, 0)).await;
    assert_eq!((s.state, s.run_id.as_deref(), s.attempts), (StepState::Running, Some("r-0"), 1));

    // Taken at once with none ahead: still one.
    let s = the_step(&c, x.id, &key(1, "claude", Purpose::Handoff, 9)).await;
    let takers: Vec<_> = (10..26)
        .map(|i| {
            let pg = pg.clone();
            tokio::spawn(
                async move { pg.insert_run(run_of(&format!("r-{i}"), "claude"), Some(s.id), Again::First).await },
            )
        })
        .collect();
    let mut taken = 0;
    for t in takers {
        match t.await.unwrap() {
            Ok(()) => taken += 1,
            Err(DbError::StepTaken(id)) => assert_eq!(id, s.id),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(taken, 1);
}

fn done(body: &str) -> Finish {
    Finish {
        status: RunStatus::Done,
        body: body.into(),
        error: None,
        meta: RunMeta::default(),
        session: None,
        to: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_exchange_whose_last_steps_end_at_once_is_done() {
    let Some((pg, _db)) = db().await else { return };
    let pg = Arc::new(pg);
    let c = pg.conn().await.unwrap();
    let king = crate::db::messages::NewMessage::new("t1", "king", vec!["all".into()], MessageKind::King, "Q".into());
    pg.append_message(king).await.unwrap();
    let members: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    let names: Vec<&str> = members.iter().map(String::as_str).collect();
    let x = council(&c, 1, &names).await;
    let mut runs = vec![];
    for m in &names {
        let s = the_step(&c, x.id, &key(1, m, Purpose::Answer, 0)).await;
        let run = run_of(&format!("r-{m}"), m);
        pg.insert_run(run.clone(), Some(s.id), Again::First).await.unwrap();
        runs.push(run);
    }
    pg.plan_done(x.id, None).await.unwrap();
    let ends: Vec<_> = runs
        .into_iter()
        .map(|run| {
            let pg = pg.clone();
            tokio::spawn(async move { pg.finish_run(run, done("yes"), Again::First).await })
        })
        .collect();
    for e in ends {
        e.await.unwrap().unwrap();
    }
    assert_eq!(pg.exchange(x.id).await.unwrap().state, ExchangeState::Done);
    assert!(pg.exchange_steps(x.id).await.unwrap().iter().all(|s| s.state == StepState::Done));
}

/// A row of the event log, as both engines keep it: at, kind, thread,
/// session, agent, sender, recipients, correlation id, data.
pub(crate) type EventRow =
    (i64, String, Option<String>, Option<String>, Option<String>, Option<String>, String, Option<String>, String);

pub(crate) const EVENTS: &str = "SELECT at, kind, thread_id, session_id, agent, sender, recipients, correlation_id, data \
                      FROM conversation_events ORDER BY id";

/// PostgreSQL's event log, oldest first.
pub(crate) async fn pg_events(c: &impl GenericClient) -> Vec<EventRow> {
    let rows = c.query(EVENTS, &[]).await.unwrap();
    rows.iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6), r.get(7), r.get(8)))
        .collect()
}

pub(crate) fn error_of(member: &str) -> crate::db::messages::NewMessage {
    crate::db::messages::NewMessage::new("t1", member, vec!["king".into()], MessageKind::Error, "gave up".into())
}

pub(crate) fn retry() -> NewExchange {
    NewExchange {
        path: None,
        thread: "t1".into(),
        seq: 1,
        kind: Kind::Retry,
        correlation_id: None,
        plan: json!({"retry": "claude"}),
        first_steps: vec![key(1, "claude", Purpose::Answer, 0)],
    }
}

pub(crate) async fn life_on_postgres(c: &impl GenericClient) -> DbResult<Vec<String>> {
    use super::life;
    let mut out = Outbox::default();
    let mut got = vec![];
    let first = begin(c, 10, &council_plan(1, &["claude", "codex"])).await?;
    got.push(format!("{:?}", life::begin_settling(c, 11, &retry()).await?));
    got.push(format!("{:?}", life::begin_settling(c, 12, &retry()).await?));
    got.push(format!("{:?}", life::cut_open(c, 13).await?));
    let ex = get(c, first.id).await?.unwrap();
    life::resumed(c, 14, &ex).await?;
    let claude = steps(c, first.id).await?[0].id;
    got.push(format!("{:?}", life::give_up(c, 15, claude, error_of("claude"), "cut too often", &mut out).await?));
    got.push(format!("{:?}", life::give_up(c, 16, claude, error_of("claude"), "again", &mut out).await?));
    let notice =
        || crate::db::messages::NewMessage::new("t1", "kd", vec!["king".into()], MessageKind::System, "budget".into());
    got.push(format!("{:?}", life::stop_with_notice(c, 17, first.id, "budget", notice(), &mut out).await?));
    got.push(format!("{:?}", life::stop_with_notice(c, 18, first.id, "budget", notice(), &mut out).await?));
    let second = begin(c, 19, &council_plan(5, &["codex"])).await?;
    got.push(format!("{:?}", life::stop_thread(c, 20, "t1", "kd cancel").await?));
    begin(c, 21, &council_plan(6, &["codex"])).await?;
    got.push(format!("{:?}", life::stop_all_open(c, 22, "no resume").await?));
    got.push(format!("{:?}", life::open_at(c, "t1", 6).await?));
    for id in [first.id, second.id] {
        got.push(format!("{:?} {:?}", get(c, id).await?, steps(c, id).await?));
    }
    got.push(format!("{:?}", out.events));
    got.push(format!("{:?}", pg_events(c).await));
    Ok(got)
}

pub(crate) fn council_plan(seq: u64, members: &[&str]) -> NewExchange {
    NewExchange {
        path: None,
        thread: "t1".into(),
        seq,
        kind: Kind::Council,
        correlation_id: None,
        plan: json!({"mode": "broadcast", "rounds": 2, "first": members}),
        first_steps: members.iter().map(|m| key(1, m, Purpose::Answer, 0)).collect(),
    }
}

/// Every operation's future is `Send` (callers spawn them): checked by the
/// compiler, never run.
#[allow(dead_code)]
fn every_operation_can_be_spawned(pg: Arc<Pg>, x: Exchange, m: crate::db::messages::NewMessage) {
    fn spawnable<T: Send>(_: T) {}
    let run = run_of("r", "m");
    spawnable(pg.open_exchange_at(String::new(), 1));
    spawnable(pg.begin_settling_exchange(retry()));
    spawnable(pg.exchange(1));
    spawnable(pg.open_step(1, StepKey::answer(1, "m")));
    spawnable(pg.exchange_steps(1));
    spawnable(pg.plan_done(1, None));
    spawnable(pg.stop_exchange(1, String::new()));
    spawnable(pg.stop_exchange_with_notice(1, String::new(), m.clone()));
    spawnable(pg.stop_thread_exchanges(String::new(), String::new()));
    spawnable(pg.stop_open_exchanges(String::new()));
    spawnable(pg.cut_open_exchanges());
    spawnable(pg.unfinished_exchanges());
    spawnable(pg.exchange_resumed(x));
    spawnable(pg.give_up_step(1, m.clone(), String::new()));
    spawnable(pg.kd_step(1, StepKey::answer(1, "m"), m.clone(), Box::new(|_| vec![])));
    spawnable(pg.cancel_step(1, String::new()));
    spawnable(pg.fix_choice(1, "labels", json!(1)));
    spawnable(pg.cancel_pending_steps(1, Purpose::Answer, String::new()));
    spawnable(pg.exchange_by_correlation(String::new(), String::new()));
    spawnable(pg.exchange_at(String::new(), 1, Kind::Council));
    spawnable(pg.steps_with_messages(1));
    spawnable(pg.exchange_info(String::new(), 1));
    spawnable(pg.insert_run(run.clone(), None, Again::First));
    spawnable(pg.run_started(run.clone(), 1, None, None, Again::First));
    spawnable(pg.append_run_partial(String::new(), String::new()));
    spawnable(pg.finish_run(run, done(""), Again::First));
    spawnable(pg.run_session_seen(String::new(), String::new()));
    spawnable(pg.orphan_runs());
    spawnable(pg.recover_runs());
    spawnable(pg.ask(None, vec![m.clone()], retry()));
    spawnable(pg.create_thread_with_message(new_thread(), m.clone()));
    spawnable(pg.create_thread_with_messages(new_thread(), vec![m.clone()]));
    spawnable(pg.import_thread(new_thread(), 1, vec![(1, m)]));
}

#[allow(dead_code)]
fn new_thread() -> crate::db::threads::NewThread {
    crate::db::threads::NewThread { members: vec![], ..crate::db::threads::NewThread::in_workspace("") }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_last_steps_ending_in_transactions_at_once_the_second_to_commit_settles_the_exchange() {
    let Some((pg, _db)) = db().await else { return };
    let pg = Arc::new(pg);
    let c = pg.conn().await.unwrap();
    let x = council(&c, 1, &["claude", "codex"]).await;
    for (m, run) in [("claude", "r-a"), ("codex", "r-b")] {
        let s = the_step(&c, x.id, &key(1, m, Purpose::Answer, 0)).await;
        assert!(step_started(&c, 21, s.id, run, Some(1)).await.unwrap());
    }
    plan_done(&c, 22, x.id, None).await.unwrap();
    // Claude's step ends, uncommitted; codex's ends meanwhile in a
    // transaction of its own, which waits for the exchange's row.
    let mut a = pg.conn().await.unwrap();
    let a = a.transaction().await.unwrap();
    step_finished(&a, 30, "r-a", &RunEnd::Done { seq: 2 }).await.unwrap();
    let b = {
        let pg = pg.clone();
        tokio::spawn(async move {
            let mut b = pg.conn().await.unwrap();
            let b = b.transaction().await.unwrap();
            step_finished(&b, 31, "r-b", &RunEnd::Done { seq: 3 }).await.unwrap();
            b.commit().await.unwrap();
        })
    };
    until_waiting_for_a_lock(&c, 1).await;
    a.commit().await.unwrap();
    b.await.unwrap();
    assert_eq!(get(&c, x.id).await.unwrap().unwrap().state, ExchangeState::Done);
}

#[tokio::test]
async fn a_question_routed_to_a_node_and_not_yet_taken_is_not_superseded_by_a_later_one() {
    let Some((pg, _db)) = db().await else { return };
    let c = pg.conn().await.unwrap();
    // Asked on another node for this one (plan {routed}), not yet taken.
    let routed = NewExchange {
        path: None,
        thread: "t1".into(),
        seq: 2,
        kind: Kind::Council,
        correlation_id: None,
        plan: json!({"routed": {"to": null, "mute": [], "style": "ask", "timeout_s": null, "rounds": 0,
                                "vote": false, "from": "b"}}),
        first_steps: vec![],
    };
    let waiting = super::begin_for(&c, 10, &routed, Some("local")).await.unwrap();
    // This node's own question right after it: it supersedes what was
    // asked before it, but not a question nobody has begun yet.
    let own = council(&c, 3, &["claude"]).await;
    assert_eq!(get(&c, waiting.id).await.unwrap().unwrap().state, ExchangeState::Open);
    assert_eq!(get(&c, own.id).await.unwrap().unwrap().state, ExchangeState::Open);
    let taken = crate::db::pg::leases::claim(&c, 12, &[]).await.unwrap();
    assert_eq!(taken.iter().map(|x| x.id).collect::<Vec<_>>(), [waiting.id], "this node takes it");
}
