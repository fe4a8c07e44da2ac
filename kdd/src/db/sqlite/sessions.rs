//! The SQLite side of [`crate::db::sessions`]: its SQL and the engine's operations.

use kd_proto::types::{Session, SessionStatus};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{events, threads};
use crate::db::sessions::{
    NewSession, SessionEnd, Taken, candidates, dead_holder, end_events, reclaimed, refusal_events, refuse_active_end,
    refuse_archived, resumed, started,
};
use crate::db::{DbError, DbResult, random_id};

const COLUMNS: &str =
    "id, thread_id, agent, backend_session_id, status, holder, pid, started_at, last_active_at, metadata, seen_seq";

pub fn start(conn: &Connection, now: i64, s: NewSession, alive: &dyn Fn(u32) -> bool) -> DbResult<Taken> {
    threads::get(conn, &s.thread)?;
    let copy = s.backend_session_id.as_deref();
    if let Some(active) = blocking(conn, now, &s.thread, &s.agent, copy, None, alive)? {
        return refuse(conn, now, &s.thread, None, &s.agent, active, s.holder.as_deref(), copy);
    }
    let id = format!("s-{}", random_id(10));
    conn.prepare_cached(
        "INSERT INTO sessions (id, thread_id, agent, backend_session_id, status, holder, pid, started_at, last_active_at, metadata)
         VALUES (?1, ?2, ?3, ?4, 'active', ?5, ?6, ?7, ?7, ?8)",
    )?
    .execute(params![id, s.thread, s.agent, s.backend_session_id, s.holder, s.pid, now, s.metadata.to_string()])?;
    events::record(conn, now, &started(&s, &id))?;
    Ok(Taken::Allowed(get(conn, &id)?))
}

pub fn resume(
    conn: &Connection,
    now: i64,
    id: &str,
    holder: Option<&str>,
    pid: Option<u32>,
    alive: &dyn Fn(u32) -> bool,
) -> DbResult<Taken> {
    let session = get(conn, id)?;
    refuse_archived(&session)?;
    let copy = session.backend_session_id.as_deref();
    if let Some(active) = blocking(conn, now, &session.thread, &session.agent, copy, Some(&session), alive)? {
        return refuse(conn, now, &session.thread, Some(id), &session.agent, active, holder, copy);
    }
    conn.prepare_cached(
        "UPDATE sessions SET status = 'active', holder = ?2, pid = ?3, last_active_at = ?4 WHERE id = ?1",
    )?
    .execute(params![id, holder, pid, now])?;
    events::record(conn, now, &resumed(&session, holder, pid))?;
    Ok(Taken::Allowed(get(conn, id)?))
}

/// The live session that stops `agent` from taking a session of `thread`
/// (`own`, when resuming one): `own` itself when active, another active
/// session of the same thread and agent, or — two copies of one backend
/// conversation resumed at once would diverge — an active session of the
/// agent on any thread carrying the same backend id. A holder that died
/// frees it.
fn blocking(
    conn: &Connection,
    now: i64,
    thread: &str,
    agent: &str,
    backend: Option<&str>,
    own: Option<&Session>,
    alive: &dyn Fn(u32) -> bool,
) -> DbResult<Option<Session>> {
    let of_thread = match own {
        Some(s) if s.status == SessionStatus::Active => None,
        _ => active_for(conn, thread, agent)?,
    };
    let mut copies = Vec::new();
    if let Some(backend) = backend {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM sessions WHERE agent = ?1 AND backend_session_id = ?2 AND status = 'active'"
        ))?;
        copies = stmt.query_map([agent, backend], from_row)?.collect::<Result<Vec<_>, _>>()?;
    }
    for active in candidates(own, of_thread, copies) {
        if !reclaim_if_dead(conn, now, &active, alive)? {
            return Ok(Some(active));
        }
    }
    Ok(None)
}

/// Refuses a start or resume (`session`) that `active` blocks: recorded as
/// `race.resume_conflict` (and `session.resume_rejected` for a resume), never
/// forked.
#[allow(clippy::too_many_arguments)]
fn refuse(
    conn: &Connection,
    now: i64,
    thread: &str,
    session: Option<&str>,
    agent: &str,
    active: Session,
    requested_by: Option<&str>,
    backend: Option<&str>,
) -> DbResult<Taken> {
    for event in refusal_events(thread, session, agent, &active, requested_by, backend) {
        events::record(conn, now, &event)?;
    }
    Ok(Taken::Rejected { session: active.id, holder: active.holder, pid: active.pid, node: None })
}

