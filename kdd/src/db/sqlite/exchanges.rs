//! The SQLite side of [`crate::db::exchanges`]: its SQL and the engine's operations.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::db::exchanges::{
    Exchange, ExchangeId, ExchangeState, NewExchange, Opened, RunEnd, SUPERSEDED, Step, StepId, StepKey, no_exchange,
};
use crate::db::{DbError, DbResult};

use crate::db::exchanges::{EXCHANGE, STEP};

fn exchange(r: &Row<'_>) -> rusqlite::Result<Exchange> {
    crate::db::exchanges::read_exchange(r)
}

fn step(r: &Row<'_>) -> rusqlite::Result<Step> {
    crate::db::exchanges::read_step(r)
}

fn insert_step(conn: &Connection, now: i64, x: ExchangeId, key: &StepKey) -> DbResult<()> {
    conn.prepare_cached(
        "INSERT INTO exchange_steps (exchange_id, round, member, purpose, cause, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
    )?
    .execute(params![x, key.round, key.member, key.purpose.as_str(), key.cause as i64, now])?;
    Ok(())
}

/// Begins an exchange with its first steps pending. A King message's
/// exchange (council, work) supersedes the thread's open one of those
/// kinds: it is stopped and its pending steps cancelled.
pub fn begin(conn: &Connection, now: i64, x: &NewExchange) -> DbResult<Exchange> {
    if x.supersedes() {
        let open = open_in_thread(conn, &x.thread, "AND (kind = 'council' OR kind = 'work')")?;
        for id in open {
            stop(conn, now, id, SUPERSEDED)?;
        }
    }
    let plan = serde_json::to_string(&x.plan).map_err(|e| DbError::Invalid(format!("an exchange's plan: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO exchanges (thread_id, seq, kind, correlation_id, plan, created_at, updated_at, path) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)",
    )?
    .execute(params![x.thread, x.seq as i64, x.kind.as_str(), x.correlation_id, plan, now, x.path])?;
    let id = conn.last_insert_rowid();
    for key in &x.first_steps {
        insert_step(conn, now, id, key)?;
    }
    get(conn, id)?.ok_or_else(|| DbError::Internal("the exchange just begun is gone".into()))
}

/// The exchange `id`.
pub fn get(conn: &Connection, id: ExchangeId) -> DbResult<Option<Exchange>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {EXCHANGE} FROM exchanges WHERE id = ?1"))?
        .query_row(params![id], exchange)
        .optional()?)
}

/// The step `key` of exchange `x`, made pending if it is new — only while
/// the exchange is open; else the exchange's end.
pub fn open_step(conn: &Connection, now: i64, x: ExchangeId, key: &StepKey) -> DbResult<Opened> {
    let state = match get(conn, x)? {
        Some(e) => e.state,
        None => return Err(no_exchange(x)),
    };
    if state != ExchangeState::Open {
        return Ok(Opened::Ended(state));
    }
    insert_step(conn, now, x, key)?;
    let s = conn
        .prepare_cached(&format!(
            "SELECT {STEP} FROM exchange_steps WHERE exchange_id = ?1 AND round = ?2 AND member = ?3 \
             AND purpose = ?4 AND cause = ?5"
        ))?
        .query_row(params![x, key.round, key.member, key.purpose.as_str(), key.cause as i64], step)?;
    Ok(Opened::Step(s))
}

pub fn step_started(conn: &Connection, now: i64, id: StepId, run: &str, reply_to: Option<u64>) -> DbResult<bool> {
    let n = conn
        .prepare_cached(
            "UPDATE exchange_steps SET state = 'running', run_id = ?2, attempts = attempts + 1, \
             reply_to = coalesce(reply_to, ?3), updated_at = ?4 WHERE id = ?1 AND (state = 'pending' OR (state = \
             'cancelled' AND run_id IS NULL AND reason = ?5 AND round = 1 AND purpose = 'answer'))",
        )?
        .execute(params![id, run, reply_to.map(|s| s as i64), now, SUPERSEDED])?;
    Ok(n == 1)
}

/// Records the backend's own session id of the run holding a step while it
/// runs (a run that is interrupted before gives it with its end).
pub fn step_session(conn: &Connection, run: &str, backend_session: &str) -> DbResult<()> {
    conn.prepare_cached("UPDATE exchange_steps SET backend_session = ?2 WHERE run_id = ?1 AND state = 'running'")?
        .execute(params![run, backend_session])?;
    // A session the backend opened for this run knows it too: a resumed
    // thread's next run goes on in it even if this one is cut. (A session
    // that had one keeps it until the run ends, where a fork is told.)
    conn.prepare_cached(
        "UPDATE sessions SET backend_session_id = ?2 WHERE id = (SELECT session_id FROM runs WHERE id = ?1) \
         AND backend_session_id IS NULL",
    )?
    .execute(params![run, backend_session])?;
    Ok(())
}

