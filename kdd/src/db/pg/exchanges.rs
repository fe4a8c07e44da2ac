//! The exchange journal on PostgreSQL: the table functions of
//! [`crate::db::exchanges`], one for one, over a pooled client or a
//! transaction. The rules are the same (a step exists once per key, moves
//! only forward, is taken by one run); what SQLite's single writer made
//! safe by running one job at a time is made safe here by row locks:
//!
//! - **taking a step** is a compare-and-set (`UPDATE … WHERE state =
//!   'pending' RETURNING`): of two transactions taking it, the second waits
//!   for the first's row lock, re-reads the row and finds it taken;
//! - **an exchange's row is locked** (`FOR NO KEY UPDATE`) before a write
//!   that reads its state or its steps to decide (open a step, end one,
//!   settle, stop, fix a choice), so that two steps ending at once settle
//!   it, and a step is never opened in an exchange being stopped;
//! - **one lock order**: thread row (an append) → exchange row → step rows
//!   → session row. A write that appends after touching an exchange (kd's
//!   own step, a notice) locks its thread first.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;

use crate::db::exchanges::{
    Exchange, ExchangeId, ExchangeState, Kind, NewExchange, Opened, Purpose, RunEnd, SUPERSEDED, Step, StepId, StepKey,
    StepState, no_exchange,
};
use crate::db::pg::{LEASE, ME};
use crate::db::{DbError, DbResult};

pub(crate) mod info;
pub(crate) mod kd_step;
pub(crate) mod life;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use crate::db::exchanges::{EXCHANGE, STEP};

/// An `exchanges` row read with [`EXCHANGE`].
pub(crate) fn exchange(r: &Row) -> DbResult<Exchange> {
    crate::db::exchanges::read_exchange(r)
}

/// An `exchange_steps` row read with [`STEP`].
fn step(r: &Row) -> DbResult<Step> {
    crate::db::exchanges::read_step(r)
}

