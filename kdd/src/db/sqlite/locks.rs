//! The SQLite side of [`crate::db::locks`]: its SQL and the engine's operations.

use kd_proto::types::{Fence, Lock, LockOutcome, LockReleased};
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::json;

use super::events;
use crate::db::DbResult;
use crate::db::events::NewEvent;
use crate::db::locks::{self, Acquire, Held, acquiring, stale};

pub fn acquire(
    conn: &Connection,
    now: i64,
    resource: &str,
    holder: &str,
    ttl_ms: u64,
    pid: Option<u32>,
    alive: &dyn Fn(u32) -> bool,
) -> DbResult<LockOutcome> {
    let expires_at = now.saturating_add(ttl_ms as i64);
    let previous = held(conn, resource)?;
    let acquire = acquiring(previous.as_ref(), now, holder, pid, alive);
    let mut token: i64 = 0;
    match acquire {
        Acquire::Renew { .. } => {
            conn.prepare_cached("UPDATE locks SET expires_at = ?2 WHERE resource = ?1")?
                .execute(params![resource, expires_at])?;
        }
        Acquire::Deny { .. } => {}
        Acquire::Take { .. } => {
            conn.prepare_cached("UPDATE counters SET value = value + 1 WHERE name = 'fencing_token'")?.execute([])?;
            token = conn
                .prepare_cached("SELECT value FROM counters WHERE name = 'fencing_token'")?
                .query_row([], |r| r.get::<_, i64>(0))?;
            conn.prepare_cached(
                "INSERT INTO locks (resource, holder, pid, token, acquired_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (resource) DO UPDATE SET holder = excluded.holder, pid = excluded.pid, token = excluded.token,
                     acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
            )?
            .execute(params![resource, holder, pid, token, now, expires_at])?;
        }
    }
    let (kind, data, outcome) = acquire.outcome(resource, token as u64, ttl_ms, pid, expires_at);
    record(conn, now, kind, resource, holder, data)?;
    Ok(outcome)
}

pub fn release(conn: &Connection, now: i64, resource: &str, token: u64) -> DbResult<LockReleased> {
    let current = held(conn, resource)?;
    match current {
        Some(h) if h.token == token => {
            conn.prepare_cached("DELETE FROM locks WHERE resource = ?1")?.execute([resource])?;
            record(conn, now, "lock.release", resource, &h.holder, json!({"token": token}))?;
            Ok(LockReleased { resource: resource.into(), token })
        }
        other => Err(stale(resource, token, other)),
    }
}

/// Refuses a fenced write unless `fence.token` is the lock's current,
/// unexpired token.
pub fn check_fence(conn: &Connection, now: i64, fence: &Fence) -> DbResult<()> {
    locks::check_fence(held(conn, &fence.resource)?, now, fence)
}

/// Locks that are held now: expired and dead-holder locks are left out.
pub fn list(conn: &Connection, now: i64, resource: Option<&str>, alive: &dyn Fn(u32) -> bool) -> DbResult<Vec<Lock>> {
    let mut stmt = conn.prepare_cached(
        "SELECT resource, holder, pid, token, acquired_at, expires_at FROM locks
         WHERE (?1 IS NULL OR resource = ?1) ORDER BY resource",
    )?;
    let rows = stmt.query_map(params![resource], |r| Ok((r.get::<_, String>(0)?, from_row(r)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (resource, h) = row?;
        out.extend(h.shown(resource, now, alive));
    }
    Ok(out)
}

fn held(conn: &Connection, resource: &str) -> DbResult<Option<Held>> {
    Ok(conn
        .prepare_cached("SELECT resource, holder, pid, token, acquired_at, expires_at FROM locks WHERE resource = ?1")?
        .query_row([resource], from_row)
        .optional()?)
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<Held> {
    crate::db::locks::read(r)
}

fn record(
    conn: &Connection,
    now: i64,
    kind: &str,
    resource: &str,
    holder: &str,
    mut data: serde_json::Value,
) -> DbResult<()> {
    data["resource"] = json!(resource);
    // A lock on a thread id is that thread's conversation lock.
    let thread: Option<String> =
        conn.prepare_cached("SELECT id FROM threads WHERE id = ?1")?.query_row([resource], |r| r.get(0)).optional()?;
    events::record(
        conn,
        now,
        &NewEvent { kind, thread: thread.as_deref(), from: Some(holder), data, ..Default::default() },
    )
}

impl super::Sqlite {
    pub async fn acquire_lock(
        &self,
        resource: String,
        holder: String,
        ttl_ms: u64,
        pid: Option<u32>,
    ) -> DbResult<LockOutcome> {
        self.write(move |c, _| {
            acquire(c, crate::db::now_ms(), &resource, &holder, ttl_ms, pid, &crate::proc::pid_alive)
        })
        .await
    }

    pub async fn release_lock(&self, resource: String, token: u64) -> DbResult<LockReleased> {
        self.write(move |c, _| release(c, crate::db::now_ms(), &resource, token)).await
    }

    pub async fn locks(&self, resource: Option<String>) -> DbResult<Vec<Lock>> {
        self.read(move |c| list(c, crate::db::now_ms(), resource.as_deref(), &crate::proc::pid_alive)).await
    }
}
