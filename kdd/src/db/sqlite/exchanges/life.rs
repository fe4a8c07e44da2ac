//! The SQLite side of [`crate::db::exchanges::life`]: its SQL and the engine's operations.

use kd_proto::types::Message;
use rusqlite::{Connection, OptionalExtension, params};

use super::{get, open_step, plan_done, steps, stop, unfinished};
use crate::db::exchanges::{Exchange, ExchangeId, NewExchange, Opened, Step, StepId, StepKey};
use crate::db::messages::NewMessage;
use crate::db::sqlite::Sqlite;
use crate::db::sqlite::events;
use crate::db::sqlite::messages;
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Stops exchange `x` for good, with an `exchange.stop` event.
pub fn stop_for_good(conn: &Connection, now: i64, x: ExchangeId, reason: &str) -> DbResult<()> {
    let Some(ex) = get(conn, x)? else { return Ok(()) };
    if ex.state != super::ExchangeState::Open {
        return Ok(());
    }
    stop(conn, now, x, reason)?;
    events::write(conn, now, &ex.stopped(reason))
}

/// Stops every open exchange of `thread` (`kd cancel`): none resumes.
pub fn stop_thread(conn: &Connection, now: i64, thread: &str, reason: &str) -> DbResult<Vec<ExchangeId>> {
    let open = super::open_in_thread(conn, thread, "")?;
    for &x in &open {
        stop_for_good(conn, now, x, reason)?;
    }
    Ok(open)
}

/// Stops every open exchange (`kd daemon stop --no-resume`).
pub fn stop_all_open(conn: &Connection, now: i64, reason: &str) -> DbResult<usize> {
    let open = unfinished(conn)?;
    for x in &open {
        stop_for_good(conn, now, x.id, reason)?;
    }
    Ok(open.len())
}

/// A graceful stop cut the open exchanges: each records when, and which
/// steps were left, for the next start to resume.
pub fn cut_open(conn: &Connection, now: i64) -> DbResult<usize> {
    let open = unfinished(conn)?;
    for x in &open {
        conn.prepare_cached("UPDATE exchanges SET cut_at = ?2, updated_at = ?2 WHERE id = ?1")?
            .execute(params![x.id, now])?;
        events::write(conn, now, &x.cut(steps(conn, x.id)?))?;
    }
    Ok(open.len())
}

/// A starting daemon takes exchange `x` up again.
pub fn resumed(conn: &Connection, now: i64, x: &Exchange) -> DbResult<()> {
    conn.prepare_cached("UPDATE exchanges SET resumes = resumes + 1, cut_at = NULL, updated_at = ?2 WHERE id = ?1")?
        .execute(params![x.id, now])?;
    events::write(conn, now, &x.resumed(&steps(conn, x.id)?))
}

/// Gives up pending step `step` (it was cut too often): `error` — the
/// member's error message, replacing what it had said — is written and
/// the step failed with `reason`, in one transaction.
pub fn give_up(
    conn: &Connection,
    now: i64,
    step: StepId,
    error: NewMessage,
    reason: &str,
    out: &mut Outbox,
) -> DbResult<Option<Message>> {
    let x: Option<ExchangeId> = conn
        .prepare_cached("SELECT exchange_id FROM exchange_steps WHERE id = ?1 AND state = 'pending'")?
        .query_row(params![step], |r| r.get(0))
        .ok();
    let Some(x) = x else { return Ok(None) };
    let message = messages::append(conn, now, error, out)?;
    conn.prepare_cached(
        "UPDATE exchange_steps SET state = 'failed', message_seq = ?2, reason = ?3, updated_at = ?4 WHERE id = ?1",
    )?
    .execute(params![step, message.seq as i64, reason, now])?;
    super::settle(conn, now, x)?;
    Ok(Some(message))
}

