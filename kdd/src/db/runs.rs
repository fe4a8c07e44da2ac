//! Agent runs: their rows, the partial text saved while they stream, their
//! end (message, event, subscriber notice in one transaction), and the
//! recovery of runs a dead daemon left in flight.

use kd_proto::names::KING;
use kd_proto::types::{
    Message, MessageKind, Purpose, RouteType, RunInfo, RunMeta, RunStatus, SessionStatus, ThreadEvent,
};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;

use super::events::{self, NewEvent};
use super::exchanges::{self, RunEnd, StepId};
use super::messages::{self, NewMessage};
use super::sessions::{self, SessionEnd};
use super::{DbError, DbResult, Outbox, acks, cost};

/// Runs another node is asked to stop on one of its threads (a King's
/// `kd cancel` or Ctrl+C on a node that is not the thread's).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cancel {
    pub thread: String,
    /// Only this member's runs.
    pub member: Option<String>,
    /// Only this run.
    pub run: Option<String>,
    /// The thread's pending auto-turns too (`council.interrupt`).
    pub turns: bool,
}

/// Why a run left in flight by a daemon that stopped is interrupted.
pub const STOPPED_IN_FLIGHT: &str = "the daemon stopped while the run was in flight";

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
    events::record(
        conn,
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
    )?;
    out.publish(&run.thread, ThreadEvent::RunWaiting { run: run.clone() });
    Ok(())
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
    events::record(
        conn,
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
    )?;
    out.publish(&run.thread, ThreadEvent::RunStarted { run: run.id.clone(), member: run.member.clone(), pid });
    Ok(())
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

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Finish {
    pub status: RunStatus,
    /// The message body: the answer, the reason of a failure, or the text a
    /// cancelled run had produced.
    pub body: String,
    /// The failure reason, for error and timed-out runs.
    pub error: Option<String>,
    pub meta: RunMeta,
    /// The session the run held, released as it says (its backend id, when
    /// not given, is the run's).
    pub session: Option<SessionEnd>,
    /// The members the answer is addressed to (a hand-off); the King when
    /// empty.
    pub to: Vec<String>,
}

impl Finish {
    /// The message a run's end writes: the member's answer (its error, or
    /// what it had said when cut), to the King or whom it addressed.
    /// Takes the body; the rest stays for the run's record.
    pub(crate) fn message(&mut self, run: &RunInfo) -> NewMessage {
        let kind = match self.status {
            RunStatus::Done => MessageKind::Agent,
            RunStatus::Cancelled | RunStatus::Interrupted => MessageKind::Interrupted,
            _ => MessageKind::Error,
        };
        let route = match self.to.len() {
            0 => None,
            1 => Some(RouteType::PointToPoint),
            _ => Some(RouteType::Multicast),
        };
        NewMessage {
            thread: run.thread.clone(),
            from: run.member.clone(),
            to: if self.to.is_empty() { vec![KING.to_string()] } else { self.to.clone() },
            cc: vec![],
            reply_to: run.reply_to,
            kind,
            body: std::mem::take(&mut self.body),
            round: run.round,
            run: Some(self.meta.clone()),
            correlation_id: Some(run.id.clone()),
            fence: None,
            replaces: run.replaces,
            refs: vec![],
            purpose: run.purpose,
            route,
        }
    }
}

