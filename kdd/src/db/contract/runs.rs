//! A run recorded as it is about to start ([`RunStart`]), alike on every
//! engine: its row, its journal step, its session and its member's inbox
//! items given, all or nothing.

use kd_proto::types::{InboxStatus, RunInfo, SessionStatus};

use super::{NewThread, engines, said, thread};
use crate::db::events::EventFilter;
use crate::db::exchanges::{Kind, NewExchange, StepKey};
use crate::db::inbox::Query;
use crate::db::outage::Again;
use crate::db::pg::compose::tests::routing;
use crate::db::runs::{RunStart, Spawned, TakeSession};
use crate::db::sessions::NewSession;
use crate::db::{Db, DbError, fixtures};

/// Run `id` of codex answering the King's message 1 on `t1`.
fn codex_run(id: &str) -> RunInfo {
    RunInfo { reply_to: Some(1), round: Some(1), exchange: Some(1), ..fixtures::run_of(id, "codex") }
}

fn new_session(run: &str) -> TakeSession {
    TakeSession::New(NewSession {
        thread: "t1".into(),
        agent: "codex".into(),
        backend_session_id: None,
        holder: Some(format!("run {run}")),
        pid: None,
        metadata: serde_json::json!({"context": "resume"}),
    })
}

/// codex's inbox items of `t1` in `status`.
async fn inbox(db: &Db, status: InboxStatus) -> Vec<u64> {
    let q = Query {
        member: "codex".into(),
        thread: Some("t1".into()),
        types: vec![],
        status: Some(status),
        also_read: true,
        limit: 100,
        mark_read: false,
    };
    db.inbox(q).await.unwrap().iter().map(|i| i.seq).collect()
}

async fn run_starts(db: &Db) -> Vec<String> {
    let filter = EventFilter { kind: Some("run.start".into()), limit: 100, ..Default::default() };
    db.events(filter).await.unwrap().into_iter().filter_map(|e| e.correlation_id).collect()
}

