//! The journal's rules, on a migrated in-memory registry.

use kd_proto::types::MessageKind;
use serde_json::json;

use super::*;
use crate::db::exchanges::{Kind, Purpose, StepState};
use crate::db::fixtures::run_of;

fn db() -> Connection {
    crate::db::sqlite::schema::in_memory_with_thread("t1")
}

fn key(round: u32, member: &str, purpose: Purpose, cause: u64) -> StepKey {
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

fn council(conn: &Connection, seq: u64, members: &[&str]) -> Exchange {
    begin(conn, 10, &new_council(seq, members)).unwrap()
}

fn the_step(conn: &Connection, x: ExchangeId, k: &StepKey) -> Step {
    match open_step(conn, 20, x, k).unwrap() {
        Opened::Step(s) => s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_exchange_keeps_the_path_its_agents_are_found_on() {
    let conn = db();
    let x = NewExchange { path: Some("/home/u/.nvm/bin:/usr/bin".into()), ..new_council(1, &["claude"]) };
    let begun = begin(&conn, 10, &x).unwrap();
    assert_eq!(get(&conn, begun.id).unwrap().unwrap().path.as_deref(), Some("/home/u/.nvm/bin:/usr/bin"));
    assert_eq!(council(&conn, 2, &["claude"]).path, None, "none sent: the daemon's own");
}

#[test]
fn a_step_exists_once_and_is_taken_by_one_run_only() {
    let conn = db();
    let x = council(&conn, 1, &["claude", "codex"]);
    assert_eq!(steps(&conn, x.id).unwrap().len(), 2);
    let k = key(1, "claude", Purpose::Answer, 0);
    let s = the_step(&conn, x.id, &k);
    assert_eq!(the_step(&conn, x.id, &k).id, s.id, "asked again, the same step");
    assert!(step_started(&conn, 21, s.id, "r-1", Some(1)).unwrap());
    assert!(!step_started(&conn, 22, s.id, "r-2", Some(1)).unwrap(), "a second run does not take it");
    let s = the_step(&conn, x.id, &k);
    assert_eq!((s.state, s.run_id.as_deref(), s.attempts), (StepState::Running, Some("r-1"), 1));
    // A hand-off to the same member in the same round is a step of its own.
    let h = the_step(&conn, x.id, &key(1, "claude", Purpose::Handoff, 7));
    assert_ne!(h.id, s.id);
}

#[test]
fn an_interrupted_step_is_pending_again_with_what_the_next_answer_replaces() {
    let conn = db();
    let x = council(&conn, 1, &["claude", "codex"]);
    let k = key(1, "claude", Purpose::Answer, 0);
    let s = the_step(&conn, x.id, &k);
    step_started(&conn, 21, s.id, "r-1", Some(1)).unwrap();
    step_session(&conn, "r-1", "claude-session-9").unwrap();
    // The backend session saved while it ran is kept.
    let end = RunEnd::Interrupted { seq: 2, backend_session: Some("claude-session-10".into()) };
    step_finished(&conn, 30, "r-1", &end).unwrap();
    let s = the_step(&conn, x.id, &k);
    assert_eq!(
        (s.state, s.replaces_seq, s.backend_session.as_deref()),
        (StepState::Pending, Some(2), Some("claude-session-9"))
    );
    // Taken again by the resumed run, it keeps its place and replaces.
    assert!(step_started(&conn, 40, s.id, "r-2", Some(5)).unwrap());
    let s = the_step(&conn, x.id, &k);
    assert_eq!((s.reply_to, s.attempts, s.replaces_seq), (Some(1), 2, Some(2)));
    // The first run's end, come late, changes nothing.
    step_finished(&conn, 41, "r-1", &RunEnd::Done { seq: 99 }).unwrap();
    assert_eq!(the_step(&conn, x.id, &k).state, StepState::Running);
    step_finished(&conn, 50, "r-2", &RunEnd::Done { seq: 3 }).unwrap();
    let s = the_step(&conn, x.id, &k);
    assert_eq!((s.state, s.message_seq), (StepState::Done, Some(3)));
    // A run that saved no backend session while it ran leaves the one its
    // end gives on the step.
    let k = key(1, "codex", Purpose::Answer, 0);
    step_started(&conn, 60, the_step(&conn, x.id, &k).id, "r-3", Some(1)).unwrap();
    let end = RunEnd::Interrupted { seq: 4, backend_session: Some("codex-session-7".into()) };
    step_finished(&conn, 61, "r-3", &end).unwrap();
    let s = the_step(&conn, x.id, &k);
    assert_eq!((s.state, s.backend_session.as_deref()), (StepState::Pending, Some("codex-session-7")));
}

#[test]
fn an_exchange_is_done_once_its_plan_is_taken_and_no_step_is_unfinished() {
    let conn = db();
    let x = council(&conn, 1, &["claude", "codex"]);
    for (m, run, seq) in [("claude", "r-1", 2), ("codex", "r-2", 3)] {
        let s = the_step(&conn, x.id, &key(1, m, Purpose::Answer, 0));
        step_started(&conn, 21, s.id, run, Some(1)).unwrap();
        if m == "claude" {
            step_finished(&conn, 30, run, &RunEnd::Done { seq }).unwrap();
        }
    }
    plan_done(&conn, 31, x.id, None).unwrap();
    assert_eq!(get(&conn, x.id).unwrap().unwrap().state, ExchangeState::Open, "codex still runs");
    assert_eq!(unfinished(&conn).unwrap().len(), 1);
    step_finished(&conn, 32, "r-2", &RunEnd::Failed { seq: 3, reason: "timed out".into() }).unwrap();
    assert_eq!(get(&conn, x.id).unwrap().unwrap().state, ExchangeState::Done);
    assert!(unfinished(&conn).unwrap().is_empty());
}

#[test]
fn a_new_king_message_supersedes_the_open_exchange_and_a_stopped_one_takes_no_step() {
    let conn = db();
    let old = council(&conn, 1, &["claude", "codex"]);
    let s = the_step(&conn, old.id, &key(1, "claude", Purpose::Answer, 0));
    step_started(&conn, 21, s.id, "r-1", Some(1)).unwrap();
    let new = council(&conn, 5, &["claude"]);
    let old_now = get(&conn, old.id).unwrap().unwrap();
    assert_eq!(old_now.state, ExchangeState::Stopped);
    assert!(old_now.reason.unwrap().contains("superseded"));
    let by_member: Vec<(String, StepState)> =
        steps(&conn, old.id).unwrap().into_iter().map(|s| (s.key.member, s.state)).collect();
    assert_eq!(by_member, [("claude".to_string(), StepState::Running), ("codex".to_string(), StepState::Cancelled)]);
    // The question's first answers were asked all the same: a run launched
    // for codex's before the new message came still takes its step (CI
    // found a question lost so), and only once.
    let codex = steps(&conn, old.id).unwrap()[1].id;
    assert!(step_started(&conn, 22, codex, "r-2", Some(1)).unwrap(), "codex's launched run takes its step");
    assert!(!step_started(&conn, 23, codex, "r-3", Some(1)).unwrap(), "once");
    assert_eq!(
        open_step(&conn, 30, old.id, &key(2, "codex", Purpose::Answer, 0)).unwrap(),
        Opened::Ended(ExchangeState::Stopped)
    );
    // Its run in flight, interrupted, is not asked again.
    step_finished(&conn, 31, "r-1", &RunEnd::Interrupted { seq: 3, backend_session: None }).unwrap();
    assert_eq!(steps(&conn, old.id).unwrap()[0].state, StepState::Cancelled);
    assert_eq!(unfinished(&conn).unwrap().iter().map(|x| x.id).collect::<Vec<_>>(), [new.id]);
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
    let c = begin(&conn, 40, &completion).unwrap();
    council(&conn, 7, &["codex"]);
    assert_eq!(get(&conn, c.id).unwrap().unwrap().state, ExchangeState::Open);
}

#[test]
fn a_question_looks_among_the_open_exchanges_not_at_its_threads_whole_past() {
    let conn = db();
    conn.execute("INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t2', '/w2', 1, 1)", [])
        .unwrap();
    // A long past: 200 questions answered on t1.
    for seq in 1..=200 {
        let x = council(&conn, seq, &[]);
        stop(&conn, 11, x.id, "done").unwrap();
    }
    let elsewhere = begin(&conn, 10, &NewExchange { thread: "t2".into(), ..new_council(1, &["claude"]) }).unwrap();
    let open = council(&conn, 201, &["claude"]);
    assert_eq!(open_in_thread(&conn, "t1", "").unwrap(), [open.id]);
    // The next question supersedes its own thread's open exchange alone.
    council(&conn, 202, &["claude"]);
    assert_eq!(get(&conn, open.id).unwrap().unwrap().state, ExchangeState::Stopped);
    assert_eq!(get(&conn, elsewhere.id).unwrap().unwrap().state, ExchangeState::Open);
    // Through the index of the open exchanges, whatever the planner would
    // make of the thread's own index: the rows the lookup visits are the
    // open exchanges', not the 200 the thread had.
    let sql = open_in_thread_sql("");
    let mut stmt = conn.prepare(&sql).unwrap();
    let ids: Vec<i64> = stmt.query_map(["t1"], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(ids.len(), 1);
    let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
    assert!(steps < 100, "{steps} virtual machine steps for 2 open exchanges");
    let plan: String = conn.query_row(&format!("EXPLAIN QUERY PLAN {sql}"), ["t1"], |r| r.get::<_, String>(3)).unwrap();
    assert!(plan.contains("exchanges_open"), "{plan}");
}

#[test]
fn one_message_begins_one_exchange_of_a_kind() {
    let conn = db();
    council(&conn, 1, &["claude"]);
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
    assert!(begin(&conn, 11, &again).is_err());
}

#[test]
fn a_run_takes_its_step_as_it_is_recorded_and_a_second_one_is_refused_whole() {
    let conn = db();
    let out = &mut crate::db::Outbox::default();
    let x = council(&conn, 1, &["claude"]);
    let s = the_step(&conn, x.id, &key(1, "claude", Purpose::Answer, 0));
    crate::db::sqlite::runs::insert(&conn, 21, &run_of("r-1", "claude"), Some(s.id), out).unwrap();
    let refused = crate::db::sqlite::runs::insert(&conn, 22, &run_of("r-2", "claude"), Some(s.id), out);
    assert!(matches!(refused, Err(DbError::StepTaken(id)) if id == s.id), "{refused:?}");
    let rows: i64 = conn.query_row("SELECT count(*) FROM runs WHERE id = 'r-2'", [], |r| r.get(0)).unwrap();
    assert_eq!(rows, 0, "the refused run left no row");
}

#[test]
fn recovery_makes_a_cut_step_pending_with_its_interrupted_message_to_replace() {
    let conn = db();
    let out = &mut crate::db::Outbox::default();
    let king = crate::db::messages::NewMessage::new("t1", "king", vec!["all".into()], MessageKind::King, "Q".into());
    crate::db::sqlite::messages::append(&conn, 5, king, out).unwrap();
    let x = council(&conn, 1, &["claude"]);
    let k = key(1, "claude", Purpose::Answer, 0);
    let s = the_step(&conn, x.id, &k);
    crate::db::sqlite::runs::insert(&conn, 21, &run_of("r-1", "claude"), Some(s.id), out).unwrap();
    crate::db::sqlite::runs::append_partial(&conn, "r-1", "half an ans").unwrap();
    assert_eq!(crate::db::sqlite::runs::recover(&conn, 30, out).unwrap(), 1);
    let s = the_step(&conn, x.id, &k);
    let (kind, body): (String, String) = conn
        .query_row(
            "SELECT kind, body FROM messages WHERE thread_id = 't1' AND seq = ?1",
            [s.replaces_seq.unwrap() as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (s.state, s.attempts, kind.as_str(), body.as_str()),
        (StepState::Pending, 1, "interrupted", "half an ans")
    );
    // Its next run answers, once.
    crate::db::sqlite::runs::insert(&conn, 40, &run_of("r-2", "claude"), Some(s.id), out).unwrap();
    let s = the_step(&conn, x.id, &k);
    assert_eq!((s.state, s.attempts, s.run_id.as_deref()), (StepState::Running, 2, Some("r-2")));
}
