//! Approvals on PostgreSQL: the SQL of [`crate::db::approvals`]'s
//! operations. A decision locks its row (`FOR UPDATE`): two nodes deciding
//! the same approval decide it once.

use deadpool_postgres::GenericClient;
use kd_proto::approval::{Approval, ApprovalState, DecidedBy, Scope};
use tokio_postgres::Row;

use super::Pg;
use super::events::write as record_event;
use crate::db::approvals::{Decide, Decided, MAX_LIST, apply, from_json, json_of, record, told};
use crate::db::{DbError, DbResult, Outbox, now_ms};

const COLUMNS: &str = "id, thread_id, member, run_id, tool, scopes, state, decided_by, scope, message, requested_at, decided_at, \
     expires_at";

fn row(r: &Row) -> DbResult<Approval> {
    let text = |i: usize| r.try_get::<_, &str>(i);
    let opt = |i: usize| r.try_get::<_, Option<&str>>(i);
    let state = text(6)?;
    Ok(Approval {
        id: r.try_get(0)?,
        thread: r.try_get(1)?,
        member: r.try_get(2)?,
        run: r.try_get(3)?,
        tool: from_json(text(4)?).map_err(DbError::Internal)?,
        scopes: from_json(text(5)?).map_err(DbError::Internal)?,
        state: ApprovalState::parse(state).ok_or_else(|| DbError::Internal(format!("an approval's state {state}")))?,
        decided_by: opt(7)?.and_then(DecidedBy::parse),
        scope: opt(8)?.and_then(Scope::parse),
        message: r.try_get(9)?,
        requested_at_ms: r.try_get(10)?,
        decided_at_ms: r.try_get(11)?,
        expires_at_ms: r.try_get(12)?,
    })
}

async fn get(c: &impl GenericClient, id: &str, lock: bool) -> DbResult<Option<Approval>> {
    let sql = format!("SELECT {COLUMNS} FROM approvals WHERE id = $1{}", if lock { " FOR UPDATE" } else { "" });
    c.query_opt(&c.prepare_cached(&sql).await?, &[&id]).await?.map(|r| row(&r)).transpose()
}

async fn decide(c: &impl GenericClient, now: i64, d: &Decide, out: &mut Outbox) -> DbResult<Decided> {
    let a = get(c, &d.id, true).await?.ok_or_else(|| DbError::NotFound(format!("approval {}", d.id)))?;
    if !a.state.is_pending() {
        return Ok(Decided::Already(a));
    }
    let new = apply(&a, d, now)?;
    c.execute(
        &c.prepare_cached(
            "UPDATE approvals SET state = $2, decided_by = $3, scope = $4, message = $5, decided_at = $6 \
             WHERE id = $1 AND state = 'pending'",
        )
        .await?,
        &[
            &new.id,
            &new.state.as_str(),
            &new.decided_by.map(DecidedBy::as_str),
            &new.scope.map(Scope::as_str),
            &new.message,
            &now,
        ],
    )
    .await?;
    record_event(c, now, &record(&new)).await?;
    told(&new, out);
    Ok(Decided::Now(new))
}

impl Pg {
    /// Records an approval (pending, or decided by the policy) asked by a
    /// run of `node`, and tells the thread.
    pub async fn add_approval(&self, a: Approval, node: String) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        tx.execute(
            &tx.prepare_cached(
                "INSERT INTO approvals (id, thread_id, member, run_id, node_id, tool, scopes, state, decided_by, \
                 scope, message, requested_at, decided_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            )
            .await?,
            &[
                &a.id,
                &a.thread,
                &a.member,
                &a.run,
                &node,
                &json_of(&a.tool)?,
                &json_of(&a.scopes)?,
                &a.state.as_str(),
                &a.decided_by.map(DecidedBy::as_str),
                &a.scope.map(Scope::as_str),
                &a.message,
                &a.requested_at_ms,
                &a.decided_at_ms,
                &a.expires_at_ms,
            ],
        )
        .await?;
        record_event(&tx, a.requested_at_ms, &record(&a)).await?;
        let mut out = Outbox::default();
        told(&a, &mut out);
        self.commit(tx, out).await
    }

    /// One approval.
    pub async fn approval(&self, id: String) -> DbResult<Option<Approval>> {
        get(&self.conn().await?, &id, false).await
    }

    /// Approvals, newest first: pending ones only unless `all`; of one
    /// thread or all.
    pub async fn approvals(&self, all: bool, thread: Option<String>, limit: u32) -> DbResult<Vec<Approval>> {
        let c = self.conn().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM approvals WHERE ($1 OR state = 'pending') AND ($2::TEXT IS NULL OR thread_id = $2) \
             ORDER BY requested_at DESC, id DESC LIMIT $3"
        );
        let limit = i64::from(limit.min(MAX_LIST));
        c.query(&c.prepare_cached(&sql).await?, &[&all, &thread, &limit]).await?.iter().map(row).collect()
    }

    /// Ends a pending approval as `d` says (see [`Decided`]).
    pub async fn decide_approval(&self, d: Decide) -> DbResult<Decided> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let done = decide(&tx, now_ms(), &d, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(done)
    }

    /// The approvals of `member` on `thread` the King granted for the
    /// thread, or for the run `run`.
    pub async fn approvals_granted(
        &self,
        thread: String,
        member: String,
        run: Option<String>,
    ) -> DbResult<Vec<Approval>> {
        let c = self.conn().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM approvals WHERE thread_id = $1 AND member = $2 AND state = 'approved' \
             AND (scope = 'thread' OR (scope = 'run' AND run_id = $3)) ORDER BY requested_at LIMIT 1000"
        );
        c.query(&c.prepare_cached(&sql).await?, &[&thread, &member, &run]).await?.iter().map(row).collect()
    }

    /// Cancels every pending approval asked by a run of `node` (its runs
    /// died with it), saying `message`; the approvals cancelled.
    pub async fn cancel_node_approvals(&self, node: String, message: String) -> DbResult<Vec<Approval>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let done = cancel_of_node(&tx, now_ms(), &node, &message, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(done)
    }
}

/// Cancels every pending approval asked by a run of `node`, saying
/// `message`, and tells their threads (after the commit): at `node`'s next
/// start, or when a survivor reaps it ([`super::leases::reap`]).
pub(crate) async fn cancel_of_node(
    c: &impl GenericClient,
    now: i64,
    node: &str,
    message: &str,
    out: &mut Outbox,
) -> DbResult<Vec<Approval>> {
    let ids: Vec<String> = c
        .query(
            &c.prepare_cached("SELECT id FROM approvals WHERE node_id = $1 AND state = 'pending' FOR UPDATE").await?,
            &[&node],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let mut done = Vec::new();
    for id in ids {
        let d =
            Decide { id, state: ApprovalState::Cancelled, by: None, scope: None, message: Some(message.to_string()) };
        if let Decided::Now(a) = decide(c, now, &d, out).await? {
            done.push(a);
        }
    }
    Ok(done)
}
