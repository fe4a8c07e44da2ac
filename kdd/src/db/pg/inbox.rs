//! Members' inboxes, participants and delivery modes on PostgreSQL: the
//! operations of [`crate::db::inbox`]. A member's inbox on a thread is
//! counted and trimmed by one writer at a time: [`keep`] takes a
//! transaction-scoped advisory lock on it first, as the SQLite writer's
//! serial execution did.

use deadpool_postgres::GenericClient;
use kd_proto::types::{DeliveryMode, InboxItem, InboxStatus, Overflow, Role, RouteType};
use serde_json::json;
use tokio_postgres::Row;

use super::Pg;
use super::events;
use crate::db::events::NewEvent;
use crate::db::inbox::{Entry, Kept, Query, role_str};
use crate::db::{DbResult, now_ms};

/// Pending entries of a member on a thread.
async fn pending(c: &impl GenericClient, thread: &str, member: &str) -> DbResult<u32> {
    let n: i64 = c
        .query_one(
            &c.prepare_cached("SELECT count(*) FROM inbox WHERE thread_id = $1 AND member = $2 AND status = 'pending'")
                .await?,
            &[&thread, &member],
        )
        .await?
        .try_get(0)?;
    Ok(n as u32)
}

/// Keeps `e` in its member's inbox, making room or refusing by the
/// member's overflow rule when it is full.
pub(crate) async fn keep(c: &impl GenericClient, now: i64, e: &Entry) -> DbResult<Kept> {
    // Two routings to one member count its inbox one after the other.
    c.execute(
        &c.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended('kd.inbox:' || $1 || chr(0) || $2, 0))")
            .await?,
        &[&e.thread, &e.member],
    )
    .await?;
    let mut size = pending(c, &e.thread, &e.member).await?;
    let mut dropped = None;
    if size >= e.limit {
        if e.overflow == Overflow::RejectNew {
            record(c, now, "queue.rejected", e, json!({"seq": e.seq, "queue_size": size, "limit": e.limit})).await?;
            return Ok(Kept::Rejected { size });
        }
        let oldest: i64 = c
            .query_one(
                &c.prepare_cached(
                    "SELECT id FROM inbox WHERE thread_id = $1 AND member = $2 AND status = 'pending' ORDER BY id LIMIT 1",
                )
                .await?,
                &[&e.thread, &e.member],
            )
            .await?
            .try_get(0)?;
        c.execute(
            &c.prepare_cached("UPDATE inbox SET status = 'dropped', done_at = $2 WHERE id = $1").await?,
            &[&oldest, &now],
        )
        .await?;
        record(c, now, "queue.dropped", e, json!({"inbox": oldest, "for_seq": e.seq, "limit": e.limit})).await?;
        dropped = Some(oldest as u64);
        size -= 1;
    }
    let id: i64 = c
        .query_one(
            &c.prepare_cached(
                "INSERT INTO inbox (thread_id, member, seq, sender, type, role, status, queued_at)
                 VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7) RETURNING id",
            )
            .await?,
            &[&e.thread, &e.member, &(e.seq as i64), &e.from, &e.route.as_str(), &role_str(e.role), &now],
        )
        .await?
        .try_get(0)?;
    Ok(Kept::Queued { id: id as u64, size: size + 1, dropped })
}

async fn record(c: &impl GenericClient, now: i64, kind: &str, e: &Entry, data: serde_json::Value) -> DbResult<()> {
    events::record(
        c,
        now,
        &NewEvent {
            kind,
            thread: Some(&e.thread),
            agent: Some(&e.member),
            from: Some(&e.from),
            to: std::slice::from_ref(&e.member),
            correlation_id: Some(&e.correlation_id),
            data,
            ..Default::default()
        },
    )
    .await
}

