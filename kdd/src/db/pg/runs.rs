//! Agent runs on PostgreSQL (see [`crate::db::runs`]): their rows, the
//! partial text saved while they stream, their end (message, cost, acks,
//! run row, journal step, session and events in one transaction), and the
//! recovery of runs a dead daemon left in flight.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Message, Purpose, RunInfo, RunStatus, Session, SessionStatus};

use super::exchanges;
use super::{ME, Pg, acks, cost, events, inbox, messages, sessions, still_open};
use crate::db::exchanges::StepId;
use crate::db::outage::Again;
use crate::db::runs::{
    Cut, Finish, Orphan, RunStart, Spawned, TakeSession, is_ended, refuse_ended, spawned, start_written, tell_started,
    tell_waiting, waiting,
};
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
    .await
    .map_err(|e| match super::unique_violation(&e) {
        // The run's row, not committed yet when this began: its own first
        // try, its `COMMIT` still on its way to the server (a start tried
        // again without a journal step to wait on, `Again`). An outage for
        // now: the next try finds it written.
        Some("runs_pkey") => DbError::Unavailable(format!("the run {} is still being written by a first try", run.id)),
        _ => e.into(),
    })?;
    events::record(c, now, &waiting(run)).await?;
    tell_waiting(run, out);
    Ok(())
}

/// Whether run `id` has its row.
async fn exists(c: &impl GenericClient, id: &str) -> DbResult<bool> {
    let st = c.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)").await?;
    Ok(c.query_one(&st, &[&id]).await?.try_get(0)?)
}

/// Waits until a first try of the run's start has ended, committed or
/// not: its connection cut, its `COMMIT` may still be on its way to the
/// server when the second try begins — which would then not see its row,
/// and find its journal step taken (by itself) once it commits. The first
/// try holds the step's row from its update to its end ([`still_open`]).
async fn first_try_ended(c: &impl GenericClient, step: Option<StepId>) -> DbResult<()> {
    if let Some(step) = step {
        let st = c.prepare_cached("SELECT 1 FROM exchange_steps WHERE id = $1 FOR UPDATE").await?;
        c.query_opt(&st, &[&step]).await.map_err(still_open)?;
    }
    Ok(())
}

/// The end of `run` its first try wrote, found by `f` tried again
/// ([`Finish::wrote`]): the run's row ended with its message. The first
/// try holds the row from its first statement: one whose `COMMIT` is still
/// on its way to the server is waited out.
async fn written_end(c: &impl GenericClient, run: &RunInfo, f: &Finish) -> DbResult<Option<Message>> {
    let st = c.prepare_cached("SELECT status, message_seq FROM runs WHERE id = $1 FOR NO KEY UPDATE").await?;
    let Some(row) = c.query_opt(&st, &[&run.id]).await.map_err(still_open)? else { return Ok(None) };
    let (status, seq): (&str, Option<i64>) = (row.try_get(0)?, row.try_get(1)?);
    let Some(seq) = seq.filter(|_| is_ended(status)) else { return Ok(None) };
    Ok(messages::one(c, &run.thread, seq as u64).await?.filter(|m| f.wrote(run, m)))
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
    events::record(c, now, &spawned(run, pid, session)).await?;
    tell_started(run, pid, out);
    Ok(())
}

/// Whether the start of `id`'s agent `pid` was written ([`start_written`]).
/// A first try whose `COMMIT` is still on its way holds the row: waited out.
async fn started_before(c: &impl GenericClient, id: &str, pid: u32) -> DbResult<bool> {
    let st = c.prepare_cached("SELECT status, pid FROM runs WHERE id = $1 FOR NO KEY UPDATE").await?;
    let Some(row) = c.query_opt(&st, &[&id]).await.map_err(still_open)? else { return Ok(false) };
    Ok(start_written(row.try_get(0)?, row.try_get(1)?, pid))
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
    let end = f.step_end(message.seq);
    exchanges::step_finished(c, now, &run.id, &end).await?;
    if let Some(end) = f.session_end() {
        sessions::end(c, now, &end).await?;
    }
    events::record(c, now, &f.event(run, message.seq)).await?;
    out.publish(&run.thread, f.told(run, message.seq));
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
        let cut = Cut {
            backend: r.try_get(0)?,
            reply_to: r.try_get(1)?,
            round: r.try_get::<_, Option<i64>>(2)?.map(|r| r as u32),
            session: r.try_get(4)?,
            exchange: r.try_get(5)?,
            replaces: r.try_get(6)?,
            ordinal: r.try_get(7)?,
            purpose: r.try_get(8)?,
        };
        let partial = saved_partial(c, &o.id, r.try_get(3)?).await?;
        let session = match cut.session.clone() {
            Some(id) if sessions::get(c, &id).await.is_ok_and(|s| s.status == SessionStatus::Active) => Some(id),
            _ => None,
        };
        let (info, f) = cut.interrupted(o, now, partial, why, session);
        finish(c, now, &info, f, out).await?;
    }
    Ok(orphans.len())
}