/// Writes `notice` from kd and stops exchange `x` for good, in one
/// transaction (a budget reached): a replay never writes it twice.
pub fn stop_with_notice(
    conn: &Connection,
    now: i64,
    x: ExchangeId,
    reason: &str,
    notice: NewMessage,
    out: &mut Outbox,
) -> DbResult<bool> {
    match get(conn, x)? {
        Some(ex) if ex.state == super::ExchangeState::Open => {
            messages::append(conn, now, notice, out)?;
            stop_for_good(conn, now, x, reason)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Begins an exchange that ends by itself once its first steps are
/// answered (a retry): or takes up the open one begun at the same message,
/// or `None` when one was and is over.
pub fn begin_settling(conn: &Connection, now: i64, x: &NewExchange) -> DbResult<Option<(Exchange, Vec<Step>)>> {
    let existing: Option<ExchangeId> = conn
        .prepare_cached("SELECT id FROM exchanges WHERE thread_id = ?1 AND seq = ?2 AND kind = ?3")?
        .query_row(params![x.thread, x.seq as i64, x.kind.as_str()], |r| r.get(0))
        .optional()?;
    let ex = match existing {
        Some(id) => match get(conn, id)? {
            Some(e) if e.state == super::ExchangeState::Open => e,
            _ => return Ok(None),
        },
        None => {
            let e = super::begin(conn, now, x)?;
            plan_done(conn, now, e.id, None)?;
            e
        }
    };
    let steps = steps(conn, ex.id)?;
    Ok(Some((ex, steps)))
}

/// The open council or work exchange begun by message `seq` of `thread`.
pub fn open_at(conn: &Connection, thread: &str, seq: u64) -> DbResult<Option<ExchangeId>> {
    Ok(conn
        .prepare_cached(
            "SELECT id FROM exchanges WHERE thread_id = ?1 AND seq = ?2 AND state = 'open' \
             AND (kind = 'council' OR kind = 'work')",
        )?
        .query_row(params![thread, seq as i64], |r| r.get(0))
        .optional()?)
}

impl Sqlite {
    pub async fn open_exchange_at(&self, thread: String, seq: u64) -> DbResult<Option<ExchangeId>> {
        self.read(move |c| open_at(c, &thread, seq)).await
    }

    pub async fn begin_settling_exchange(&self, x: NewExchange) -> DbResult<Option<(Exchange, Vec<Step>)>> {
        self.write(move |c, _| begin_settling(c, now_ms(), &x)).await
    }

    pub async fn exchange(&self, x: ExchangeId) -> DbResult<Exchange> {
        self.read(move |c| get(c, x)?.ok_or_else(|| DbError::NotFound(format!("exchange {x}")))).await
    }

    pub async fn open_step(&self, x: ExchangeId, key: StepKey) -> DbResult<Opened> {
        self.write_now(move |c, _| open_step(c, now_ms(), x, &key)).await
    }

    pub async fn exchange_steps(&self, x: ExchangeId) -> DbResult<Vec<Step>> {
        // One row a step of one exchange.
        self.read_now(|c| steps(c, x))
    }

    pub async fn plan_done(&self, x: ExchangeId, result: Option<serde_json::Value>) -> DbResult<()> {
        // A completion's result holds its answers whole: written by the
        // writer thread. An exchange's end alone is a few rows.
        let small = result.is_none();
        self.write_if_small(small, move |c, _| plan_done(c, now_ms(), x, result.as_ref())).await
    }

    pub async fn stop_exchange(&self, x: ExchangeId, reason: String) -> DbResult<()> {
        self.write(move |c, _| stop_for_good(c, now_ms(), x, &reason)).await
    }

    pub async fn stop_exchange_with_notice(&self, x: ExchangeId, reason: String, notice: NewMessage) -> DbResult<bool> {
        self.write(move |c, out| stop_with_notice(c, now_ms(), x, &reason, notice, out)).await
    }

    pub async fn stop_thread_exchanges(&self, thread: String, reason: String) -> DbResult<Vec<ExchangeId>> {
        self.write(move |c, _| stop_thread(c, now_ms(), &thread, &reason)).await
    }

    pub async fn stop_open_exchanges(&self, reason: String) -> DbResult<usize> {
        self.write(move |c, _| stop_all_open(c, now_ms(), &reason)).await
    }

    pub async fn cut_open_exchanges(&self) -> DbResult<usize> {
        self.write(|c, _| cut_open(c, now_ms())).await
    }

    pub async fn unfinished_exchanges(&self) -> DbResult<Vec<Exchange>> {
        self.read(unfinished).await
    }

    pub async fn exchange_resumed(&self, x: Exchange) -> DbResult<()> {
        self.write(move |c, _| resumed(c, now_ms(), &x)).await
    }

    pub async fn give_up_step(&self, step: StepId, error: NewMessage, reason: String) -> DbResult<Option<Message>> {
        self.write(move |c, out| give_up(c, now_ms(), step, error, &reason, out)).await
    }
}
