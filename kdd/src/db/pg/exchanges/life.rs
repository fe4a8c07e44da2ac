//! An exchange's life beyond its steps' transitions, on PostgreSQL (see
//! [`crate::db::exchanges::life`]): stopped for good, cut by a graceful
//! stop, resumed at start, a step given up — and the operations of
//! [`Pg`] over the journal.

use deadpool_postgres::GenericClient;
use kd_proto::types::Message;

use super::{
    Exchange, ExchangeId, ExchangeState, NewExchange, Opened, Step, StepId, StepKey, get, lock_thread, locked,
    open_step, plan_done, settle, steps, stop, unfinished,
};
use crate::db::messages::NewMessage;
use crate::db::pg::{LEASE, ME, Pg, events, messages};
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Stops exchange `x` for good, with an `exchange.stop` event (once: its
/// row is locked while it is read open).
pub(crate) async fn stop_for_good(c: &impl GenericClient, now: i64, x: ExchangeId, reason: &str) -> DbResult<()> {
    let Some(ex) = locked(c, x).await? else { return Ok(()) };
    if ex.state != ExchangeState::Open {
        return Ok(());
    }
    stop(c, now, x, reason).await?;
    events::write(c, now, &ex.stopped(reason)).await
}

/// Stops every open exchange of `thread` (`kd cancel`): none resumes.
pub(crate) async fn stop_thread(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    reason: &str,
) -> DbResult<Vec<ExchangeId>> {
    let st = c.prepare_cached("SELECT id FROM exchanges WHERE thread_id = $1 AND state = 'open' ORDER BY id").await?;
    let open: Vec<ExchangeId> =
        c.query(&st, &[&thread]).await?.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    for &x in &open {
        stop_for_good(c, now, x, reason).await?;
    }
    Ok(open)
}

/// Locks every open exchange's row, in id order (the order every other
/// write over several exchanges locks them in), before a write over all
/// of them.
async fn lock_open(c: &impl GenericClient) -> DbResult<()> {
    let st = c
        .prepare_cached(&format!(
            "SELECT id FROM exchanges WHERE state = 'open' AND node_id = {ME} ORDER BY id FOR NO KEY UPDATE"
        ))
        .await?;
    c.query(&st, &[]).await?;
    Ok(())
}

/// Stops every open exchange (`kd daemon stop --no-resume`).
pub(crate) async fn stop_all_open(c: &impl GenericClient, now: i64, reason: &str) -> DbResult<usize> {
    lock_open(c).await?;
    let open = unfinished(c).await?;
    for x in &open {
        stop_for_good(c, now, x.id, reason).await?;
    }
    Ok(open.len())
}

/// A graceful stop cut the open exchanges: each records when, and which
/// steps were left, for the next start to resume.
pub(crate) async fn cut_open(c: &impl GenericClient, now: i64) -> DbResult<usize> {
    lock_open(c).await?;
    let open = unfinished(c).await?;
    // Released: a node serving the same workspace may take them up at once.
    let st = c
        .prepare_cached(
            "UPDATE exchanges SET cut_at = $2, updated_at = $2, lease_owner = NULL, lease_until = NULL WHERE id = $1",
        )
        .await?;
    for x in &open {
        c.execute(&st, &[&x.id, &now]).await?;
        events::write(c, now, &x.cut(steps(c, x.id).await?)).await?;
    }
    Ok(open.len())
}

/// A starting daemon takes exchange `x` up again.
pub(crate) async fn resumed(c: &impl GenericClient, now: i64, x: &Exchange) -> DbResult<()> {
    let st = c
        .prepare_cached(&format!(
            "UPDATE exchanges SET resumes = resumes + 1, cut_at = NULL, updated_at = $2, node_id = {ME}, \
             lease_owner = {ME}, lease_until = now() + {LEASE}, lease_epoch = lease_epoch + 1 WHERE id = $1"
        ))
        .await?;
    c.execute(&st, &[&x.id, &now]).await?;
    events::write(c, now, &x.resumed(&steps(c, x.id).await?)).await
}

/// Gives up pending step `step` (it was cut too often): `error` — the
/// member's error message, replacing what it had said — is written and
/// the step failed with `reason`, in one transaction.
pub(crate) async fn give_up(
    c: &impl GenericClient,
    now: i64,
    step: StepId,
    error: NewMessage,
    reason: &str,
    out: &mut Outbox,
) -> DbResult<Option<Message>> {
    let pending =
        c.prepare_cached("SELECT exchange_id FROM exchange_steps WHERE id = $1 AND state = 'pending'").await?;
    let Some(row) = c.query_opt(&pending, &[&step]).await? else { return Ok(None) };
    let x: ExchangeId = row.try_get(0)?;
    // In the lock order (thread, exchange, step), then read again: a run
    // may have taken it meanwhile.
    lock_thread(c, &error.thread).await?;
    locked(c, x).await?;
    let st =
        c.prepare_cached("SELECT 1 FROM exchange_steps WHERE id = $1 AND state = 'pending' FOR NO KEY UPDATE").await?;
    if c.query_opt(&st, &[&step]).await?.is_none() {
        return Ok(None);
    }
    let message = messages::append(c, now, error, out).await?;
    let st = c
        .prepare_cached(
            "UPDATE exchange_steps SET state = 'failed', message_seq = $2, reason = $3, updated_at = $4 WHERE id = $1",
        )
        .await?;
    c.execute(&st, &[&step, &(message.seq as i64), &reason, &now]).await?;
    settle(c, now, x).await?;
    Ok(Some(message))
}

/// Writes `notice` from kd and stops exchange `x` for good, in one
/// transaction (a budget reached): a replay never writes it twice.
pub(crate) async fn stop_with_notice(
    c: &impl GenericClient,
    now: i64,
    x: ExchangeId,
    reason: &str,
    notice: NewMessage,
    out: &mut Outbox,
) -> DbResult<bool> {
    lock_thread(c, &notice.thread).await?;
    match locked(c, x).await? {
        Some(ex) if ex.state == ExchangeState::Open => {
            messages::append(c, now, notice, out).await?;
            stop_for_good(c, now, x, reason).await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Begins an exchange that ends by itself once its first steps are
/// answered (a retry): or takes up the open one begun at the same message,
/// or `None` when one was and is over. Two at once for the same message
/// wait on each other (an advisory lock on it) and begin one.
pub(crate) async fn begin_settling(
    c: &impl GenericClient,
    now: i64,
    x: &NewExchange,
) -> DbResult<Option<(Exchange, Vec<Step>)>> {
    let st = c
        .prepare_cached(
            "SELECT pg_advisory_xact_lock(hashtextextended('kd.exchange:' || $1::text || ':' || $2::text || ':' || $3::text, 0))",
        )
        .await?;
    c.execute(&st, &[&x.thread, &(x.seq as i64).to_string(), &x.kind.as_str()]).await?;
    let st = c.prepare_cached("SELECT id FROM exchanges WHERE thread_id = $1 AND seq = $2 AND kind = $3").await?;
    let existing: Option<ExchangeId> = match c.query_opt(&st, &[&x.thread, &(x.seq as i64), &x.kind.as_str()]).await? {
        Some(row) => Some(row.try_get(0)?),
        None => None,
    };
    let ex = match existing {
        Some(id) => match get(c, id).await? {
            Some(e) if e.state == ExchangeState::Open => e,
            _ => return Ok(None),
        },
        None => {
            let e = super::begin(c, now, x).await?;
            plan_done(c, now, e.id, None).await?;
            e
        }
    };
    let steps = steps(c, ex.id).await?;
    Ok(Some((ex, steps)))
}

/// The open council or work exchange begun by message `seq` of `thread`.
pub(crate) async fn open_at(c: &impl GenericClient, thread: &str, seq: u64) -> DbResult<Option<ExchangeId>> {
    let st = c
        .prepare_cached(
            "SELECT id FROM exchanges WHERE thread_id = $1 AND seq = $2 AND state = 'open' \
             AND (kind = 'council' OR kind = 'work')",
        )
        .await?;
    match c.query_opt(&st, &[&thread, &(seq as i64)]).await? {
        Some(row) => Ok(Some(row.try_get(0)?)),
        None => Ok(None),
    }
}

impl Pg {
    pub async fn open_exchange_at(&self, thread: String, seq: u64) -> DbResult<Option<ExchangeId>> {
        open_at(&self.conn().await?, &thread, seq).await
    }

    pub async fn begin_settling_exchange(&self, x: NewExchange) -> DbResult<Option<(Exchange, Vec<Step>)>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let begun = begin_settling(&tx, now_ms(), &x).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(begun)
    }

    pub async fn exchange(&self, x: ExchangeId) -> DbResult<Exchange> {
        get(&self.conn().await?, x).await?.ok_or_else(|| DbError::NotFound(format!("exchange {x}")))
    }

    pub async fn open_step(&self, x: ExchangeId, key: StepKey) -> DbResult<Opened> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let opened = open_step(&tx, now_ms(), x, &key).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(opened)
    }

    pub async fn exchange_steps(&self, x: ExchangeId) -> DbResult<Vec<Step>> {
        steps(&self.conn().await?, x).await
    }

    pub async fn plan_done(&self, x: ExchangeId, result: Option<serde_json::Value>) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        plan_done(&tx, now_ms(), x, result.as_ref()).await?;
        self.commit(tx, Outbox::default()).await
    }

    pub async fn stop_exchange(&self, x: ExchangeId, reason: String) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        stop_for_good(&tx, now_ms(), x, &reason).await?;
        self.commit(tx, Outbox::default()).await
    }

    pub async fn stop_exchange_with_notice(&self, x: ExchangeId, reason: String, notice: NewMessage) -> DbResult<bool> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let stopped = stop_with_notice(&tx, now_ms(), x, &reason, notice, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(stopped)
    }

    pub async fn stop_thread_exchanges(&self, thread: String, reason: String) -> DbResult<Vec<ExchangeId>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let stopped = stop_thread(&tx, now_ms(), &thread, &reason).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(stopped)
    }

    pub async fn stop_open_exchanges(&self, reason: String) -> DbResult<usize> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let n = stop_all_open(&tx, now_ms(), &reason).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(n)
    }

    pub async fn cut_open_exchanges(&self) -> DbResult<usize> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let n = cut_open(&tx, now_ms()).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(n)
    }

    pub async fn unfinished_exchanges(&self) -> DbResult<Vec<Exchange>> {
        unfinished(&self.conn().await?).await
    }

    pub async fn exchange_resumed(&self, x: Exchange) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        resumed(&tx, now_ms(), &x).await?;
        self.commit(tx, Outbox::default()).await
    }

    pub async fn give_up_step(&self, step: StepId, error: NewMessage, reason: String) -> DbResult<Option<Message>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let message = give_up(&tx, now_ms(), step, error, &reason, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(message)
    }
}
