//! Agent runs on PostgreSQL (see [`crate::db::runs`]): their rows, the
//! partial text saved while they stream, their end (message, cost, acks,
//! run row, journal step, session and events in one transaction), and the
//! recovery of runs a dead daemon left in flight.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Message, Purpose, RunInfo, RunMeta, RunStatus, SessionStatus, ThreadEvent};
use serde_json::json;

use super::exchanges;
use super::{ME, Pg, acks, cost, events, messages, sessions};
use crate::db::events::NewEvent;
use crate::db::exchanges::{RunEnd, StepId};
use crate::db::runs::{Finish, Orphan, refuse_ended};
use crate::db::sessions::SessionEnd;
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Records a run that was accepted; subscribers hear `run_waiting`. A run
/// taking a journal step takes it here, in the same transaction, only
/// while it is pending (a compare-and-set: of two runs, one takes it):
/// else it is refused ([`DbError::StepTaken`]) and nothing is written.
pub(crate) async fn insert(
    c: &impl GenericClient,
    now: i64,
    run: &RunInfo,
    step: Option<StepId>,
    out: &mut Outbox,
) -> DbResult<()> {
    if let Some(step) = step
        && !exchanges::step_started(c, now, step, &run.id, run.reply_to).await?
    {
        return Err(DbError::StepTaken(step));
    }
    let st = c
        .prepare_cached(
            "INSERT INTO runs (id, thread_id, member, backend, status, reply_to, round, started_at, exchange, replaces, \
             ordinal, purpose, step_id) VALUES ($1, $2, $3, $4, 'waiting', $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .await?;
    c.execute(
        &st,
        &[
            &run.id,
            &run.thread,
            &run.member,
            &run.backend,
            &run.reply_to.map(|r| r as i64),
            &run.round.map(i64::from),
            &now,
            &run.exchange.map(|r| r as i64),
            &run.replaces.map(|r| r as i64),
            &(run.ordinal as i64),
            &run.purpose.map(Purpose::as_str),
            &step,
        ],
    )
    .await?;
    events::record(
        c,
        now,
        &NewEvent {
            kind: "run.start",
            thread: Some(&run.thread),
            agent: Some(&run.member),
            correlation_id: Some(&run.id),
            data: json!({"run": run.id, "backend": run.backend, "reply_to": run.reply_to, "round": run.round,
                         "exchange": run.exchange, "replaces": run.replaces}),
            ..Default::default()
        },
    )
    .await?;
    out.publish(&run.thread, ThreadEvent::RunWaiting { run: run.clone() });
    Ok(())
}

/// Records the agent's pid (and start time) the moment it is spawned.
pub(crate) async fn started(
    c: &impl GenericClient,
    now: i64,
    run: &RunInfo,
    pid: u32,
    pid_start: Option<u64>,
    session: Option<&str>,
    out: &mut Outbox,
) -> DbResult<()> {
    let st = c
        .prepare_cached("UPDATE runs SET status = 'streaming', pid = $2, pid_start = $3, session_id = $4 WHERE id = $1")
        .await?;
    if let Err(e) = c.execute(&st, &[&run.id, &i64::from(pid), &pid_start.map(|s| s as i64), &session]).await {
        if super::unique_violation(&e) != Some("runs_one_streaming") {
            return Err(e.into());
        }
        // Another run of the member answers on this thread (another
        // node's: this one queues its own). The caller names the node.
        return Err(DbError::MemberBusy { member: run.member.clone(), thread: run.thread.clone(), node: None });
    }
    if let Some(session) = session {
        // The session is held by this process now.
        let st = c.prepare_cached("UPDATE sessions SET pid = $2 WHERE id = $1 AND status = 'active'").await?;
        c.execute(&st, &[&session, &i64::from(pid)]).await?;
    }
    events::record(
        c,
        now,
        &NewEvent {
            kind: "run.spawn",
            thread: Some(&run.thread),
            agent: Some(&run.member),
            session,
            correlation_id: Some(&run.id),
            data: json!({"run": run.id, "pid": pid}),
            ..Default::default()
        },
    )
    .await?;
    out.publish(&run.thread, ThreadEvent::RunStarted { run: run.id.clone(), member: run.member.clone(), pid });
    Ok(())
}

/// Saves what the run streamed since its last save (crash insurance):
/// appended, so that a long answer costs its length, not its length times
/// the number of saves.
pub(crate) async fn append_partial(c: &impl GenericClient, id: &str, text: &str) -> DbResult<()> {
    let st = c.prepare_cached("INSERT INTO run_partials (run_id, text) VALUES ($1, $2)").await?;
    c.execute(&st, &[&id, &text]).await?;
    Ok(())
}

/// The text a run saved: what a previous kdd kept whole in `runs.partial`,
/// then the appended pieces in order.
async fn saved_partial(c: &impl GenericClient, id: &str, whole: String) -> DbResult<String> {
    let st = c.prepare_cached("SELECT text FROM run_partials WHERE run_id = $1 ORDER BY id").await?;
    let mut text = whole;
    for row in c.query(&st, &[&id]).await? {
        text.push_str(row.try_get::<_, &str>(0)?);
    }
    Ok(text)
}

/// Writes the run's message, closes its row and session, and tells
/// subscribers — all in one transaction, so a run is never half-finished.
/// A run that already ended (its end written by another, such as a
/// recovery) writes nothing ([`refuse_ended`]). Its row is locked first,
/// so of two ends at once the second finds the first's.
pub(crate) async fn finish(
    c: &impl GenericClient,
    now: i64,
    run: &RunInfo,
    mut f: Finish,
    out: &mut Outbox,
) -> DbResult<Message> {
    let st = c.prepare_cached("SELECT status FROM runs WHERE id = $1 FOR NO KEY UPDATE").await?;
    if let Some(row) = c.query_opt(&st, &[&run.id]).await? {
        refuse_ended(&run.id, row.try_get(0)?)?;
    }
    let message = messages::append(c, now, f.message(run), out).await?;
    cost::record(c, run, &message).await?;
    if f.status == RunStatus::Done {
        // An answer given the broadcast acknowledges it.
        let acked = acks::settle(c, now, &run.thread, &run.member, run.reply_to.unwrap_or(0), None, "answer").await?;
        acks::progress(c, &run.thread, &acked, out).await?;
    }
    let st = c
        .prepare_cached(
            "UPDATE runs SET status = $2, ended_at = $3, message_seq = $4, error = $5, partial = '' WHERE id = $1",
        )
        .await?;
    c.execute(&st, &[&run.id, &f.status.as_str(), &now, &(message.seq as i64), &f.error]).await?;
    let st = c.prepare_cached("DELETE FROM run_partials WHERE run_id = $1").await?;
    c.execute(&st, &[&run.id]).await?;
    // The run's journal step ends with it, in the same transaction as its
    // message: answered once, or pending again after an interruption.
    let seq = message.seq;
    let end = match f.status {
        RunStatus::Done => RunEnd::Done { seq },
        RunStatus::Interrupted => RunEnd::Interrupted { seq },
        RunStatus::Cancelled => RunEnd::Cancelled { reason: f.error.clone().unwrap_or_else(|| "cancelled".into()) },
        _ => RunEnd::Failed { seq, reason: f.error.clone().unwrap_or_else(|| f.status.as_str().into()) },
    };
    exchanges::step_finished(c, now, &run.id, &end).await?;
    if let Some(mut end) = f.session.clone() {
        end.backend_session_id = end.backend_session_id.or_else(|| f.meta.backend_session_id.clone());
        sessions::end(c, now, &end).await?;
    }
    let kind = match f.status {
        RunStatus::Done => "run.finish",
        RunStatus::TimedOut => "run.timeout",
        RunStatus::Cancelled => "run.cancel",
        RunStatus::Interrupted => "run.interrupted",
        _ => "run.error",
    };
    events::record(
        c,
        now,
        &NewEvent {
            kind,
            thread: Some(&run.thread),
            agent: Some(&run.member),
            correlation_id: Some(&run.id),
            data: json!({"run": run.id, "seq": message.seq, "error": f.error, "duration_ms": f.meta.duration_ms,
                         "exit_status": f.meta.exit_status}),
            ..Default::default()
        },
    )
    .await?;
    let (id, member, seq) = (run.id.clone(), run.member.clone(), message.seq);
    out.publish(
        &run.thread,
        match f.status {
            RunStatus::Done => ThreadEvent::RunFinished { run: id, member, seq },
            RunStatus::Cancelled | RunStatus::Interrupted => {
                ThreadEvent::RunCancelled { run: id, member, seq, interrupted: f.status == RunStatus::Interrupted }
            }
            status => ThreadEvent::RunError {
                run: id,
                member,
                error: f.error.unwrap_or_default(),
                timed_out: status == RunStatus::TimedOut,
                seq,
            },
        },
    );
    Ok(message)
}

/// The runs of `node` (this connection's node when `None`) still `waiting`
/// or `streaming` in the registry (another node's runs in flight are its
/// own, whatever becomes of this one).
pub(crate) async fn in_flight(c: &impl GenericClient, node: Option<&str>) -> DbResult<Vec<Orphan>> {
    let st = c
        .prepare_cached(&format!(
            "SELECT id, thread_id, member, pid, pid_start FROM runs \
             WHERE (status = 'waiting' OR status = 'streaming') AND node_id = coalesce($1, {ME}) \
             ORDER BY started_at, ordinal, id"
        ))
        .await?;
    c.query(&st, &[&node])
        .await?
        .iter()
        .map(|r| {
            Ok(Orphan {
                id: r.try_get(0)?,
                thread: r.try_get(1)?,
                member: r.try_get(2)?,
                pid: r.try_get::<_, Option<i64>>(3)?.map(|p| p as u32),
                pid_start: r.try_get::<_, Option<i64>>(4)?.map(|v| v as u64),
            })
        })
        .collect()
}

/// Records every run of `node` (this one when `None`) left in flight as
/// interrupted, saying `why`: an `interrupted` message with the text saved
/// so far, the run closed, its session released. Returns how many there
/// were.
pub(crate) async fn recover(
    c: &impl GenericClient,
    now: i64,
    node: Option<&str>,
    why: &str,
    out: &mut Outbox,
) -> DbResult<usize> {
    let orphans = in_flight(c, node).await?;
    let st = c
        .prepare_cached(
            "SELECT backend, reply_to, round, partial, session_id, exchange, replaces, ordinal, purpose \
             FROM runs WHERE id = $1",
        )
        .await?;
    for o in &orphans {
        let r = c.query_one(&st, &[&o.id]).await?;
        let backend: String = r.try_get(0)?;
        let reply_to: Option<i64> = r.try_get(1)?;
        let round: Option<i64> = r.try_get(2)?;
        let partial: String = r.try_get(3)?;
        let session: Option<String> = r.try_get(4)?;
        let exchange: Option<i64> = r.try_get(5)?;
        let replaces: Option<i64> = r.try_get(6)?;
        let ordinal: Option<i64> = r.try_get(7)?;
        let purpose: Option<String> = r.try_get(8)?;
        let partial = saved_partial(c, &o.id, partial).await?;
        let ordinal = ordinal.map(|o| o as u64);
        let info = RunInfo {
            id: o.id.clone(),
            thread: o.thread.clone(),
            member: o.member.clone(),
            backend: backend.clone(),
            status: RunStatus::Interrupted,
            pid: o.pid,
            started_at_ms: now,
            chars: partial.chars().count() as u64,
            reply_to: reply_to.map(|r| r as u64),
            round: round.map(|r| r as u32),
            exchange: exchange.map(|r| r as u64),
            replaces: replaces.map(|r| r as u64),
            ordinal: ordinal.unwrap_or(0),
            purpose: purpose.as_deref().and_then(Purpose::parse),
            approval: None,
        };
        let body = if partial.is_empty() { "(interrupted before it said anything)".to_string() } else { partial };
        let session = match session {
            Some(id) if sessions::get(c, &id).await.is_ok_and(|s| s.status == SessionStatus::Active) => {
                Some(SessionEnd { id, status: SessionStatus::Idle, backend_session_id: None, seen_seq: None })
            }
            _ => None,
        };
        finish(
            c,
            now,
            &info,
            Finish {
                status: RunStatus::Interrupted,
                body,
                error: Some(why.to_string()),
                meta: RunMeta { run_id: Some(o.id.clone()), backend: Some(backend), ordinal, ..RunMeta::default() },
                session,
                to: vec![],
            },
            out,
        )
        .await?;
    }
    Ok(orphans.len())
}

impl Pg {
    pub async fn insert_run(&self, run: RunInfo, step: Option<StepId>) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        insert(&tx, now_ms(), &run, step, &mut out).await?;
        self.commit(tx, out).await
    }

    pub async fn run_started(
        &self,
        run: RunInfo,
        pid: u32,
        pid_start: Option<u64>,
        session: Option<String>,
    ) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        match started(&tx, now_ms(), &run, pid, pid_start, session.as_deref(), &mut out).await {
            Ok(()) => self.commit(tx, out).await,
            Err(DbError::MemberBusy { member, thread, .. }) => {
                drop(tx);
                let node = self
                    .conn()
                    .await?
                    .query_opt(
                        "SELECT node_id FROM runs WHERE thread_id = $1 AND member = $2 AND status = 'streaming' LIMIT 1",
                        &[&thread, &member],
                    )
                    .await?
                    .map(|r| r.get(0));
                Err(DbError::MemberBusy { member, thread, node })
            }
            Err(e) => Err(e),
        }
    }

    pub async fn append_run_partial(&self, id: String, text: String) -> DbResult<()> {
        // One statement: a transaction of its own.
        append_partial(&self.conn().await?, &id, &text).await
    }

    pub async fn finish_run(&self, run: RunInfo, f: Finish) -> DbResult<Message> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let message = finish(&tx, now_ms(), &run, f, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(message)
    }

    /// The backend's own session id of a run, as soon as it is known.
    pub async fn run_session_seen(&self, run: String, backend: String) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        exchanges::step_session(&tx, &run, &backend).await?;
        self.commit(tx, Outbox::default()).await
    }

    pub async fn orphan_runs(&self) -> DbResult<Vec<Orphan>> {
        in_flight(&self.conn().await?, None).await
    }

    pub async fn recover_runs(&self) -> DbResult<usize> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let n = recover(&tx, now_ms(), None, crate::db::runs::STOPPED_IN_FLIGHT, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::MessageKind;
    use serde_json::json;

    use super::*;
    use crate::db::exchanges::{Kind, NewExchange, Opened, StepKey};
    use crate::db::messages::NewMessage;
    use crate::db::pg::exchanges::tests::{db, pg_events, run_of, sqlite_events};

    const SESSION: &str = "INSERT INTO sessions (id, thread_id, agent, status, holder, pid, started_at, last_active_at) \
                           VALUES ('s-1', 't1', 'claude', 'active', 'claude', 7, 3, 3)";

    fn council() -> NewExchange {
        NewExchange {
            path: None,
            thread: "t1".into(),
            seq: 1,
            kind: Kind::Council,
            correlation_id: None,
            plan: json!({"rounds": 1}),
            first_steps: vec![StepKey::answer(1, "claude")],
        }
    }

    fn king() -> NewMessage {
        NewMessage::new("t1", "king", vec!["all".into()], MessageKind::King, "Q".into())
    }

    fn answered() -> Finish {
        Finish {
            status: RunStatus::Done,
            body: "yes".into(),
            error: None,
            meta: RunMeta {
                backend_session_id: Some("bs-1".into()),
                cost_usd: Some(0.5),
                usage: Some(json!({"input_tokens": 10, "output_tokens": 5})),
                ..RunMeta::default()
            },
            session: Some(SessionEnd {
                id: "s-1".into(),
                status: SessionStatus::Idle,
                backend_session_id: None,
                seen_seq: Some(1),
            }),
            to: vec![],
        }
    }

    /// What a script left: the events published, the message written, the
    /// event log, and the rows of the run, its session, step and exchange.
    type Left = (String, String, Vec<crate::db::pg::exchanges::tests::EventRow>, Vec<String>);

    fn sqlite_script(f: Finish) -> Left {
        use crate::db::{acks as s_acks, exchanges as s_x, messages as s_messages, runs as s_runs};
        let conn = crate::db::schema::in_memory_with_thread("t1");
        let mut out = Outbox::default();
        s_messages::append(&conn, 5, king(), &mut out).unwrap();
        s_acks::owe(&conn, "b-1", "t1", 1, &["claude".to_string()]).unwrap();
        conn.execute(SESSION, []).unwrap();
        let x = s_x::begin(&conn, 10, &council()).unwrap();
        let Opened::Step(s) = s_x::open_step(&conn, 11, x.id, &StepKey::answer(1, "claude")).unwrap() else {
            panic!("open")
        };
        s_x::plan_done(&conn, 12, x.id, None).unwrap();
        let run = run_of("r-1", "claude");
        s_runs::insert(&conn, 21, &run, Some(s.id), &mut out).unwrap();
        s_runs::started(&conn, 22, &run, 42, Some(9), Some("s-1"), &mut out).unwrap();
        s_runs::append_partial(&conn, "r-1", "ye").unwrap();
        let m = s_runs::finish(&conn, 30, &run, f, &mut out).unwrap();
        let mut rows = vec![];
        for sql in ROWS {
            let mut stmt = conn.prepare(sql).unwrap();
            let n = stmt.column_count();
            let mut q = stmt.query([]).unwrap();
            while let Some(r) = q.next().unwrap() {
                let cols: Vec<String> = (0..n)
                    .map(|i| match r.get_ref(i).unwrap() {
                        rusqlite::types::ValueRef::Null => "NULL".into(),
                        rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                        rusqlite::types::ValueRef::Real(v) => v.to_string(),
                        rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                        rusqlite::types::ValueRef::Blob(_) => "BLOB".into(),
                    })
                    .collect();
                rows.push(cols.join("|"));
            }
        }
        (format!("{:?}", out.events), format!("{m:?}"), sqlite_events(&conn), rows)
    }

    /// The rows a finished run leaves, as text (the same in both engines).
    const ROWS: [&str; 8] = [
        "SELECT id, status, pid, pid_start, session_id, ended_at, message_seq, error, partial, step_id FROM runs",
        "SELECT count(*) FROM run_partials",
        "SELECT id, status, holder, pid, backend_session_id, seen_seq, last_active_at FROM sessions",
        "SELECT state, run_id, reply_to, message_seq, attempts, reason FROM exchange_steps",
        "SELECT state, plan_done, ended_at FROM exchanges",
        "SELECT broadcast, member, acked_at, how FROM acks",
        "SELECT thread_id, seq, member, exchange, round, day, at, cost_usd, input_tokens, output_tokens FROM costs",
        "SELECT thread_id, member, day, cost_usd, input_tokens, output_tokens, answers FROM cost_days",
    ];

    async fn pg_rows(c: &impl GenericClient) -> Vec<String> {
        let mut rows = vec![];
        for sql in ROWS {
            // Every column as text, as SQLite's values print.
            let sql = format!("SELECT ROW(t.*)::text FROM ({sql}) t");
            for r in c.query(&sql, &[]).await.unwrap() {
                let text: String = r.get(0);
                let inner = &text[1..text.len() - 1];
                let cols: Vec<String> = inner
                    .split(',')
                    .map(|v| if v.is_empty() { "NULL".to_string() } else { v.trim_matches('"').to_string() })
                    .collect();
                rows.push(cols.join("|"));
            }
        }
        rows
    }

    async fn pg_script(c: &impl GenericClient, f: Finish) -> DbResult<Left> {
        let mut out = Outbox::default();
        messages::append(c, 5, king(), &mut out).await?;
        acks::owe(c, "b-1", "t1", 1, &["claude".to_string()]).await?;
        c.execute(SESSION, &[]).await?;
        let x = exchanges::begin(c, 10, &council()).await?;
        let Opened::Step(s) = exchanges::open_step(c, 11, x.id, &StepKey::answer(1, "claude")).await? else {
            panic!("open")
        };
        exchanges::plan_done(c, 12, x.id, None).await?;
        let run = run_of("r-1", "claude");
        insert(c, 21, &run, Some(s.id), &mut out).await?;
        started(c, 22, &run, 42, Some(9), Some("s-1"), &mut out).await?;
        append_partial(c, "r-1", "ye").await?;
        let m = finish(c, 30, &run, f, &mut out).await?;
        Ok((format!("{:?}", out.events), format!("{m:?}"), pg_events(c).await, pg_rows(c).await))
    }

    #[tokio::test]
    async fn a_run_recorded_and_finished_leaves_what_sqlite_leaves_with_the_same_events_in_the_same_order() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let sqlite = sqlite_script(answered());
        let postgres = pg_script(&c, answered()).await.unwrap();
        assert_eq!(postgres.0, sqlite.0, "published");
        assert_eq!(postgres.1, sqlite.1, "the message");
        assert_eq!(postgres.2, sqlite.2, "the event log");
        assert_eq!(postgres.3, sqlite.3, "the rows");
        assert!(sqlite.0.contains("RunFinished") && sqlite.3.iter().any(|r| r.starts_with("done|")), "{sqlite:?}");
        assert!(sqlite.3.iter().any(|r| r.starts_with("t1|2|claude|1|1|")), "a cost row: {sqlite:?}");
        assert!(sqlite.3.iter().any(|r| r.starts_with("b-1|claude|30|answer")), "the ack settled: {sqlite:?}");
    }

    #[tokio::test]
    async fn a_run_that_fails_leaves_what_sqlite_leaves() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let failed = || Finish {
            status: RunStatus::TimedOut,
            error: Some("too slow".into()),
            to: vec!["codex".into()],
            ..answered()
        };
        let sqlite = sqlite_script(failed());
        let postgres = pg_script(&c, failed()).await.unwrap();
        assert_eq!(postgres, sqlite);
    }

    #[tokio::test]
    async fn a_member_streams_one_run_on_a_thread_at_a_time_whatever_node_starts_it() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let out = &mut Outbox::default();
        messages::append(&c, 5, king(), out).await.unwrap();
        let (first, second) = (run_of("r-1", "claude"), run_of("r-2", "claude"));
        insert(&c, 21, &first, None, out).await.unwrap();
        insert(&c, 22, &second, None, out).await.unwrap();
        pg.run_started(first.clone(), 100, None, None).await.unwrap();
        // Another node's queue knows nothing of the first run: the
        // registry refuses the second, naming where the first runs.
        match pg.run_started(second.clone(), 200, None, None).await {
            Err(e @ DbError::MemberBusy { .. }) => {
                assert_eq!(e.to_string(), "claude is already answering on thread t1 on node local")
            }
            other => panic!("refused: {other:?}"),
        }
        // Another member, or the next run once the first has ended, starts.
        let codex = run_of("r-3", "codex");
        insert(&c, 23, &codex, None, out).await.unwrap();
        pg.run_started(codex, 300, None, None).await.unwrap();
        pg.finish_run(first, Finish { session: None, ..answered() }).await.unwrap();
        pg.run_started(second, 200, None, None).await.unwrap();
    }

    #[tokio::test]
    async fn finishing_a_run_is_all_or_nothing() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let out = &mut Outbox::default();
        messages::append(&c, 5, king(), out).await.unwrap();
        let run = run_of("r-1", "claude");
        insert(&c, 21, &run, None, out).await.unwrap();
        // Its session is unknown: the end fails after its message was written.
        let f = Finish {
            session: Some(SessionEnd {
                id: "s-none".into(),
                status: SessionStatus::Idle,
                backend_session_id: None,
                seen_seq: None,
            }),
            ..answered()
        };
        let refused = pg.finish_run(run.clone(), f).await;
        assert!(matches!(refused, Err(DbError::NotFound(_))), "{refused:?}");
        let answers: i64 = c.query_one("SELECT count(*) FROM messages WHERE seq > 1", &[]).await.unwrap().get(0);
        let status: String = c.query_one("SELECT status FROM runs", &[]).await.unwrap().get(0);
        assert_eq!((answers, status.as_str()), (0, "waiting"));
        // Ended once, a run ends for good: a second end writes nothing.
        let f = Finish { session: None, ..answered() };
        let m = pg.finish_run(run.clone(), f.clone()).await.unwrap();
        assert_eq!(m.seq, 2);
        let again = pg.finish_run(run.clone(), f.clone()).await;
        assert!(matches!(again, Err(DbError::RunEnded { .. })), "{again:?}");
        // As SQLite refuses it.
        let conn = crate::db::schema::in_memory_with_thread("t1");
        let out = &mut Outbox::default();
        crate::db::messages::append(&conn, 5, king(), out).unwrap();
        crate::db::runs::insert(&conn, 21, &run, None, out).unwrap();
        crate::db::runs::finish(&conn, 30, &run, f.clone(), out).unwrap();
        let sqlite = crate::db::runs::finish(&conn, 31, &run, f, out);
        assert_eq!(format!("{sqlite:?}"), format!("{again:?}"));
        let answers: i64 = c.query_one("SELECT count(*) FROM messages WHERE seq > 1", &[]).await.unwrap().get(0);
        assert_eq!(answers, 1);
    }

    #[tokio::test]
    async fn recovery_interrupts_every_run_in_flight_and_releases_its_session() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        c.execute(SESSION, &[]).await.unwrap();
        let out = &mut Outbox::default();
        messages::append(&c, 5, king(), out).await.unwrap();
        for (id, member) in [("r-1", "claude"), ("r-2", "codex")] {
            insert(&c, 21, &run_of(id, member), None, out).await.unwrap();
        }
        started(&c, 22, &run_of("r-1", "claude"), 42, None, Some("s-1"), out).await.unwrap();
        append_partial(&c, "r-1", "half ").await.unwrap();
        append_partial(&c, "r-1", "an answer").await.unwrap();
        let orphans = pg.orphan_runs().await.unwrap();
        assert_eq!(
            orphans.iter().map(|o| (o.id.as_str(), o.pid)).collect::<Vec<_>>(),
            [("r-1", Some(42)), ("r-2", None)]
        );
        let mut rx = pg.hub.subscribe("t1");
        assert_eq!(pg.recover_runs().await.unwrap(), 2);
        assert!(pg.orphan_runs().await.unwrap().is_empty());
        let bodies: Vec<(String, String)> = c
            .query("SELECT sender, body FROM messages WHERE kind = 'interrupted' ORDER BY seq", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(
            bodies,
            [
                ("claude".to_string(), "half an answer".to_string()),
                ("codex".to_string(), "(interrupted before it said anything)".to_string())
            ]
        );
        let session: String = c.query_one("SELECT status FROM sessions", &[]).await.unwrap().get(0);
        assert_eq!(session, "idle");
        let mut cancelled = 0;
        while let Ok(e) = rx.try_recv() {
            if e.json.get().contains("\"interrupted\":true") {
                cancelled += 1;
            }
        }
        assert_eq!(cancelled, 2, "published after the commit");
    }
}