/// [`RunStart`]: the run recorded as [`insert`] records it, its session
/// taken, its inbox items given.
pub(crate) async fn record(
    c: &impl GenericClient,
    now: i64,
    start: RunStart,
    alive: sessions::Alive<'_>,
    out: &mut Outbox,
) -> DbResult<DbResult<Session>> {
    if start.again == Again::Retry {
        first_try_ended(c, start.step).await?;
        let held = start.own(sessions::active_for(c, &start.run.thread, &start.run.member).await?);
        if let Some(written) = start.written(exists(c, &start.run.id).await?, held) {
            start.tell_again(out);
            return Ok(written);
        }
    }
    let RunStart { run, step, recorded, session, needs_session, given, spawned, again: _ } = start;
    if !recorded {
        insert(c, now, &run, step, out).await?;
    }
    let taken = match session {
        TakeSession::New(s) => sessions::start(c, now, s, alive).await,
        TakeSession::Resume { id, holder } => sessions::resume(c, now, &id, holder.as_deref(), None, alive).await,
    };
    let session = RunStart::took(needs_session, taken)?;
    if let Some(upto) = given.filter(|_| RunStart::gives(needs_session, &session)) {
        inbox::given(c, now, &run.thread, &run.member, upto, &run.id).await?;
    }
    if let Some(Spawned { pid, start }) = spawned {
        started(c, now, &run, pid, start, session.as_ref().ok().map(|s| s.id.as_str()), out).await?;
    }
    Ok(session)
}

impl Pg {
    /// [`insert`]; tried `again`, a row of the run already there is its
    /// first try's ([`Again`]), told again.
    pub async fn insert_run(&self, run: RunInfo, step: Option<StepId>, again: Again) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        if again == Again::Retry {
            first_try_ended(&tx, step).await?;
        }
        match again == Again::Retry && exists(&tx, &run.id).await? {
            true => tell_waiting(&run, &mut out),
            false => insert(&tx, now_ms(), &run, step, &mut out).await?,
        }
        self.commit(tx, out).await
    }

    pub async fn record_run(&self, start: RunStart) -> DbResult<DbResult<Session>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let taken = record(&tx, now_ms(), start, &crate::proc::pid_alive, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(taken)
    }

    pub async fn run_started(
        &self,
        run: RunInfo,
        pid: u32,
        pid_start: Option<u64>,
        session: Option<String>,
        again: Again,
    ) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        if again == Again::Retry && started_before(&tx, &run.id, pid).await? {
            tell_started(&run, pid, &mut out);
            return self.commit(tx, out).await;
        }
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

    pub async fn finish_run(&self, run: RunInfo, f: Finish, again: Again) -> DbResult<Message> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        if again == Again::Retry
            && let Some(m) = written_end(&tx, &run, &f).await?
        {
            f.tell_again(&run, &m, &mut out);
            self.commit(tx, out).await?;
            return Ok(m);
        }
        let message = finish(&tx, now_ms(), &run, f, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(message)
    }

    /// The backend's own session id of a run, saved while it runs (a CLI
    /// agent's with its partial text: `agent::cli`).
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
pub(crate) mod tests {
    use kd_proto::types::MessageKind;
    use kd_proto::types::RunMeta;
    use serde_json::json;

    use crate::db::sessions::SessionEnd;

    use super::*;
    use crate::db::exchanges::{Kind, NewExchange, Opened, StepKey};
    use crate::db::fixtures::run_of;
    use crate::db::messages::NewMessage;
    use crate::db::pg::exchanges::tests::{db, pg_events};

    pub(crate) const SESSION: &str = "INSERT INTO sessions (id, thread_id, agent, status, holder, pid, started_at, last_active_at) \
                           VALUES ('s-1', 't1', 'claude', 'active', 'claude', 7, 3, 3)";