pub fn end(conn: &Connection, now: i64, e: &SessionEnd) -> DbResult<Session> {
    let (id, status) = (e.id.as_str(), e.status);
    refuse_active_end(e)?;
    let session = get(conn, id)?;
    conn.prepare_cached(
        "UPDATE sessions SET status = ?2, holder = NULL, pid = NULL, last_active_at = ?3,
             backend_session_id = coalesce(?4, backend_session_id), seen_seq = coalesce(?5, seen_seq)
         WHERE id = ?1",
    )?
    .execute(params![id, status.as_str(), now, e.backend_session_id, e.seen_seq.map(|s| s as i64)])?;
    for event in end_events(&session, e) {
        events::record(conn, now, &event)?;
    }
    get(conn, id)
}

pub fn get(conn: &Connection, id: &str) -> DbResult<Session> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?
        .ok_or_else(|| DbError::NotFound(format!("session {id}")))
}

/// The sessions the filters given select, newest first. Only the filters
/// given are in the statement: `?1 IS NULL OR thread_id = ?1` keeps
/// SQLite from the thread's index, and a resume-mode run, which looks for
/// its member's session on its thread, read every session of the registry
/// (a history-mode run leaves one each; issue 31, item 17).
pub fn list(
    conn: &Connection,
    thread: Option<&str>,
    agent: Option<&str>,
    status: Option<SessionStatus>,
) -> DbResult<Vec<Session>> {
    let filters = [("thread_id", thread), ("agent", agent), ("status", status.map(SessionStatus::as_str))];
    let given: Vec<(&str, &str)> = filters.iter().filter_map(|(column, value)| Some((*column, (*value)?))).collect();
    let mut stmt = conn.prepare_cached(&list_sql(&given.iter().map(|(column, _)| *column).collect::<Vec<_>>()))?;
    let rows = stmt.query_map(rusqlite::params_from_iter(given.iter().map(|(_, value)| value)), from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// [`list`]'s statement filtering on `columns`, each `= ?N` in turn.
fn list_sql(columns: &[&str]) -> String {
    let filter: Vec<String> = columns.iter().enumerate().map(|(i, c)| format!("{c} = ?{}", i + 1)).collect();
    let filter = if filter.is_empty() { String::new() } else { format!("WHERE {}", filter.join(" AND ")) };
    format!("SELECT {COLUMNS} FROM sessions {filter} ORDER BY started_at DESC, rowid DESC")
}

pub(super) fn active_for(conn: &Connection, thread: &str, agent: &str) -> DbResult<Option<Session>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM sessions WHERE thread_id = ?1 AND agent = ?2 AND status = 'active'"
        ))?
        .query_row([thread, agent], from_row)
        .optional()?)
}

