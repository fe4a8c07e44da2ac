//! The SQLite side of [`crate::db::acks`]: its SQL and the engine's operations.

use kd_proto::types::{Ack, ThreadEvent};
use rusqlite::{Connection, Row, params};

use super::events;
use crate::db::acks::{broadcasts, settled};
use crate::db::{DbResult, Outbox};

/// Records that every one of `members` owes an acknowledgement of
/// `broadcast` (message `seq` of `thread`).
pub fn owe(conn: &Connection, broadcast: &str, thread: &str, seq: u64, members: &[String]) -> DbResult<()> {
    let mut stmt =
        conn.prepare_cached("INSERT OR IGNORE INTO acks (broadcast, thread_id, seq, member) VALUES (?1, ?2, ?3, ?4)")?;
    for m in members {
        stmt.execute(params![broadcast, thread, seq as i64, m])?;
    }
    Ok(())
}

/// Settles what `member` owes on `thread` for broadcasts up to message
/// `upto` (of `broadcast` only, when given); returns the settled acks.
pub fn settle(
    conn: &Connection,
    now: i64,
    thread: &str,
    member: &str,
    upto: u64,
    broadcast: Option<&str>,
    how: &str,
) -> DbResult<Vec<Ack>> {
    let mut stmt = conn.prepare_cached(
        "UPDATE acks SET acked_at = ?5, how = ?6
         WHERE thread_id = ?1 AND member = ?2 AND acked_at IS NULL AND seq <= ?3 AND (?4 IS NULL OR broadcast = ?4)
         RETURNING broadcast, thread_id, seq, member, acked_at, how",
    )?;
    let acks: Vec<Ack> = stmt
        .query_map(params![thread, member, upto.min(i64::MAX as u64) as i64, broadcast, now, how], ack)?
        .collect::<Result<_, _>>()?;
    for a in &acks {
        events::record(conn, now, &settled(thread, member, a, how))?;
    }
    Ok(acks)
}

/// Acknowledgements of `thread` (all threads when None), oldest broadcast
/// first; only the pending ones unless `all`.
pub fn list(conn: &Connection, thread: Option<&str>, all: bool) -> DbResult<Vec<Ack>> {
    let mut stmt = conn.prepare_cached(
        "SELECT broadcast, thread_id, seq, member, acked_at, how FROM acks
         WHERE (?1 IS NULL OR thread_id = ?1) AND (?2 OR acked_at IS NULL)
         ORDER BY thread_id, seq, member",
    )?;
    let rows = stmt.query_map(params![thread, all], ack)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Members still owing an acknowledgement of `broadcast`.
pub fn pending_members(conn: &Connection, broadcast: &str) -> DbResult<Vec<String>> {
    let mut stmt =
        conn.prepare_cached("SELECT member FROM acks WHERE broadcast = ?1 AND acked_at IS NULL ORDER BY member")?;
    let rows = stmt.query_map([broadcast], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn ack(r: &Row<'_>) -> rusqlite::Result<Ack> {
    crate::db::acks::read(r)
}

/// Tells subscribers who still owes an acknowledgement of each broadcast
/// that `acked` settled.
pub fn progress(conn: &Connection, thread: &str, acked: &[Ack], out: &mut Outbox) -> DbResult<()> {
    for a in broadcasts(acked) {
        let from: String = conn
            .prepare_cached("SELECT sender FROM messages WHERE thread_id = ?1 AND seq = ?2")?
            .query_row(params![thread, a.seq as i64], |r| r.get(0))?;
        let pending = pending_members(conn, &a.broadcast)?;
        out.publish(thread, ThreadEvent::Emergency { broadcast: a.broadcast.clone(), seq: a.seq, from, pending });
    }
    Ok(())
}

impl super::Sqlite {
    /// `kd ack`: settles what `member` owes on `thread` (for `broadcast`
    /// only, when given) and tells subscribers who still owes.
    pub async fn acknowledge(&self, thread: String, member: String, broadcast: Option<String>) -> DbResult<Vec<Ack>> {
        self.write(move |c, out| {
            let acked = settle(c, crate::db::now_ms(), &thread, &member, u64::MAX, broadcast.as_deref(), "kd ack")?;
            progress(c, &thread, &acked, out)?;
            Ok(acked)
        })
        .await
    }

    pub async fn acks(&self, thread: Option<String>, all: bool) -> DbResult<Vec<Ack>> {
        self.read(move |c| list(c, thread.as_deref(), all)).await
    }
}