    pub(crate) fn council() -> NewExchange {
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

    pub(crate) fn king() -> NewMessage {
        NewMessage::new("t1", "king", vec!["all".into()], MessageKind::King, "Q".into())
    }

    pub(crate) fn answered() -> Finish {
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
    pub(crate) type Left = (String, String, Vec<crate::db::pg::exchanges::tests::EventRow>, Vec<String>);

    /// The rows a finished run leaves, as text (the same in both engines).
    pub(crate) const ROWS: [&str; 8] = [
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

    pub(crate) async fn pg_script(c: &impl GenericClient, f: Finish) -> DbResult<Left> {
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
    async fn a_member_streams_one_run_on_a_thread_at_a_time_whatever_node_starts_it() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let out = &mut Outbox::default();
        messages::append(&c, 5, king(), out).await.unwrap();
        let (first, second) = (run_of("r-1", "claude"), run_of("r-2", "claude"));
        insert(&c, 21, &first, None, out).await.unwrap();
        insert(&c, 22, &second, None, out).await.unwrap();
        pg.run_started(first.clone(), 100, None, None, Again::First).await.unwrap();
        // Another node's queue knows nothing of the first run: the
        // registry refuses the second, naming where the first runs.
        match pg.run_started(second.clone(), 200, None, None, Again::First).await {
            Err(e @ DbError::MemberBusy { .. }) => {
                assert_eq!(e.to_string(), "claude is already answering on thread t1 on node local")
            }
            other => panic!("refused: {other:?}"),
        }
        // Another member, or the next run once the first has ended, starts.
        let codex = run_of("r-3", "codex");
        insert(&c, 23, &codex, None, out).await.unwrap();
        pg.run_started(codex, 300, None, None, Again::First).await.unwrap();
        pg.finish_run(first, Finish { session: None, ..answered() }, Again::First).await.unwrap();
        pg.run_started(second, 200, None, None, Again::First).await.unwrap();
    }

    /// A run's start tried again without a journal step, while its first
    /// try is still open on the server (its `COMMIT` on its way, the
    /// connection cut): the second try meets the first's row once it
    /// commits, and is told to try again — an outage — rather than failed;
    /// the third finds it written.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_start_tried_again_while_its_first_try_is_open_is_told_to_try_again() {
        let Some((pg, _db)) = db().await else { return };
        let mut first = pg.conn().await.unwrap();
        let out = &mut Outbox::default();
        messages::append(&first, 5, king(), out).await.unwrap();
        let run = run_of("r-1", "claude");
        let open = first.transaction().await.unwrap();
        insert(&open, 21, &run, None, out).await.unwrap();
        let pg = std::sync::Arc::new(pg);
        let retry = tokio::spawn({
            let (pg, run) = (pg.clone(), run.clone());
            async move { pg.insert_run(run, None, Again::Retry).await }
        });
        // The second try waits on the first's row before the first commits.
        let watch = pg.conn().await.unwrap();
        let waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted";
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while watch.query_one(waiting, &[]).await.unwrap().get::<_, i64>(0) == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the second try waits on the first's row");
        open.commit().await.unwrap();
        let told = retry.await.unwrap();
        assert!(matches!(&told, Err(e) if e.is_outage()), "{told:?}");
        pg.insert_run(run, None, Again::Retry).await.unwrap();
        let rows: i64 = watch.query_one("SELECT count(*) FROM runs", &[]).await.unwrap().get(0);
        assert_eq!(rows, 1);
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
        let refused = pg.finish_run(run.clone(), f, Again::First).await;
        assert!(matches!(refused, Err(DbError::NotFound(_))), "{refused:?}");
        let answers: i64 = c.query_one("SELECT count(*) FROM messages WHERE seq > 1", &[]).await.unwrap().get(0);
        let status: String = c.query_one("SELECT status FROM runs", &[]).await.unwrap().get(0);
        assert_eq!((answers, status.as_str()), (0, "waiting"));
        // Ended once, a run ends for good: a second end writes nothing.
        let f = Finish { session: None, ..answered() };
        let m = pg.finish_run(run.clone(), f.clone(), Again::First).await.unwrap();
        assert_eq!(m.seq, 2);
        let again = pg.finish_run(run.clone(), f.clone(), Again::First).await;
        assert!(matches!(again, Err(DbError::RunEnded { .. })), "{again:?}");
        // In the words of the rule both engines follow.
        let rule = refuse_ended("r-1", "done").unwrap_err();
        assert_eq!(format!("{:?}", again.unwrap_err()), format!("{rule:?}"));
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
