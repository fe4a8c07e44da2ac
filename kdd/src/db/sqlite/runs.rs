//! The SQLite side of [`crate::db::runs`]: its SQL and the engine's operations.

use kd_proto::types::{Message, Purpose, RunInfo, RunStatus, Session, SessionStatus};
use rusqlite::{Connection, OptionalExtension, params};

use super::{acks, cost, events, exchanges, inbox, messages, sessions};
use crate::db::exchanges::StepId;
use crate::db::outage::Again;
use crate::db::runs::{
    Cut, Finish, Orphan, RunStart, STOPPED_IN_FLIGHT, Spawned, TakeSession, is_ended, refuse_ended, spawned,
    start_written, tell_started, tell_waiting, waiting,
};
use crate::db::{DbError, DbResult, Outbox};

/// Records a run that was accepted; subscribers hear `run_waiting`. A run
/// taking a journal step takes it here, in the same transaction, only
/// while it is pending: else it is refused ([`DbError::StepTaken`]) and
/// nothing is written — a step is answered by one run at most.
pub fn insert(conn: &Connection, now: i64, run: &RunInfo, step: Option<StepId>, out: &mut Outbox) -> DbResult<()> {
    if let Some(step) = step
        && !exchanges::step_started(conn, now, step, &run.id, run.reply_to)?
    {
        return Err(DbError::StepTaken(step));
    }
    conn.prepare_cached(
        "INSERT INTO runs (id, thread_id, member, backend, status, reply_to, round, started_at, exchange, replaces, ordinal, purpose, step_id)
         VALUES (?1, ?2, ?3, ?4, 'waiting', ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        run.id,
        run.thread,
        run.member,
        run.backend,
        run.reply_to.map(|r| r as i64),
        run.round,
        now,
        run.exchange.map(|r| r as i64),
        run.replaces.map(|r| r as i64),
        run.ordinal as i64,
        run.purpose.map(Purpose::as_str),
        step
    ])?;
    events::record(conn, now, &waiting(run))?;
    tell_waiting(run, out);
    Ok(())
}

/// Whether run `id` has its row.
fn exists(conn: &Connection, id: &str) -> DbResult<bool> {
    Ok(conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)")?.query_row([id], |r| r.get(0))?)
}

/// [`RunStart`]: the run recorded as [`insert`] records it, its session
/// taken, its inbox items given.
pub fn record(
    conn: &Connection,
    now: i64,
    start: RunStart,
    alive: &dyn Fn(u32) -> bool,
    out: &mut Outbox,
) -> DbResult<DbResult<Session>> {
    if start.again == Again::Retry {
        let held = start.own(sessions::active_for(conn, &start.run.thread, &start.run.member)?);
        if let Some(written) = start.written(exists(conn, &start.run.id)?, held) {
            start.tell_again(out);
            return Ok(written);
        }
    }
    let RunStart { run, step, recorded, session, needs_session, given, spawned, again: _ } = start;
    if !recorded {
        insert(conn, now, &run, step, out)?;
    }
    let taken = match session {
        TakeSession::New(s) => sessions::start(conn, now, s, alive),
        TakeSession::Resume { id, holder } => sessions::resume(conn, now, &id, holder.as_deref(), None, alive),
    };
    let session = RunStart::took(needs_session, taken)?;
    if let Some(upto) = given.filter(|_| RunStart::gives(needs_session, &session)) {
        inbox::given(conn, now, &run.thread, &run.member, upto, &run.id)?;
    }
    if let Some(Spawned { pid, start }) = spawned {
        started(conn, now, &run, pid, start, session.as_ref().ok().map(|s| s.id.as_str()), out)?;
    }
    Ok(session)
}

/// Records the agent's pid (and start time) the moment it is spawned.
pub fn started(
    conn: &Connection,
    now: i64,
    run: &RunInfo,
    pid: u32,
    pid_start: Option<u64>,
    session: Option<&str>,
    out: &mut Outbox,
) -> DbResult<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'streaming', pid = ?2, pid_start = ?3, session_id = ?4 WHERE id = ?1",
    )?
    .execute(params![run.id, pid, pid_start.map(|s| s as i64), session])?;
    if let Some(session) = session {
        // The session is held by this process now.
        conn.prepare_cached("UPDATE sessions SET pid = ?2 WHERE id = ?1 AND status = 'active'")?
            .execute(params![session, pid])?;
    }
    events::record(conn, now, &spawned(run, pid, session))?;
    tell_started(run, pid, out);
    Ok(())
}