/// The end of the run holding a step (only that run's, only once); then
/// its exchange settles if that was its last unfinished step.
pub fn step_finished(conn: &Connection, now: i64, run: &str, end: &RunEnd) -> DbResult<()> {
    let Some((id, x)) = conn
        .prepare_cached("SELECT id, exchange_id FROM exchange_steps WHERE run_id = ?1 AND state = 'running'")?
        .query_row(params![run], |r| Ok((r.get::<_, StepId>(0)?, r.get::<_, ExchangeId>(1)?)))
        .optional()?
    else {
        return Ok(());
    };
    let open = get(conn, x)?.is_some_and(|e| e.state == ExchangeState::Open);
    let e = end.step(open);
    conn.prepare_cached(
        "UPDATE exchange_steps SET state = ?2, message_seq = ?3, reason = ?4, \
         replaces_seq = coalesce(?5, replaces_seq), backend_session = coalesce(backend_session, ?7), \
         updated_at = ?6 WHERE id = ?1 AND state = 'running'",
    )?
    .execute(params![
        id,
        e.state,
        e.seq.map(|s| s as i64),
        e.reason,
        e.replaces.map(|s| s as i64),
        now,
        e.backend_session
    ])?;
    settle(conn, now, x)
}

/// Ends an open exchange whose driver took every planned step once none
/// is unfinished.
pub fn settle(conn: &Connection, now: i64, x: ExchangeId) -> DbResult<()> {
    conn.prepare_cached(
        "UPDATE exchanges SET state = 'done', ended_at = ?2, updated_at = ?2 WHERE id = ?1 AND state = 'open' \
         AND plan_done = 1 AND NOT EXISTS (SELECT 1 FROM exchange_steps WHERE exchange_id = ?1 \
         AND (state = 'pending' OR state = 'running'))",
    )?
    .execute(params![x, now])?;
    Ok(())
}

/// The driver took every planned step (with what it came to, for a
/// completion); the exchange ends once no step is unfinished.
pub fn plan_done(conn: &Connection, now: i64, x: ExchangeId, result: Option<&Value>) -> DbResult<()> {
    let result = result.map(Value::to_string);
    conn.prepare_cached(
        "UPDATE exchanges SET plan_done = 1, result = coalesce(?2, result), updated_at = ?3 WHERE id = ?1",
    )?
    .execute(params![x, result, now])?;
    settle(conn, now, x)
}

/// Stops an open exchange for good: its pending steps are cancelled (a
/// running one ends as its run does).
pub fn stop(conn: &Connection, now: i64, x: ExchangeId, reason: &str) -> DbResult<()> {
    let n = conn
        .prepare_cached(
            "UPDATE exchanges SET state = 'stopped', reason = ?2, ended_at = ?3, updated_at = ?3 \
             WHERE id = ?1 AND state = 'open'",
        )?
        .execute(params![x, reason, now])?;
    if n == 1 {
        conn.prepare_cached(
            "UPDATE exchange_steps SET state = 'cancelled', reason = ?2, updated_at = ?3 \
             WHERE exchange_id = ?1 AND state = 'pending'",
        )?
        .execute(params![x, reason, now])?;
    }
    Ok(())
}

/// The open exchanges of `thread` (`and` narrows them further), read
/// through the index of the open exchanges: a question looks for its
/// thread's open exchange to supersede, and the thread's other index
/// (`exchanges_by_seq`) would visit every exchange the thread ever had —
/// one row read each, a thread of a thousand questions a thousand reads
/// a question (issue 31, item 17). The open ones are few, whatever the
/// threads' lengths.
pub(super) fn open_in_thread(conn: &Connection, thread: &str, and: &'static str) -> DbResult<Vec<ExchangeId>> {
    Ok(conn
        .prepare_cached(&open_in_thread_sql(and))?
        .query_map(params![thread], |r| r.get(0))?
        .collect::<Result<_, _>>()?)
}

fn open_in_thread_sql(and: &'static str) -> String {
    format!(
        "SELECT id FROM exchanges INDEXED BY exchanges_open WHERE state = 'open' AND thread_id = ?1 {and} ORDER BY id"
    )
}

/// Every open exchange, oldest first: what a daemon starting resumes.
pub fn unfinished(conn: &Connection) -> DbResult<Vec<Exchange>> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {EXCHANGE} FROM exchanges WHERE state = 'open' ORDER BY created_at, id"))?;
    let rows = stmt.query_map([], exchange)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Every step of an exchange, in the order they were made.
pub fn steps(conn: &Connection, x: ExchangeId) -> DbResult<Vec<Step>> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {STEP} FROM exchange_steps WHERE exchange_id = ?1 ORDER BY id"))?;
    let rows = stmt.query_map(params![x], step)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

pub(crate) mod info;
pub mod kd_step;
pub mod life;
#[cfg(test)]
mod tests;
