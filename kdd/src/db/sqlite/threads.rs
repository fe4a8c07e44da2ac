//! The SQLite side of [`crate::db::threads`]: its SQL and the engine's operations.

use kd_proto::types::{Lineage, Thread, ThreadStatus};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::events;
use crate::db::threads::{
    ID_ATTEMPTS, NewThread, candidate_id, created, lineage_of, lineage_str, made_current, no_free_id, status_str,
};
use crate::db::{DbError, DbResult, Outbox, json_list};

const COLUMNS: &str = "id, workspace, branch, title, status, lineage, parent_id, members, created_at, last_activity_at, last_seq, context_mode, origin, summary";

/// The trunk thread of a workspace and git branch (F-L1), if it has one.
pub fn trunk(conn: &Connection, workspace: &str, branch: Option<&str>) -> DbResult<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT id FROM threads WHERE workspace = ?1 AND ifnull(branch, '') = ?2 AND lineage = 'trunk'",
        )?
        .query_row(params![workspace, branch.unwrap_or("")], |r| r.get(0))
        .optional()?)
}

pub fn create(conn: &Connection, now: i64, mut t: NewThread, out: &mut Outbox) -> DbResult<Thread> {
    if let Some(parent) = &t.parent {
        get(conn, parent)?;
    }
    // One trunk per workspace and git branch: what is not it branches off.
    let trunk = trunk(conn, &t.workspace, t.branch.as_deref())?;
    let lineage = lineage_of(&t, &trunk)?;
    if lineage == Lineage::Branch && t.parent.is_none() {
        t.parent = trunk;
    }
    let id = match t.id.take() {
        Some(id) => {
            if exists(conn, &id)? {
                return Err(DbError::AlreadyExists(format!("thread {id}")));
            }
            id
        }
        None => fresh_id(conn)?,
    };
    conn.prepare_cached(
        "INSERT INTO threads (id, workspace, branch, title, lineage, parent_id, members, created_at, last_activity_at, context_mode, origin)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10)",
    )?
    .execute(params![
        id,
        t.workspace,
        t.branch,
        t.title,
        lineage_str(lineage),
        t.parent,
        json_list(&t.members),
        now,
        t.context.as_str(),
        t.origin
    ])?;
    events::record(conn, now, &created(&t, &id, lineage))?;
    out.threads_added += 1;
    if t.set_current {
        set_current(conn, now, &t.workspace, t.branch.as_deref(), &id)?;
    }
    get(conn, &id)
}

/// A thread id not yet taken: 6 random characters, longer after collisions.
fn fresh_id(conn: &Connection) -> DbResult<String> {
    for attempt in 0..ID_ATTEMPTS {
        let id = candidate_id(attempt);
        if !exists(conn, &id)? {
            return Ok(id);
        }
    }
    Err(no_free_id())
}

pub(super) fn exists(conn: &Connection, id: &str) -> DbResult<bool> {
    Ok(conn.prepare_cached("SELECT 1 FROM threads WHERE id = ?1")?.query_row([id], |_| Ok(())).optional()?.is_some())
}

/// The thread imported from `origin`, if any.
pub fn by_origin(conn: &Connection, origin: &str) -> DbResult<Option<String>> {
    Ok(conn.prepare_cached("SELECT id FROM threads WHERE origin = ?1")?.query_row([origin], |r| r.get(0)).optional()?)
}

pub fn get(conn: &Connection, id: &str) -> DbResult<Thread> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM threads WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?
        .ok_or_else(|| DbError::NotFound(format!("thread {id}")))
}

pub fn count(conn: &Connection) -> DbResult<u64> {
    Ok(conn.query_row("SELECT count(*) FROM threads", [], |r| r.get::<_, i64>(0))? as u64)
}

pub fn list(
    conn: &Connection,
    workspace: Option<&str>,
    status: Option<ThreadStatus>,
    limit: Option<u32>,
) -> DbResult<Vec<Thread>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM threads
         WHERE (?1 IS NULL OR workspace = ?1) AND (?2 IS NULL OR status = ?2)
         ORDER BY last_activity_at DESC, rowid DESC
         {}",
        super::limit(limit)
    ))?;
    let rows = stmt.query_map(params![workspace, status.map(status_str)], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn current(conn: &Connection, workspace: &str, branch: Option<&str>) -> DbResult<Option<Thread>> {
    let id: Option<String> = conn
        .prepare_cached("SELECT thread_id FROM current_threads WHERE workspace = ?1 AND branch = ?2")?
        .query_row(params![workspace, branch.unwrap_or("")], |r| r.get(0))
        .optional()?;
    id.map(|id| get(conn, &id)).transpose()
}

pub fn set_current(conn: &Connection, now: i64, workspace: &str, branch: Option<&str>, id: &str) -> DbResult<Thread> {
    let thread = get(conn, id)?;
    conn.prepare_cached(
        "INSERT INTO current_threads (workspace, branch, thread_id) VALUES (?1, ?2, ?3)
         ON CONFLICT (workspace, branch) DO UPDATE SET thread_id = excluded.thread_id",
    )?
    .execute(params![workspace, branch.unwrap_or(""), id])?;
    events::record(conn, now, &made_current(id, workspace, branch))?;
    Ok(thread)
}

/// Replaces the thread's member list (the council as configured now).
pub fn set_members(conn: &Connection, id: &str, members: &[String]) -> DbResult<()> {
    conn.prepare_cached("UPDATE threads SET members = ?2 WHERE id = ?1")?.execute(params![id, json_list(members)])?;
    Ok(())
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<Thread> {
    crate::db::threads::read(r)
}

impl super::Sqlite {
    pub async fn create_thread(&self, t: NewThread) -> DbResult<Thread> {
        self.write(move |c, out| create(c, crate::db::now_ms(), t, out)).await
    }

    pub async fn thread(&self, id: String) -> DbResult<Thread> {
        self.read_now(|c| get(c, &id))
    }

    pub async fn threads(
        &self,
        workspace: Option<String>,
        status: Option<ThreadStatus>,
        limit: Option<u32>,
    ) -> DbResult<Vec<Thread>> {
        self.read(move |c| list(c, workspace.as_deref(), status, limit)).await
    }

    pub async fn current_thread(&self, workspace: String, branch: Option<String>) -> DbResult<Option<Thread>> {
        self.read_now(|c| current(c, &workspace, branch.as_deref()))
    }

    pub async fn set_current_thread(&self, workspace: String, branch: Option<String>, id: String) -> DbResult<Thread> {
        self.write(move |c, _| set_current(c, crate::db::now_ms(), &workspace, branch.as_deref(), &id)).await
    }

    /// The trunk thread of a workspace and git branch, if it has one.
    pub async fn trunk(&self, workspace: String, branch: Option<String>) -> DbResult<Option<String>> {
        self.read(move |c| trunk(c, &workspace, branch.as_deref())).await
    }

    pub async fn set_thread_members(&self, id: String, members: Vec<String>) -> DbResult<()> {
        self.write(move |c, _| set_members(c, &id, &members)).await
    }
}
