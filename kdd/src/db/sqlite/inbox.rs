//! The SQLite side of [`crate::db::inbox`]: its SQL and the engine's operations.

use kd_proto::types::{DeliveryMode, InboxItem, InboxStatus, Overflow, RouteType};
use rusqlite::{Connection, Row, params};

use super::events;
use crate::db::inbox::{Entry, Kept, Query, mode_of, processed, prompted, role_str, subscribed, was_read};
use crate::db::{DbResult, json_list};

/// Pending entries of a member on a thread.
fn pending(conn: &Connection, thread: &str, member: &str) -> DbResult<u32> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM inbox WHERE thread_id = ?1 AND member = ?2 AND status = 'pending'")?
        .query_row(params![thread, member], |r| r.get(0))?;
    Ok(n as u32)
}

/// Keeps `e` in its member's inbox, making room or refusing by the
/// member's overflow rule when it is full.
pub fn keep(conn: &Connection, now: i64, e: &Entry) -> DbResult<Kept> {
    let mut size = pending(conn, &e.thread, &e.member)?;
    let mut dropped = None;
    if size >= e.limit {
        if e.overflow == Overflow::RejectNew {
            events::record(conn, now, &e.rejected(size))?;
            return Ok(Kept::Rejected { size });
        }
        let oldest: i64 = conn
            .prepare_cached(
                "SELECT id FROM inbox WHERE thread_id = ?1 AND member = ?2 AND status = 'pending' ORDER BY id LIMIT 1",
            )?
            .query_row(params![e.thread, e.member], |r| r.get(0))?;
        conn.prepare_cached("UPDATE inbox SET status = 'dropped', done_at = ?2 WHERE id = ?1")?
            .execute(params![oldest, now])?;
        events::record(conn, now, &e.dropped_for(oldest))?;
        dropped = Some(oldest as u64);
        size -= 1;
    }
    conn.prepare_cached(
        "INSERT INTO inbox (thread_id, member, seq, sender, type, role, status, queued_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7)",
    )?
    .execute(params![e.thread, e.member, e.seq as i64, e.from, e.route.as_str(), role_str(e.role), now])?;
    let id = conn.last_insert_rowid() as u64;
    Ok(Kept::Queued { id, size: size + 1, dropped })
}

/// Marks what a member's prompt gave it (every entry of the thread up to
/// `upto`) processed; returns their message seqs.
pub fn given(conn: &Connection, now: i64, thread: &str, member: &str, upto: u64, run: &str) -> DbResult<Vec<u64>> {
    let mut stmt = conn.prepare_cached(
        "UPDATE inbox SET status = 'processed', done_at = ?4
         WHERE thread_id = ?1 AND member = ?2 AND seq <= ?3 AND (status = 'pending' OR status = 'read')
         RETURNING seq",
    )?;
    let seqs: Vec<u64> = stmt
        .query_map(params![thread, member, upto as i64, now], |r| r.get::<_, i64>(0))?
        .map(|s| s.map(|s| s as u64))
        .collect::<Result<_, _>>()?;
    if !seqs.is_empty() {
        events::write(conn, now, &prompted(thread, member, run, &seqs))?;
    }
    Ok(seqs)
}

/// A member's inbox entries, oldest first, with their messages' bodies.
pub fn read(conn: &Connection, now: i64, q: &Query) -> DbResult<Vec<InboxItem>> {
    let types: Vec<String> = q.types.iter().map(|t| t.as_str().to_string()).collect();
    let status = q.status.unwrap_or(InboxStatus::Pending);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT i.id, i.member, i.thread_id, i.seq, i.sender, i.type, i.role, i.status, i.queued_at, i.read_at,
                coalesce(m.body, '')
         FROM inbox i LEFT JOIN messages m ON m.thread_id = i.thread_id AND m.seq = i.seq
         WHERE i.member = ?1 AND (?2 IS NULL OR i.thread_id = ?2) AND (i.status = ?3 OR (?5 AND i.status = 'read'))
           AND (?4 = '[]' OR i.type IN (SELECT value FROM json_each(?4)))
         ORDER BY i.id {}",
        super::limit(Some(q.limit))
    ))?;
    let mut items: Vec<InboxItem> = stmt
        .query_map(params![q.member, q.thread, status.as_str(), json_list(&types), q.also_read], item)?
        .collect::<Result<_, _>>()?;
    if q.mark_read && !items.is_empty() {
        let mut mark = conn.prepare_cached("UPDATE inbox SET status = 'read', read_at = ?2 WHERE id = ?1")?;
        for i in &mut items {
            mark.execute(params![i.id as i64, now])?;
            i.status = InboxStatus::Read;
            i.read_at_ms = Some(now);
        }
    }
    let ids: Vec<u64> = items.iter().map(|i| i.id).collect();
    events::record(conn, now, &was_read(q, status, &ids))?;
    Ok(items)
}