/// The King's question on `t1` asked of codex.
fn council() -> NewExchange {
    NewExchange {
        path: None,
        thread: "t1".into(),
        seq: 0,
        kind: Kind::Council,
        correlation_id: None,
        plan: serde_json::json!({"rounds": 1}),
        first_steps: vec![StepKey::answer(1, "codex")],
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_recorded_with_its_session_and_inbox_all_or_nothing() {
    let council = council();
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        let asked = db.ask(None, vec![said("t1", "the question".into())], council.clone()).await.unwrap();
        let step = asked.steps[0].id;
        // claude's message to codex waits in codex's inbox (seq 2).
        db.route(routing("t1", false)).await.unwrap();
        assert_eq!(inbox(db, InboxStatus::Pending).await, [2], "{n}");
        let mut told = e.hub.subscribe("t1");

        // The run takes its step, a session, and what its prompt gives.
        let start = |id: &str, step, session, needs_session, given| RunStart {
            run: codex_run(id),
            step,
            recorded: false,
            session,
            needs_session,
            given,
            spawned: None,
            again: Again::First,
        };
        let session =
            db.record_run(start("r-1", Some(step), new_session("r-1"), true, Some(2))).await.unwrap().unwrap();
        assert_eq!((session.status, session.holder.as_deref()), (SessionStatus::Active, Some("run r-1")), "{n}");
        assert_eq!(run_starts(db).await, ["r-1"], "{n}");
        assert!(db.orphan_runs().await.unwrap().iter().any(|o| o.id == "r-1"), "{n}: the run's row");
        assert_eq!(inbox(db, InboxStatus::Processed).await, [2], "{n}: given");
        let event = told.try_recv().expect("told after the commit");
        assert!(format!("{event:?}").contains("run_waiting"), "{n}: {event:?}");

        // Another run for the same step: refused, and nothing of it written
        // (no session taken, no row).
        let again = db.record_run(start("r-2", Some(step), new_session("r-2"), true, Some(2))).await;
        assert!(matches!(again, Err(DbError::StepTaken(_))), "{n}: {again:?}");
        assert_eq!(run_starts(db).await, ["r-1"], "{n}");
        let sessions = db.sessions(Some("t1".into()), Some("codex".into()), None).await.unwrap();
        assert_eq!(sessions.len(), 1, "{n}: {sessions:?}");

        // A run that needs the session another holds (resume mode): recorded
        // all the same, the refusal too, and it gives nothing of the inbox.
        db.route(routing("t1", false)).await.unwrap();
        let resume = |run: &str| TakeSession::Resume { id: session.id.clone(), holder: Some(format!("run {run}")) };
        let refused = db.record_run(start("r-3", None, resume("r-3"), true, Some(3))).await.unwrap();
        assert!(
            matches!(refused, Err(DbError::SessionActive { ref session, .. }) if *session == sessions[0].id),
            "{n}: {refused:?}"
        );
        assert_eq!(run_starts(db).await, ["r-1", "r-3"], "{n}");
        assert_eq!(inbox(db, InboxStatus::Pending).await, [3], "{n}: not given");

        // One that can do without it (history mode) runs without it, and
        // what its prompt gives is given; a session gone is no error to it.
        let refused = db.record_run(start("r-4", None, resume("r-4"), false, Some(3))).await.unwrap();
        assert!(matches!(refused, Err(DbError::SessionActive { .. })), "{n}: {refused:?}");
        assert_eq!(inbox(db, InboxStatus::Pending).await, Vec::<u64>::new(), "{n}: given");
        let gone = TakeSession::Resume { id: "s-gone".into(), holder: None };
        let without = db.record_run(start("r-5", None, gone.clone(), false, None)).await.unwrap();
        assert!(matches!(without, Err(DbError::NotFound(_))), "{n}: {without:?}");
        assert!(matches!(db.record_run(start("r-6", None, gone, true, None)).await, Err(DbError::NotFound(_))), "{n}");
        assert_eq!(run_starts(db).await, ["r-1", "r-3", "r-4", "r-5"], "{n}: r-6 not recorded");

        // A run recorded before (a work run): only its session here.
        let mut work = start("r-5", None, new_session("r-5"), false, None);
        work.recorded = true;
        assert!(db.record_run(work).await.unwrap().is_err(), "{n}: r-1 holds codex's session");
        assert_eq!(run_starts(db).await, ["r-1", "r-3", "r-4", "r-5"], "{n}: not recorded twice");
    }
}

/// A run whose agent was spawned before it was recorded (a CLI agent on a
/// registry no other node shares): its row, session and inbox, and its
/// start — streaming, its pid on the run and on the session it holds, the
/// waiting then the started event — in the one write.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_recorded_with_its_agent_spawned_is_streaming_in_the_one_write() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        db.ask(None, vec![said("t1", "the question".into())], council()).await.unwrap();
        db.route(routing("t1", false)).await.unwrap();
        let mut told = e.hub.subscribe("t1");
        // A live process: a session held by a dead one is free.
        let pid = std::process::id();
        let start = RunStart {
            run: codex_run("r-1"),
            step: None,
            recorded: false,
            session: new_session("r-1"),
            needs_session: false,
            given: Some(2),
            spawned: Some(Spawned { pid, start: Some(77) }),
            again: Again::First,
        };
        let session = db.record_run(start).await.unwrap().unwrap();
        let orphan = db.orphan_runs().await.unwrap().into_iter().find(|o| o.id == "r-1").expect("the run's row");
        assert_eq!((orphan.pid, orphan.pid_start), (Some(pid), Some(77)), "{n}");
        let held = db.sessions(Some("t1".into()), Some("codex".into()), None).await.unwrap();
        assert_eq!(held.iter().map(|s| (s.id.clone(), s.pid)).collect::<Vec<_>>(), [(session.id, Some(pid))], "{n}");
        assert_eq!(inbox(db, InboxStatus::Processed).await, [2], "{n}: given");
        let told: Vec<String> = std::iter::from_fn(|| told.try_recv().ok()).map(|p| p.json.get().to_string()).collect();
        assert!(told.len() == 2 && told[0].contains("run_waiting") && told[1].contains("run_started"), "{n}: {told:?}");
    }
}