/// Marks what a member's prompt gave it (every entry of the thread up to
/// `upto`) processed; returns their message seqs.
pub(crate) async fn given(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    member: &str,
    upto: u64,
    run: &str,
) -> DbResult<Vec<u64>> {
    let rows = c
        .query(
            &c.prepare_cached(
                "WITH given AS (
                     UPDATE inbox SET status = 'processed', done_at = $4
                     WHERE thread_id = $1 AND member = $2 AND seq <= $3 AND (status = 'pending' OR status = 'read')
                     RETURNING id, seq)
                 SELECT seq FROM given ORDER BY id",
            )
            .await?,
            &[&thread, &member, &(upto as i64), &now],
        )
        .await?;
    let seqs: Vec<u64> = rows.iter().map(|r| r.try_get::<_, i64>(0).map(|s| s as u64)).collect::<Result<_, _>>()?;
    if !seqs.is_empty() {
        events::record(
            c,
            now,
            &NewEvent {
                kind: "delivery.prompt",
                thread: Some(thread),
                agent: Some(member),
                to: &[member.to_string()],
                correlation_id: Some(run),
                data: json!({"seqs": seqs, "run": run}),
                ..Default::default()
            },
        )
        .await?;
    }
    Ok(seqs)
}

/// A member's inbox entries, oldest first, with their messages' bodies.
pub(crate) async fn read(c: &impl GenericClient, now: i64, q: &Query) -> DbResult<Vec<InboxItem>> {
    let types: Vec<&str> = q.types.iter().map(|t| t.as_str()).collect();
    let status = q.status.unwrap_or(InboxStatus::Pending);
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT i.id, i.member, i.thread_id, i.seq, i.sender, i.type, i.role, i.status, i.queued_at, i.read_at,
                        coalesce(m.body, '')
                 FROM inbox i LEFT JOIN messages m ON m.thread_id = i.thread_id AND m.seq = i.seq
                 WHERE i.member = $1 AND ($2::text IS NULL OR i.thread_id = $2)
                   AND (i.status = $3 OR ($6 AND i.status = 'read'))
                   AND (cardinality($4::text[]) = 0 OR i.type = ANY($4))
                 ORDER BY i.id LIMIT $5",
            )
            .await?,
            &[&q.member, &q.thread, &status.as_str(), &types, &i64::from(q.limit), &q.also_read],
        )
        .await?;
    let mut items: Vec<InboxItem> = rows.iter().map(item).collect::<DbResult<_>>()?;
    if q.mark_read && !items.is_empty() {
        let mark = c.prepare_cached("UPDATE inbox SET status = 'read', read_at = $2 WHERE id = $1").await?;
        for i in &mut items {
            c.execute(&mark, &[&(i.id as i64), &now]).await?;
            i.status = InboxStatus::Read;
            i.read_at_ms = Some(now);
        }
    }
    let ids: Vec<u64> = items.iter().map(|i| i.id).collect();
    events::record(
        c,
        now,
        &NewEvent {
            kind: "queue.read",
            thread: q.thread.as_deref(),
            agent: Some(&q.member),
            data: json!({"ids": ids, "status": status, "types": q.types, "mark_read": q.mark_read}),
            ..Default::default()
        },
    )
    .await?;
    Ok(items)
}

fn item(r: &Row) -> DbResult<InboxItem> {
    let route: &str = r.try_get(5)?;
    let role: &str = r.try_get(6)?;
    let status: &str = r.try_get(7)?;
    Ok(InboxItem {
        id: r.try_get::<_, i64>(0)? as u64,
        member: r.try_get(1)?,
        thread: r.try_get(2)?,
        seq: r.try_get::<_, i64>(3)? as u64,
        from: r.try_get(4)?,
        route_type: RouteType::parse(route).unwrap_or(RouteType::PointToPoint),
        role: if role == "cc" { Role::Cc } else { Role::To },
        status: InboxStatus::parse(status).unwrap_or(InboxStatus::Pending),
        queued_at_ms: r.try_get(8)?,
        read_at_ms: r.try_get(9)?,
        body: r.try_get(10)?,
    })
}

/// Sets the status of a member's entries `ids`; returns how many changed.
pub(crate) async fn process(
    c: &impl GenericClient,
    now: i64,
    member: &str,
    ids: &[u64],
    status: InboxStatus,
) -> DbResult<u32> {
    let stmt = c.prepare_cached("UPDATE inbox SET status = $3, done_at = $4 WHERE id = $1 AND member = $2").await?;
    let mut n = 0;
    for id in ids {
        n += c.execute(&stmt, &[&(*id as i64), &member, &status.as_str(), &now]).await? as u32;
    }
    events::record(
        c,
        now,
        &NewEvent {
            kind: "queue.process",
            agent: Some(member),
            data: json!({"ids": ids, "status": status, "updated": n}),
            ..Default::default()
        },
    )
    .await?;
    Ok(n)
}