/// If the active session's holder process is dead, expires it and returns
/// true; a session without a pid is never reclaimed.
fn reclaim_if_dead(conn: &Connection, now: i64, s: &Session, alive: &dyn Fn(u32) -> bool) -> DbResult<bool> {
    let Some(pid) = dead_holder(s, alive) else { return Ok(false) };
    conn.prepare_cached(
        "UPDATE sessions SET status = 'expired', holder = NULL, pid = NULL, last_active_at = ?2 WHERE id = ?1",
    )?
    .execute(params![s.id, now])?;
    events::record(conn, now, &reclaimed(s, pid))?;
    Ok(true)
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<Session> {
    crate::db::sessions::read(r)
}

impl super::Sqlite {
    /// Starts a session; a refusal is [`DbError::SessionActive`] (and is
    /// recorded in the event log).
    pub async fn start_session(&self, s: NewSession) -> DbResult<Session> {
        self.write_now(move |c, _| start(c, crate::db::now_ms(), s, &crate::proc::pid_alive)).await?.into()
    }

    /// Resumes a session; a rejection is [`DbError::SessionActive`] (and is
    /// recorded in the event log).
    pub async fn resume_session(&self, id: String, holder: Option<String>, pid: Option<u32>) -> DbResult<Session> {
        self.write_now(move |c, _| resume(c, crate::db::now_ms(), &id, holder.as_deref(), pid, &crate::proc::pid_alive))
            .await?
            .into()
    }

    pub async fn end_session(&self, e: SessionEnd) -> DbResult<Session> {
        self.write_now(move |c, _| end(c, crate::db::now_ms(), &e)).await
    }

    /// Sessions, newest first. Active ones whose holder process has died
    /// are released (expired) first, so none is listed as held by the dead.
    pub async fn sessions(
        &self,
        thread: Option<String>,
        agent: Option<String>,
        status: Option<SessionStatus>,
    ) -> DbResult<Vec<Session>> {
        let (t, a) = (thread.clone(), agent.clone());
        let listed = self.read(move |c| list(c, t.as_deref(), a.as_deref(), status)).await?;
        if !self.release_dead_holders(&listed).await? {
            return Ok(listed);
        }
        self.read(move |c| list(c, thread.as_deref(), agent.as_deref(), status)).await
    }

    /// One session, released first when its holder has died.
    pub async fn session(&self, id: String) -> DbResult<Session> {
        let key = id.clone();
        let s = self.read(move |c| get(c, &key)).await?;
        if !self.release_dead_holders(std::slice::from_ref(&s)).await? {
            return Ok(s);
        }
        self.read(move |c| get(c, &id)).await
    }

    /// Expires the active sessions among `sessions` whose holder process is
    /// gone (checked again in the writer); true when there were any.
    async fn release_dead_holders(&self, sessions: &[Session]) -> DbResult<bool> {
        let alive = crate::proc::pid_alive;
        let dead: Vec<Session> = sessions
            .iter()
            .filter(|s| s.status == SessionStatus::Active && dead_holder(s, &alive).is_some())
            .cloned()
            .collect();
        if dead.is_empty() {
            return Ok(false);
        }
        self.write(move |c, _| {
            for s in &dead {
                let current = get(c, &s.id)?;
                if current.status == SessionStatus::Active {
                    reclaim_if_dead(c, crate::db::now_ms(), &current, &alive)?;
                }
            }
            Ok(())
        })
        .await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(conn: &Connection, thread: &str, agent: &str, at: i64) -> String {
        let id = format!("s-{thread}-{agent}-{at}");
        conn.execute(
            "INSERT INTO sessions (id, thread_id, agent, status, started_at, last_active_at, metadata)
             VALUES (?1, ?2, ?3, 'idle', ?4, ?4, '{}')",
            params![id, thread, agent, at],
        )
        .unwrap();
        id
    }

    #[test]
    fn a_members_sessions_on_a_thread_are_found_by_the_threads_index_not_among_the_registrys() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        conn.execute(
            "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t2', '/w2', 1, 1)",
            [],
        )
        .unwrap();
        // History-mode runs leave a session each: many on another thread.
        for at in 0..300 {
            session(&conn, "t2", "claude", at);
        }
        let (old, new) = (session(&conn, "t1", "claude", 5), session(&conn, "t1", "claude", 7));
        session(&conn, "t1", "codex", 6);
        let ids = |s: Vec<Session>| s.into_iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids(list(&conn, Some("t1"), Some("claude"), None).unwrap()), [new.clone(), old], "newest first");
        assert_eq!(list(&conn, Some("t1"), None, None).unwrap().len(), 3);
        assert_eq!(list(&conn, None, Some("claude"), None).unwrap().len(), 302);
        assert_eq!(list(&conn, None, None, Some(SessionStatus::Idle)).unwrap().len(), 303);
        assert!(list(&conn, Some("t1"), Some("claude"), Some(SessionStatus::Active)).unwrap().is_empty());
        assert_eq!(list(&conn, None, None, None).unwrap().len(), 303);
        // The run's lookup reads the two rows it returns, not the 303.
        let mut stmt = conn.prepare(&list_sql(&["thread_id", "agent"])).unwrap();
        assert_eq!(stmt.query_map(["t1", "claude"], from_row).unwrap().count(), 2);
        let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
        assert!(steps < 200, "{steps} virtual machine steps for 2 sessions among 303");
    }
}