/// A run's end is written once: a run whose row says it ended (a recovery,
/// or another node's reaper, wrote its end) writes nothing more.
pub(crate) fn refuse_ended(id: &str, status: &str) -> DbResult<()> {
    match status {
        "waiting" | "streaming" => Ok(()),
        _ => Err(DbError::RunEnded { run: id.to_string(), status: status.to_string() }),
    }
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
    let seq = message.seq;
    let end = match f.status {
        RunStatus::Done => RunEnd::Done { seq },
        RunStatus::Interrupted => RunEnd::Interrupted { seq },
        RunStatus::Cancelled => RunEnd::Cancelled { reason: f.error.clone().unwrap_or_else(|| "cancelled".into()) },
        _ => RunEnd::Failed { seq, reason: f.error.clone().unwrap_or_else(|| f.status.as_str().into()) },
    };
    exchanges::step_finished(conn, now, &run.id, &end)?;
    if let Some(mut end) = f.session.clone() {
        end.backend_session_id = end.backend_session_id.or_else(|| f.meta.backend_session_id.clone());
        sessions::end(conn, now, &end)?;
    }
    let kind = match f.status {
        RunStatus::Done => "run.finish",
        RunStatus::TimedOut => "run.timeout",
        RunStatus::Cancelled => "run.cancel",
        RunStatus::Interrupted => "run.interrupted",
        _ => "run.error",
    };
    events::record(
        conn,
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
    )?;
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

/// A run a previous daemon left in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub id: String,
    pub thread: String,
    pub member: String,
    pub pid: Option<u32>,
    pub pid_start: Option<u64>,
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
        type Row = (String, Option<i64>, Option<u32>, String, Option<String>, Option<i64>, Option<i64>, Option<i64>);
        let ((backend, reply_to, round, partial, session, exchange, replaces, ordinal), purpose): (
            Row,
            Option<String>,
        ) = conn.query_row(
            "SELECT backend, reply_to, round, partial, session_id, exchange, replaces, ordinal, purpose
                 FROM runs WHERE id = ?1",
            [&o.id],
            |r| {
                Ok((
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?),
                    r.get(8)?,
                ))
            },
        )?;
        let partial = saved_partial(conn, &o.id, partial)?;
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
            round,
            exchange: exchange.map(|r| r as u64),
            replaces: replaces.map(|r| r as u64),
            ordinal: ordinal.unwrap_or(0),
            purpose: purpose.as_deref().and_then(Purpose::parse),
            approval: None,
        };
        let body = if partial.is_empty() { "(interrupted before it said anything)".to_string() } else { partial };
        finish(
            conn,
            now,
            &info,
            Finish {
                status: RunStatus::Interrupted,
                body,
                error: Some(STOPPED_IN_FLIGHT.into()),
                meta: RunMeta { run_id: Some(o.id.clone()), backend: Some(backend), ordinal, ..RunMeta::default() },
                session: session
                    .filter(|s| sessions::get(conn, s).is_ok_and(|s| s.status == SessionStatus::Active))
                    .map(|id| SessionEnd { id, status: SessionStatus::Idle, backend_session_id: None, seen_seq: None }),
                to: vec![],
            },
            out,
        )?;
    }
    Ok(orphans.len())
}

impl super::Sqlite {
    pub async fn insert_run(&self, run: RunInfo, step: Option<StepId>) -> DbResult<()> {
        self.write(move |c, out| insert(c, super::now_ms(), &run, step, out)).await
    }

    pub async fn run_started(
        &self,
        run: RunInfo,
        pid: u32,
        pid_start: Option<u64>,
        session: Option<String>,
    ) -> DbResult<()> {
        self.write(move |c, out| started(c, super::now_ms(), &run, pid, pid_start, session.as_deref(), out)).await
    }

    pub async fn append_run_partial(&self, id: String, text: String) -> DbResult<()> {
        self.write(move |c, _| append_partial(c, &id, &text)).await
    }

    pub async fn finish_run(&self, run: RunInfo, f: Finish) -> DbResult<Message> {
        self.write(move |c, out| finish(c, super::now_ms(), &run, f, out)).await
    }

    /// The backend's own session id of a run, as soon as it is known.
    pub async fn run_session_seen(&self, run: String, backend: String) -> DbResult<()> {
        self.write(move |c, _| exchanges::step_session(c, &run, &backend)).await
    }

    pub async fn orphan_runs(&self) -> DbResult<Vec<Orphan>> {
        self.read(in_flight).await
    }

    pub async fn recover_runs(&self) -> DbResult<usize> {
        self.write(|c, out| recover(c, super::now_ms(), out)).await
    }
}