/// Records that `names` took part in a routed message of `thread`; returns
/// the thread's participants, first seen first.
pub(crate) async fn participate(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    names: &[String],
) -> DbResult<Vec<String>> {
    let upsert = c
        .prepare_cached(
            "INSERT INTO participants (thread_id, name, first_at, last_at) VALUES ($1, $2, $3, $3)
             ON CONFLICT (thread_id, name) DO UPDATE SET last_at = excluded.last_at",
        )
        .await?;
    for n in names {
        c.execute(&upsert, &[&thread, n, &now]).await?;
    }
    let rows = c
        .query(
            &c.prepare_cached("SELECT name FROM participants WHERE thread_id = $1 ORDER BY first_at, rowid").await?,
            &[&thread],
        )
        .await?;
    Ok(rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?)
}

/// `queue.subscribe`: `member` takes `types` in `mode` in `workspace`.
pub(crate) async fn subscribe(
    c: &impl GenericClient,
    now: i64,
    workspace: &str,
    member: &str,
    types: &[RouteType],
    mode: DeliveryMode,
) -> DbResult<()> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO delivery_overrides (workspace, member, type, mode) VALUES ($1, $2, $3, $4)
             ON CONFLICT (workspace, member, type) DO UPDATE SET mode = excluded.mode",
        )
        .await?;
    for t in types {
        c.execute(&stmt, &[&workspace, &member, &t.as_str(), &mode.as_str()]).await?;
    }
    events::record(
        c,
        now,
        &NewEvent {
            kind: "queue.subscribe",
            agent: Some(member),
            data: json!({"workspace": workspace, "types": types, "mode": mode}),
            ..Default::default()
        },
    )
    .await
}

/// The modes a member chose per type in `workspace`.
pub(crate) async fn overrides(
    c: &impl GenericClient,
    workspace: &str,
    member: &str,
) -> DbResult<Vec<(RouteType, DeliveryMode)>> {
    let rows = c
        .query(
            &c.prepare_cached("SELECT type, mode FROM delivery_overrides WHERE workspace = $1 AND member = $2").await?,
            &[&workspace, &member],
        )
        .await?;
    let mut out = Vec::new();
    for row in &rows {
        let (t, m): (&str, &str) = (row.try_get(0)?, row.try_get(1)?);
        if let Some(t) = RouteType::parse(t) {
            out.push((t, if m == "queued" { DeliveryMode::Queued } else { DeliveryMode::Immediate }));
        }
    }
    Ok(out)
}

impl Pg {
    pub async fn inbox(&self, q: Query) -> DbResult<Vec<InboxItem>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let items = read(&tx, now_ms(), &q).await?;
        self.commit(tx, Default::default()).await?;
        Ok(items)
    }

    pub async fn inbox_process(&self, member: String, ids: Vec<u64>, status: InboxStatus) -> DbResult<u32> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let n = process(&tx, now_ms(), &member, &ids, status).await?;
        self.commit(tx, Default::default()).await?;
        Ok(n)
    }

    pub async fn inbox_given(&self, thread: String, member: String, upto: u64, run: String) -> DbResult<Vec<u64>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let seqs = given(&tx, now_ms(), &thread, &member, upto, &run).await?;
        self.commit(tx, Default::default()).await?;
        Ok(seqs)
    }

    pub async fn delivery_subscribe(
        &self,
        workspace: String,
        member: String,
        types: Vec<RouteType>,
        mode: DeliveryMode,
    ) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        subscribe(&tx, now_ms(), &workspace, &member, &types, mode).await?;
        self.commit(tx, Default::default()).await
    }

    pub async fn delivery_overrides(
        &self,
        workspace: String,
        member: String,
    ) -> DbResult<Vec<(RouteType, DeliveryMode)>> {
        overrides(&self.conn().await?, &workspace, &member).await
    }
}