fn item(r: &Row<'_>) -> rusqlite::Result<InboxItem> {
    crate::db::inbox::read(r)
}

/// Sets the status of a member's entries `ids`; returns how many changed.
pub fn process(conn: &Connection, now: i64, member: &str, ids: &[u64], status: InboxStatus) -> DbResult<u32> {
    let mut stmt = conn.prepare_cached("UPDATE inbox SET status = ?3, done_at = ?4 WHERE id = ?1 AND member = ?2")?;
    let mut n = 0;
    for id in ids {
        n += stmt.execute(params![*id as i64, member, status.as_str(), now])? as u32;
    }
    events::record(conn, now, &processed(member, ids, status, n))?;
    Ok(n)
}

/// Records that `names` took part in a routed message of `thread`; returns
/// the thread's participants, first seen first.
pub fn participate(conn: &Connection, now: i64, thread: &str, names: &[String]) -> DbResult<Vec<String>> {
    let mut upsert = conn.prepare_cached(
        "INSERT INTO participants (thread_id, name, first_at, last_at) VALUES (?1, ?2, ?3, ?3)
         ON CONFLICT (thread_id, name) DO UPDATE SET last_at = excluded.last_at",
    )?;
    for n in names {
        upsert.execute(params![thread, n, now])?;
    }
    let mut stmt =
        conn.prepare_cached("SELECT name FROM participants WHERE thread_id = ?1 ORDER BY first_at, rowid")?;
    let rows = stmt.query_map([thread], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// `queue.subscribe`: `member` takes `types` in `mode` in `workspace`.
pub fn subscribe(
    conn: &Connection,
    now: i64,
    workspace: &str,
    member: &str,
    types: &[RouteType],
    mode: DeliveryMode,
) -> DbResult<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO delivery_overrides (workspace, member, type, mode) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (workspace, member, type) DO UPDATE SET mode = excluded.mode",
    )?;
    for t in types {
        stmt.execute(params![workspace, member, t.as_str(), mode.as_str()])?;
    }
    events::record(conn, now, &subscribed(workspace, member, types, mode))
}

/// The modes a member chose per type in `workspace`.
pub fn overrides(conn: &Connection, workspace: &str, member: &str) -> DbResult<Vec<(RouteType, DeliveryMode)>> {
    let mut stmt =
        conn.prepare_cached("SELECT type, mode FROM delivery_overrides WHERE workspace = ?1 AND member = ?2")?;
    let rows = stmt.query_map(params![workspace, member], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (t, m) = row?;
        if let Some(t) = RouteType::parse(&t) {
            out.push((t, mode_of(&m)));
        }
    }
    Ok(out)
}

impl super::Sqlite {
    pub async fn inbox(&self, q: Query) -> DbResult<Vec<InboxItem>> {
        self.write(move |c, _| read(c, crate::db::now_ms(), &q)).await
    }

    pub async fn inbox_process(&self, member: String, ids: Vec<u64>, status: InboxStatus) -> DbResult<u32> {
        self.write(move |c, _| process(c, crate::db::now_ms(), &member, &ids, status)).await
    }

    pub async fn delivery_subscribe(
        &self,
        workspace: String,
        member: String,
        types: Vec<RouteType>,
        mode: DeliveryMode,
    ) -> DbResult<()> {
        self.write(move |c, _| subscribe(c, crate::db::now_ms(), &workspace, &member, &types, mode)).await
    }

    pub async fn delivery_overrides(
        &self,
        workspace: String,
        member: String,
    ) -> DbResult<Vec<(RouteType, DeliveryMode)>> {
        self.read(move |c| overrides(c, &workspace, &member)).await
    }
}