/// Whether the start of `id`'s agent `pid` was written ([`start_written`]).
fn started_before(conn: &Connection, id: &str, pid: u32) -> DbResult<bool> {
    let row: Option<(String, Option<i64>)> = conn
        .prepare_cached("SELECT status, pid FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.is_some_and(|(status, row_pid)| start_written(&status, row_pid, pid)))
}

/// Saves what the run streamed since its last save (crash insurance):
/// appended, so that a long answer costs its length, not its length times
/// the number of saves.
pub fn append_partial(conn: &Connection, id: &str, text: &str) -> DbResult<()> {
    conn.prepare_cached("INSERT INTO run_partials (run_id, text) VALUES (?1, ?2)")?.execute(params![id, text])?;
    Ok(())
}

/// The text a run saved: what a previous kdd kept whole in `runs.partial`,
/// then the appended pieces in order.
fn saved_partial(conn: &Connection, id: &str, whole: String) -> DbResult<String> {
    let mut text = whole;
    let mut stmt = conn.prepare_cached("SELECT text FROM run_partials WHERE run_id = ?1 ORDER BY id")?;
    let mut rows = stmt.query([id])?;
    while let Some(row) = rows.next()? {
        text.push_str(row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?);
    }
    Ok(text)
}

/// Writes the run's message, closes its row and session, and tells
/// subscribers — all in one transaction, so a run is never half-finished
/// (and never finished twice: [`refuse_ended`]).
pub fn finish(conn: &Connection, now: i64, run: &RunInfo, mut f: Finish, out: &mut Outbox) -> DbResult<Message> {
    let status: Option<String> =
        conn.prepare_cached("SELECT status FROM runs WHERE id = ?1")?.query_row([&run.id], |r| r.get(0)).optional()?;
    if let Some(status) = status {
        refuse_ended(&run.id, &status)?;
    }
    let message = messages::append(conn, now, f.message(run), out)?;
    cost::record(conn, run, &message)?;
    if f.status == RunStatus::Done {
        // An answer given the broadcast acknowledges it.
        let acked = acks::settle(conn, now, &run.thread, &run.member, run.reply_to.unwrap_or(0), None, "answer")?;
        acks::progress(conn, &run.thread, &acked, out)?;
    }
    conn.prepare_cached(
        "UPDATE runs SET status = ?2, ended_at = ?3, message_seq = ?4, error = ?5, partial = '' WHERE id = ?1",
    )?
    .execute(params![run.id, f.status.as_str(), now, message.seq as i64, f.error])?;
    conn.prepare_cached("DELETE FROM run_partials WHERE run_id = ?1")?.execute([&run.id])?;
    // The run's journal step ends with it, in the same transaction as its
    // message: answered once, or pending again after an interruption.
    let end = f.step_end(message.seq);
    exchanges::step_finished(conn, now, &run.id, &end)?;
    if let Some(end) = f.session_end() {
        sessions::end(conn, now, &end)?;
    }
    events::record(conn, now, &f.event(run, message.seq))?;
    out.publish(&run.thread, f.told(run, message.seq));
    Ok(message)
}

/// The end of `run` its first try wrote, found by `f` tried again
/// ([`Finish::wrote`]): the run's row ended with its message.
fn written_end(conn: &Connection, run: &RunInfo, f: &Finish) -> DbResult<Option<Message>> {
    let row: Option<(String, Option<i64>)> = conn
        .prepare_cached("SELECT status, message_seq FROM runs WHERE id = ?1")?
        .query_row([&run.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some(seq) = row.and_then(|(status, seq)| seq.filter(|_| is_ended(&status))) else { return Ok(None) };
    Ok(messages::one(conn, &run.thread, seq as u64)?.filter(|m| f.wrote(run, m)))
}

/// Runs still `waiting` or `streaming` in the registry.
pub fn in_flight(conn: &Connection) -> DbResult<Vec<Orphan>> {
    let mut stmt = conn.prepare(
        "SELECT id, thread_id, member, pid, pid_start FROM runs WHERE status = 'waiting' OR status = 'streaming'
         ORDER BY started_at",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(Orphan {
            id: r.get(0)?,
            thread: r.get(1)?,
            member: r.get(2)?,
            pid: r.get(3)?,
            pid_start: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Records every run left in flight as interrupted: an `interrupted`
/// message with the text saved so far, the run closed, its session
/// released. Returns how many there were.
pub fn recover(conn: &Connection, now: i64, out: &mut Outbox) -> DbResult<usize> {
    let orphans = in_flight(conn)?;
    for o in &orphans {
        let (cut, partial) = conn.query_row(
            "SELECT backend, reply_to, round, session_id, exchange, replaces, ordinal, purpose, partial
                 FROM runs WHERE id = ?1",
            [&o.id],
            |r| {
                let cut = Cut {
                    backend: r.get(0)?,
                    reply_to: r.get(1)?,
                    round: r.get(2)?,
                    session: r.get(3)?,
                    exchange: r.get(4)?,
                    replaces: r.get(5)?,
                    ordinal: r.get(6)?,
                    purpose: r.get(7)?,
                };
                Ok((cut, r.get::<_, String>(8)?))
            },
        )?;
        let partial = saved_partial(conn, &o.id, partial)?;
        let session =
            cut.session.clone().filter(|s| sessions::get(conn, s).is_ok_and(|s| s.status == SessionStatus::Active));
        let (info, f) = cut.interrupted(o, now, partial, STOPPED_IN_FLIGHT, session);
        finish(conn, now, &info, f, out)?;
    }
    Ok(orphans.len())
}

impl super::Sqlite {
    /// [`insert`]; tried `again`, a row of the run already there is its
    /// first try's ([`Again`]), told again.
    pub async fn insert_run(&self, run: RunInfo, step: Option<StepId>, again: Again) -> DbResult<()> {
        self.write_now(move |c, out| {
            if again == Again::Retry && exists(c, &run.id)? {
                tell_waiting(&run, out);
                return Ok(());
            }
            insert(c, crate::db::now_ms(), &run, step, out)
        })
        .await
    }

    pub async fn record_run(&self, start: RunStart) -> DbResult<DbResult<Session>> {
        self.write_now(move |c, out| record(c, crate::db::now_ms(), start, &crate::proc::pid_alive, out)).await
    }

    pub async fn run_started(
        &self,
        run: RunInfo,
        pid: u32,
        pid_start: Option<u64>,
        session: Option<String>,
        again: Again,
    ) -> DbResult<()> {
        self.write_now(move |c, out| {
            if again == Again::Retry && started_before(c, &run.id, pid)? {
                tell_started(&run, pid, out);
                return Ok(());
            }
            started(c, crate::db::now_ms(), &run, pid, pid_start, session.as_deref(), out)
        })
        .await
    }

    pub async fn append_run_partial(&self, id: String, text: String) -> DbResult<()> {
        self.write(move |c, _| append_partial(c, &id, &text)).await
    }

    pub async fn finish_run(&self, run: RunInfo, f: Finish, again: Again) -> DbResult<Message> {
        let small = f.body.len() <= super::SMALL_TEXT;
        self.write_if_small(small, move |c, out| {
            // SQLite's commit is never in doubt (one that failed rolled
            // back): a try again finds its first try's end only by contract.
            if again == Again::Retry
                && let Some(m) = written_end(c, &run, &f)?
            {
                f.tell_again(&run, &m, out);
                return Ok(m);
            }
            finish(c, crate::db::now_ms(), &run, f, out)
        })
        .await
    }

    /// The backend's own session id of a run, saved while it runs (a CLI
    /// agent's with its partial text: `agent::cli`).
    pub async fn run_session_seen(&self, run: String, backend: String) -> DbResult<()> {
        self.write_now(move |c, _| exchanges::step_session(c, &run, &backend)).await
    }

    pub async fn orphan_runs(&self) -> DbResult<Vec<Orphan>> {
        self.read(in_flight).await
    }

    pub async fn recover_runs(&self) -> DbResult<usize> {
        self.write(|c, out| recover(c, crate::db::now_ms(), out)).await
    }
}
