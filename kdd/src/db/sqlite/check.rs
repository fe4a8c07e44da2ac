//! The SQLite side of the check in a member's worktree (issue 34): the
//! check's columns of `worktrees`, begun, ended (with the fix it may send
//! the member back for), and the checks a stopped daemon left running.

use kd_proto::types::ThreadEvent;
use kd_proto::work::{CheckStatus, WorkCheck, Worktree};
use rusqlite::{Connection, Row, params};

use super::Outbox;
use super::work::get;
use crate::db::DbResult;
use crate::db::check::{CheckEnded, Fix, Started, rules};
use crate::db::outage::Again;

/// The check of a worktree row, from its columns at `at` (status, commit,
/// exit, ms, output, started).
pub fn from_row(r: &Row<'_>, at: usize) -> rusqlite::Result<Option<WorkCheck>> {
    let Some(status) = r.get::<_, Option<String>>(at)?.as_deref().and_then(CheckStatus::parse) else {
        return Ok(None);
    };
    Ok(Some(WorkCheck {
        status,
        commit: r.get::<_, Option<String>>(at + 1)?.unwrap_or_default(),
        exit_code: r.get::<_, Option<i64>>(at + 2)?.map(|c| c.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
        duration_ms: r.get::<_, Option<i64>>(at + 3)?.unwrap_or(0).max(0) as u64,
        output: r.get::<_, Option<String>>(at + 4)?.unwrap_or_default(),
        started_at_ms: r.get::<_, Option<i64>>(at + 5)?.unwrap_or(0),
    }))
}

fn set(conn: &Connection, w: &Worktree, c: &WorkCheck) -> DbResult<()> {
    conn.prepare_cached(
        "UPDATE worktrees SET check_status = ?3, check_commit = ?4, check_exit = ?5, check_ms = ?6, \
         check_output = ?7, check_at = ?8 WHERE thread_id = ?1 AND member = ?2",
    )?
    .execute(params![
        w.thread,
        w.member,
        c.status.as_str(),
        c.commit,
        c.exit_code,
        c.duration_ms.min(i64::MAX as u64) as i64,
        c.output,
        c.started_at_ms
    ])?;
    Ok(())
}

/// Marks the check of the member's head running since `at`, unless its
/// work does not take work (settled, tampered) or its worktree is gone.
pub fn begin(conn: &Connection, out: &mut Outbox, thread: &str, member: &str, at: i64) -> DbResult<Started> {
    let Some(w) = get(conn, thread, member)? else { return Ok(Started::NoWork) };
    let Some(check) = rules::begins(&w, at) else { return Ok(Started::Settled(w)) };
    set(conn, &w, &check)?;
    let Some(w) = get(conn, thread, member)? else { return Ok(Started::NoWork) };
    out.publish(thread, ThreadEvent::Work { worktree: Box::new(w.clone()) });
    Ok(Started::Begun(w))
}

/// Records the check's result when it is still the worktree's running
/// check (begun at `check.started_at_ms`); with `fix`, when the check did
/// not pass and the member has tries left, counts a try and marks its work
/// `working` again.
pub fn end(
    conn: &Connection,
    out: &mut Outbox,
    thread: &str,
    member: &str,
    check: &WorkCheck,
    fix: Fix,
    again: Again,
) -> DbResult<CheckEnded> {
    let Some(w) = get(conn, thread, member)? else { return Ok(CheckEnded::Superseded) };
    // Tried again, its first try's result is answered as that try was.
    let written = if again == Again::Retry { rules::written(&w, check, fix) } else { None };
    let fixing = match written {
        Some(fixing) => fixing,
        None if !rules::is_current(&w, check) => return Ok(CheckEnded::Superseded),
        None => {
            set(conn, &w, check)?;
            let fixing = rules::sends_back(&w, check, fix);
            if fixing {
                conn.prepare_cached(
                    "UPDATE worktrees SET fixes = fixes + 1, state = 'working' WHERE thread_id = ?1 AND member = ?2",
                )?
                .execute(params![thread, member])?;
            }
            fixing
        }
    };
    let Some(w) = get(conn, thread, member)? else { return Ok(CheckEnded::Superseded) };
    out.publish(thread, ThreadEvent::Work { worktree: Box::new(w.clone()) });
    Ok(CheckEnded::Recorded { worktree: Box::new(w), fixing })
}

/// The worktrees still on disk whose check was running when the daemon
/// stopped.
pub fn running(conn: &Connection) -> DbResult<Vec<Worktree>> {
    let mut stmt = conn.prepare_cached(
        "SELECT thread_id, member FROM worktrees WHERE check_status = 'running' AND removed_at IS NULL \
         ORDER BY created_at",
    )?;
    let keys =
        stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?.collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for (t, m) in keys {
        out.extend(get(conn, &t, &m)?);
    }
    Ok(out)
}

impl super::Sqlite {
    /// Marks the check of the member's head running since `at` (told on the
    /// thread), unless the work is settled or gone.
    pub async fn begin_check(&self, thread: String, member: String, at: i64) -> DbResult<Started> {
        self.write(move |c, out| begin(c, out, &thread, &member, at)).await
    }

    /// Records a check's result if it is still the running one (told on
    /// the thread); with `fix`, sends the member back when it failed and
    /// tries are left.
    pub async fn end_check(
        &self,
        thread: String,
        member: String,
        check: WorkCheck,
        fix: Fix,
        again: Again,
    ) -> DbResult<CheckEnded> {
        self.write(move |c, out| end(c, out, &thread, &member, &check, fix, again)).await
    }

    /// The worktrees whose check was running when a daemon stopped.
    pub async fn running_checks(&self) -> DbResult<Vec<Worktree>> {
        self.read(running).await
    }
}