async fn insert_step(c: &impl GenericClient, now: i64, x: ExchangeId, key: &StepKey) -> DbResult<()> {
    let st = c
        .prepare_cached(
            "INSERT INTO exchange_steps (exchange_id, round, member, purpose, cause, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .await?;
    c.execute(&st, &[&x, &i64::from(key.round), &key.member, &key.purpose.as_str(), &(key.cause as i64), &now]).await?;
    Ok(())
}

/// Locks the row of thread `id` for the rest of the transaction, as an
/// append would: a write that appends after touching an exchange takes
/// it first (the lock order above).
pub(crate) async fn lock_thread(c: &impl GenericClient, id: &str) -> DbResult<()> {
    let st = c.prepare_cached("SELECT 1 FROM threads WHERE id = $1 FOR NO KEY UPDATE").await?;
    c.query_opt(&st, &[&id]).await?;
    Ok(())
}

/// The exchange `id`, its row locked for the rest of the transaction: what
/// a write reads its state from before it decides.
pub(crate) async fn locked(c: &impl GenericClient, id: ExchangeId) -> DbResult<Option<Exchange>> {
    let st = c.prepare_cached(&format!("SELECT {EXCHANGE} FROM exchanges WHERE id = $1 FOR NO KEY UPDATE")).await?;
    c.query_opt(&st, &[&id]).await?.as_ref().map(exchange).transpose()
}

/// Begins an exchange with its first steps pending. A King message's
/// exchange (council, work) supersedes the thread's open one of those
/// kinds: it is stopped and its pending steps cancelled — but not a
/// question routed to a node that has not begun it yet (its first answers
/// are owed all the same: `council::send::take_routed`).
pub(crate) async fn begin(c: &impl GenericClient, now: i64, x: &NewExchange) -> DbResult<Exchange> {
    begin_for(c, now, x, None).await
}

/// [`begin`], to be driven by `node` when given (a question routed to the
/// node that has the thread's workspace: it is woken, and takes it with
/// [`super::leases::claim`]); else by this node, which leases it at once.
pub(crate) async fn begin_for(
    c: &impl GenericClient,
    now: i64,
    x: &NewExchange,
    node: Option<&str>,
) -> DbResult<Exchange> {
    if x.supersedes() {
        let st = c
            .prepare_cached(
                "SELECT id FROM exchanges WHERE thread_id = $1 AND state = 'open' \
                 AND (kind = 'council' OR kind = 'work') AND NOT (plan::jsonb ? 'routed') ORDER BY id",
            )
            .await?;
        let open: Vec<ExchangeId> =
            c.query(&st, &[&x.thread]).await?.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
        for id in open {
            stop(c, now, id, SUPERSEDED).await?;
        }
    }
    let plan = serde_json::to_string(&x.plan).map_err(|e| DbError::Invalid(format!("an exchange's plan: {e}")))?;
    let st = c
        .prepare_cached(&format!(
            "INSERT INTO exchanges (thread_id, seq, kind, correlation_id, plan, created_at, updated_at, \
             node_id, lease_owner, lease_until, path) \
             SELECT $1, $2, $3, $4, $5, $6, $6, coalesce($7, {ME}), \
             CASE WHEN $7 IS NULL THEN {ME} END, CASE WHEN $7 IS NULL THEN now() + {LEASE} END, $8 \
             RETURNING {EXCHANGE}"
        ))
        .await?;
    let row = c
        .query_one(&st, &[&x.thread, &(x.seq as i64), &x.kind.as_str(), &x.correlation_id, &plan, &now, &node, &x.path])
        .await?;
    if let Some(node) = node {
        // Delivered at commit, as the question is.
        c.execute("SELECT pg_notify('kd_work', $1)", &[&node]).await?;
    }
    let begun = exchange(&row)?;
    for key in &x.first_steps {
        insert_step(c, now, begun.id, key).await?;
    }
    Ok(begun)
}

/// The exchange `id`.
pub(crate) async fn get(c: &impl GenericClient, id: ExchangeId) -> DbResult<Option<Exchange>> {
    let st = c.prepare_cached(&format!("SELECT {EXCHANGE} FROM exchanges WHERE id = $1")).await?;
    c.query_opt(&st, &[&id]).await?.as_ref().map(exchange).transpose()
}

/// The step `key` of exchange `x`, made pending if it is new — only while
/// the exchange is open; else the exchange's end.
pub(crate) async fn open_step(c: &impl GenericClient, now: i64, x: ExchangeId, key: &StepKey) -> DbResult<Opened> {
    let state = match locked(c, x).await? {
        Some(e) => e.state,
        None => return Err(no_exchange(x)),
    };
    if state != ExchangeState::Open {
        return Ok(Opened::Ended(state));
    }
    insert_step(c, now, x, key).await?;
    let st = c
        .prepare_cached(&format!(
            "SELECT {STEP} FROM exchange_steps WHERE exchange_id = $1 AND round = $2 AND member = $3 \
             AND purpose = $4 AND cause = $5"
        ))
        .await?;
    let row =
        c.query_one(&st, &[&x, &i64::from(key.round), &key.member, &key.purpose.as_str(), &(key.cause as i64)]).await?;
    Ok(Opened::Step(step(&row)?))
}

/// Takes a pending step for run `run`, at `reply_to` (kept from its first
/// start): false when it was not pending — another run holds it or it is
/// over — and then the run must not start. A compare-and-set: of two runs
/// taking it at once, one does.
pub(crate) async fn step_started(
    c: &impl GenericClient,
    now: i64,
    id: StepId,
    run: &str,
    reply_to: Option<u64>,
) -> DbResult<bool> {
    let st = c
        .prepare_cached(
            "UPDATE exchange_steps SET state = 'running', run_id = $2, attempts = attempts + 1, \
             reply_to = coalesce(reply_to, $3), updated_at = $4 WHERE id = $1 AND (state = 'pending' OR (state = \
             'cancelled' AND run_id IS NULL AND reason = $5 AND round = 1 AND purpose = 'answer')) RETURNING id",
        )
        .await?;
    let taken = c.query_opt(&st, &[&id, &run, &reply_to.map(|s| s as i64), &now, &SUPERSEDED]).await?;
    Ok(taken.is_some())
}

/// Records the backend's own session id of the run holding a step while it
/// runs (a run that is interrupted before gives it with its end).
pub(crate) async fn step_session(c: &impl GenericClient, run: &str, backend_session: &str) -> DbResult<()> {
    let st = c
        .prepare_cached("UPDATE exchange_steps SET backend_session = $2 WHERE run_id = $1 AND state = 'running'")
        .await?;
    c.execute(&st, &[&run, &backend_session]).await?;
    // A session the backend opened for this run knows it too: a resumed
    // thread's next run goes on in it even if this one is cut. (A session
    // that had one keeps it until the run ends, where a fork is told.)
    let st = c
        .prepare_cached(
            "UPDATE sessions SET backend_session_id = $2 WHERE id = (SELECT session_id FROM runs WHERE id = $1) \
             AND backend_session_id IS NULL",
        )
        .await?;
    c.execute(&st, &[&run, &backend_session]).await?;
    Ok(())
}

/// The end of the run holding a step (only that run's, only once); then
/// its exchange settles if that was its last unfinished step.
pub(crate) async fn step_finished(c: &impl GenericClient, now: i64, run: &str, end: &RunEnd) -> DbResult<()> {
    let st =
        c.prepare_cached("SELECT id, exchange_id FROM exchange_steps WHERE run_id = $1 AND state = 'running'").await?;
    let Some(row) = c.query_opt(&st, &[&run]).await? else {
        return Ok(());
    };
    let (id, x): (StepId, ExchangeId) = (row.try_get(0)?, row.try_get(1)?);
    let open = locked(c, x).await?.is_some_and(|e| e.state == ExchangeState::Open);
    let e = end.step(open);
    let st = c
        .prepare_cached(
            "UPDATE exchange_steps SET state = $2, message_seq = $3, reason = $4, \
             replaces_seq = coalesce($5, replaces_seq), backend_session = coalesce(backend_session, $8), \
             updated_at = $6 WHERE id = $1 AND state = 'running' AND run_id = $7",
        )
        .await?;
    let (seq, replaces) = (e.seq.map(|s| s as i64), e.replaces.map(|s| s as i64));
    c.execute(&st, &[&id, &e.state, &seq, &e.reason, &replaces, &now, &run, &e.backend_session]).await?;
    settle(c, now, x).await
}

/// Ends an open exchange whose driver took every planned step once none
/// is unfinished. Its row is locked first, so that of two steps ending at
/// once, the second to commit sees the first's end and settles it.
pub(crate) async fn settle(c: &impl GenericClient, now: i64, x: ExchangeId) -> DbResult<()> {
    if locked(c, x).await?.is_none() {
        return Ok(());
    }
    let st = c
        .prepare_cached(
            "UPDATE exchanges SET state = 'done', ended_at = $2, updated_at = $2 WHERE id = $1 AND state = 'open' \
             AND plan_done = 1 AND NOT EXISTS (SELECT 1 FROM exchange_steps WHERE exchange_id = $1 \
             AND (state = 'pending' OR state = 'running'))",
        )
        .await?;
    c.execute(&st, &[&x, &now]).await?;
    Ok(())
}

/// The driver took every planned step (with what it came to, for a
/// completion); the exchange ends once no step is unfinished.
pub(crate) async fn plan_done(c: &impl GenericClient, now: i64, x: ExchangeId, result: Option<&Value>) -> DbResult<()> {
    let result = result.map(Value::to_string);
    let st = c
        .prepare_cached(
            "UPDATE exchanges SET plan_done = 1, result = coalesce($2, result), updated_at = $3 WHERE id = $1",
        )
        .await?;
    c.execute(&st, &[&x, &result, &now]).await?;
    settle(c, now, x).await
}

/// Stops an open exchange for good: its pending steps are cancelled (a
/// running one ends as its run does).
pub(crate) async fn stop(c: &impl GenericClient, now: i64, x: ExchangeId, reason: &str) -> DbResult<()> {
    let st = c
        .prepare_cached(
            "UPDATE exchanges SET state = 'stopped', reason = $2, ended_at = $3, updated_at = $3 \
             WHERE id = $1 AND state = 'open'",
        )
        .await?;
    if c.execute(&st, &[&x, &reason, &now]).await? == 1 {
        let st = c
            .prepare_cached(
                "UPDATE exchange_steps SET state = 'cancelled', reason = $2, updated_at = $3 \
                 WHERE exchange_id = $1 AND state = 'pending'",
            )
            .await?;
        c.execute(&st, &[&x, &reason, &now]).await?;
    }
    Ok(())
}

/// This node's open exchanges, oldest first: what a daemon starting
/// resumes (another node's are that node's to drive).
pub(crate) async fn unfinished(c: &impl GenericClient) -> DbResult<Vec<Exchange>> {
    let st = c
        .prepare_cached(&format!(
            "SELECT {EXCHANGE} FROM exchanges WHERE state = 'open' AND node_id = {ME} ORDER BY created_at, id"
        ))
        .await?;
    c.query(&st, &[]).await?.iter().map(exchange).collect()
}

/// Every step of an exchange, in the order they were made.
pub(crate) async fn steps(c: &impl GenericClient, x: ExchangeId) -> DbResult<Vec<Step>> {
    let st = c.prepare_cached(&format!("SELECT {STEP} FROM exchange_steps WHERE exchange_id = $1 ORDER BY id")).await?;
    c.query(&st, &[&x]).await?.iter().map(step).collect()
}