/// A run's start tried again after a failure that came after its commit
/// (PostgreSQL's connection cut as it committed, the write kept through the
/// outage and tried again, `db::outage::Again`): the second try finds what
/// the first wrote and answers it — the same session, the run's own step
/// not refused to it, no second row, session or event — and tells
/// subscribers what the first could not. A first try of another run for
/// the step is still refused; a second try of a run whose first was not
/// written writes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_start_tried_again_after_its_commit_answers_what_the_first_try_wrote() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        let asked = db.ask(None, vec![said("t1", "the question".into())], council()).await.unwrap();
        let step = asked.steps[0].id;
        db.route(routing("t1", false)).await.unwrap();
        let pid = std::process::id();
        let start = |id: &str, again| RunStart {
            run: codex_run(id),
            step: Some(step),
            recorded: false,
            session: new_session(id),
            needs_session: false,
            given: Some(2),
            spawned: Some(Spawned { pid, start: Some(77) }),
            again,
        };
        let first = db.record_run(start("r-1", Again::First)).await.unwrap().unwrap();
        let mut told = e.hub.subscribe("t1");
        let second = db.record_run(start("r-1", Again::Retry)).await;
        let second = second.unwrap_or_else(|e| panic!("{n}: the second try: {e}"));
        assert_eq!(second.map(|s| s.id).ok(), Some(first.id.clone()), "{n}: the session the first try took");
        assert_eq!(run_starts(db).await, ["r-1"], "{n}: one start recorded");
        let runs: Vec<_> = db.orphan_runs().await.unwrap().into_iter().map(|o| (o.id, o.pid)).collect();
        assert_eq!(runs, [("r-1".to_string(), Some(pid))], "{n}: one row, streaming");
        let held = db.sessions(Some("t1".into()), Some("codex".into()), None).await.unwrap();
        assert_eq!(held.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [first.id.as_str()], "{n}: one session");
        assert_eq!(inbox(db, InboxStatus::Processed).await, [2], "{n}: given once");
        let told: Vec<String> = std::iter::from_fn(|| told.try_recv().ok()).map(|p| p.json.get().to_string()).collect();
        assert!(told.len() == 2 && told[0].contains("run_waiting") && told[1].contains("run_started"), "{n}: {told:?}");

        // Another run's first try for the step: refused as before.
        let other = db.record_run(start("r-2", Again::First)).await;
        assert!(matches!(other, Err(DbError::StepTaken(_))), "{n}: {other:?}");
        // The run recorded alone, tried again: its first try's row.
        db.insert_run(codex_run("r-1"), Some(step), Again::Retry).await.unwrap();
        assert_eq!(run_starts(db).await, ["r-1"], "{n}: still one");

        // A second try whose first was not written: written now.
        let fresh = RunStart { step: None, spawned: None, ..start("r-3", Again::Retry) };
        let session = db.record_run(fresh).await.unwrap();
        assert!(matches!(session, Err(DbError::SessionActive { .. })), "{n}: r-1 holds codex's session: {session:?}");
        assert_eq!(run_starts(db).await, ["r-1", "r-3"], "{n}");
        db.insert_run(codex_run("r-4"), None, Again::Retry).await.unwrap();
        assert_eq!(run_starts(db).await, ["r-1", "r-3", "r-4"], "{n}");
    }
}

/// A run's end tried again after a failure that came after its commit (the
/// answer of PostgreSQL's `COMMIT` lost, the write kept through the outage
/// and tried again): the second try finds the message its first try wrote
/// and answers it — no second message or event, its run not taken for one
/// another ended — and tells subscribers the message and the run's end the
/// first try could not. An end of the run that is not its own (a
/// recovery's, even of the same text) is still refused; an end tried again
/// whose first try was not written writes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_end_tried_again_after_its_commit_answers_the_message_its_first_try_wrote() {
    use kd_proto::types::{RunMeta, RunStatus};

    use crate::db::runs::Finish;
    use crate::db::sessions::SessionEnd;

    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        let asked = db.ask(None, vec![said("t1", "the question".into())], council()).await.unwrap();
        let start = |id: &str, step| RunStart {
            run: codex_run(id),
            step,
            recorded: false,
            session: new_session(id),
            needs_session: false,
            given: None,
            spawned: None,
            again: Again::First,
        };
        let session = db.record_run(start("r-1", Some(asked.steps[0].id))).await.unwrap().unwrap();
        let end = |id: &str, session: Option<String>| Finish {
            status: RunStatus::Done,
            body: format!("the answer of {id}"),
            error: None,
            meta: RunMeta { run_id: Some(id.into()), duration_ms: Some(40), ..RunMeta::default() },
            session: session.map(|id| SessionEnd {
                id,
                status: SessionStatus::Idle,
                backend_session_id: None,
                seen_seq: None,
            }),
            to: vec![],
        };
        let first = db.finish_run(codex_run("r-1"), end("r-1", Some(session.id.clone())), Again::First).await.unwrap();
        let mut told = e.hub.subscribe("t1");
        let second = db.finish_run(codex_run("r-1"), end("r-1", Some(session.id)), Again::Retry).await;
        let second = second.unwrap_or_else(|e| panic!("{n}: the second try: {e}"));
        assert_eq!(second, first, "{n}: the message the first try wrote");
        let told: Vec<String> = std::iter::from_fn(|| told.try_recv().ok()).map(|p| p.json.get().to_string()).collect();
        assert!(
            told.len() == 2 && told[0].contains(r#""type":"message""#) && told[0].contains("the answer of r-1"),
            "{n}: {told:?}"
        );
        assert!(
            told[1].contains("run_finished") && told[1].contains(&format!(r#""seq":{}"#, first.seq)),
            "{n}: {told:?}"
        );
        let answers = db.messages("t1".into(), crate::db::messages::Page::all_after(first.seq - 1)).await.unwrap();
        assert_eq!(answers.len(), 1, "{n}: one answer");
        let filter = EventFilter { kind: Some("run.finish".into()), limit: 100, ..Default::default() };
        assert_eq!(db.events(filter).await.unwrap().len(), 1, "{n}: one end recorded");

        // An end that is not the one written (a recovery's, without a time):
        // refused, as any end of a run ended.
        let other = Finish { meta: RunMeta { run_id: Some("r-1".into()), ..RunMeta::default() }, ..end("r-1", None) };
        let refused = db.finish_run(codex_run("r-1"), other, Again::Retry).await;
        assert!(matches!(refused, Err(DbError::RunEnded { .. })), "{n}: {refused:?}");
        let differs = Finish { body: "another answer".into(), ..end("r-1", None) };
        let refused = db.finish_run(codex_run("r-1"), differs, Again::Retry).await;
        assert!(matches!(refused, Err(DbError::RunEnded { .. })), "{n}: {refused:?}");

        // An end tried again whose first try was not written: written now.
        db.insert_run(codex_run("r-2"), None, Again::First).await.unwrap();
        let written = db.finish_run(codex_run("r-2"), end("r-2", None), Again::Retry).await.unwrap();
        assert_eq!((written.seq, written.body.as_str()), (first.seq + 1, "the answer of r-2"), "{n}");

        // A run a recovery ended, with all the text the run had said: its
        // end tried again is refused — the recovery's end stands.
        db.insert_run(codex_run("r-3"), None, Again::First).await.unwrap();
        db.append_run_partial("r-3".into(), "the answer of r-3".into()).await.unwrap();
        assert_eq!(db.recover_runs().await.unwrap(), 1, "{n}");
        let refused = db.finish_run(codex_run("r-3"), end("r-3", None), Again::Retry).await;
        assert!(matches!(refused, Err(DbError::RunEnded { .. })), "{n}: {refused:?}");
    }
}

/// A run's agent start tried again after its commit (the answer lost): the
/// second try finds the start written — the run streaming with that pid —
/// and tells it without recording it a second time.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_agent_start_tried_again_after_its_commit_is_told_not_recorded_twice() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        db.insert_run(codex_run("r-1"), None, Again::First).await.unwrap();
        let pid = std::process::id();
        db.run_started(codex_run("r-1"), pid, Some(77), None, Again::First).await.unwrap();
        let mut told = e.hub.subscribe("t1");
        db.run_started(codex_run("r-1"), pid, Some(77), None, Again::Retry).await.unwrap();
        let told: Vec<String> = std::iter::from_fn(|| told.try_recv().ok()).map(|p| p.json.get().to_string()).collect();
        assert!(told.len() == 1 && told[0].contains("run_started"), "{n}: {told:?}");
        let filter = EventFilter { kind: Some("run.spawn".into()), limit: 100, ..Default::default() };
        assert_eq!(db.events(filter).await.unwrap().len(), 1, "{n}: one start recorded");
    }
}
