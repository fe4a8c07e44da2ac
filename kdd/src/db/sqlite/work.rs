//! The SQLite side of [`crate::db::work`]: its SQL and the engine's operations.

use kd_proto::types::RunStatus;
use kd_proto::work::{WorkState, Worktree};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::db::{DbError, DbResult};

/// The worktree's columns, and how the member's last run on the thread
/// that answered it (not a ballot or a review) ended.
const COLUMNS: &str = "thread_id, member, task, repo, path, branch, base, head, state, files, added, removed, \
                       removed_at, created_at, (SELECT r.status FROM runs r WHERE r.thread_id = worktrees.thread_id \
                       AND r.member = worktrees.member AND r.purpose IS NULL AND r.ended_at IS NOT NULL \
                       ORDER BY r.ended_at DESC, r.ordinal DESC LIMIT 1), check_status, check_commit, check_exit, \
                       check_ms, check_output, check_at, until_green, fixes, shipped, uncommitted";

fn row(r: &Row<'_>) -> rusqlite::Result<Worktree> {
    let state: String = r.get(8)?;
    Ok(Worktree {
        thread: r.get(0)?,
        member: r.get(1)?,
        task: r.get(2)?,
        repo: r.get(3)?,
        path: r.get(4)?,
        branch: r.get(5)?,
        base: r.get(6)?,
        head: r.get(7)?,
        state: WorkState::parse(&state).unwrap_or(WorkState::Done),
        files: r.get::<_, i64>(9)?.clamp(0, u32::MAX as i64) as u32,
        added: r.get::<_, i64>(10)?.max(0) as u64,
        removed: r.get::<_, i64>(11)?.max(0) as u64,
        removed_at_ms: r.get(12)?,
        created_at_ms: r.get(13)?,
        last_run: r.get::<_, Option<String>>(14)?.as_deref().and_then(RunStatus::parse),
        check: super::check::from_row(r, 15)?,
        until_green: r.get::<_, i64>(21)?.clamp(0, u32::MAX as i64) as u32,
        fixes: r.get::<_, i64>(22)?.clamp(0, u32::MAX as i64) as u32,
        shipped: r.get::<_, Option<String>>(23)?.and_then(|j| serde_json::from_str(&j).ok()),
        uncommitted: r.get(24)?,
    })
}

/// Records a member's new worktree (`vote`: the task is a best-of-N).
pub fn insert(conn: &Connection, w: &Worktree, vote: bool) -> DbResult<()> {
    conn.prepare_cached(
        "INSERT INTO worktrees (thread_id, member, task, repo, path, branch, base, head, state, files, added, \
         removed, vote, created_at, until_green) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
         ?15)",
    )?
    .execute(params![
        w.thread,
        w.member,
        w.task,
        w.repo,
        w.path,
        w.branch,
        w.base,
        w.head,
        w.state.as_str(),
        w.files,
        w.added as i64,
        w.removed as i64,
        vote,
        w.created_at_ms,
        w.until_green
    ])?;
    Ok(())
}

/// The member's worktree on the thread.
pub fn get(conn: &Connection, thread: &str, member: &str) -> DbResult<Option<Worktree>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM worktrees WHERE thread_id = ?1 AND member = ?2"))?
        .query_row(params![thread, member], row)
        .optional()?)
}

/// The thread's worktrees, in the order they were made.
pub fn of_thread(conn: &Connection, thread: &str) -> DbResult<Vec<Worktree>> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM worktrees WHERE thread_id = ?1 ORDER BY created_at, member"))?;
    let rows = stmt.query_map(params![thread], row)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Every worktree of the repository at `repo` (its top-level directory),
/// or of every repository, newest first.
pub fn list(conn: &Connection, repo: Option<&str>) -> DbResult<Vec<Worktree>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM worktrees WHERE ?1 IS NULL OR repo = ?1 ORDER BY created_at DESC, thread_id, member"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![repo], row)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The worktrees still on disk whose work is in flight or not settled
/// (working or done), of every thread.
pub fn unsettled(conn: &Connection) -> DbResult<Vec<Worktree>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM worktrees WHERE removed_at IS NULL AND (state = 'working' OR state = 'done') \
         ORDER BY created_at"
    ))?;
    let rows = stmt.query_map([], row)?.collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// Whether the thread's task is a best-of-N.
#[cfg(test)]
pub fn is_vote(conn: &Connection, thread: &str) -> DbResult<bool> {
    Ok(conn
        .prepare_cached("SELECT max(vote) FROM worktrees WHERE thread_id = ?1")?
        .query_row(params![thread], |r| r.get::<_, Option<bool>>(0))?
        .unwrap_or(false))
}

/// Sets where the member's work stands.
pub fn set_state(conn: &Connection, thread: &str, member: &str, state: WorkState) -> DbResult<()> {
    let n = conn
        .prepare_cached("UPDATE worktrees SET state = ?3 WHERE thread_id = ?1 AND member = ?2")?
        .execute(params![thread, member, state.as_str()])?;
    if n == 0 {
        return Err(DbError::NotFound(format!("no work of {member} on thread {thread}")));
    }
    Ok(())
}

/// The branch's new head and the diff's size from the base.
pub fn set_head(
    conn: &Connection,
    thread: &str,
    member: &str,
    head: &str,
    (files, added, removed): (u32, u64, u64),
) -> DbResult<()> {
    conn.prepare_cached(
        "UPDATE worktrees SET head = ?3, files = ?4, added = ?5, removed = ?6, uncommitted = NULL \
         WHERE thread_id = ?1 AND member = ?2",
    )?
    .execute(params![thread, member, head, files, added as i64, removed as i64])?;
    Ok(())
}

/// The worktree is gone from disk.
pub fn set_removed(conn: &Connection, thread: &str, member: &str, now: i64) -> DbResult<()> {
    conn.prepare_cached("UPDATE worktrees SET removed_at = ?3 WHERE thread_id = ?1 AND member = ?2")?
        .execute(params![thread, member, now])?;
    Ok(())
}

/// Records on a run the commit kd made of its changes (none: nothing
/// changed) and what the run should say about its work.
pub fn set_run_work(conn: &Connection, run: &str, commit: Option<&str>, note: Option<&str>) -> DbResult<()> {
    conn.prepare_cached("UPDATE runs SET work_commit = ?2, work_note = ?3 WHERE id = ?1")?
        .execute(params![run, commit, note])?;
    Ok(())
}

/// Whether `member` has had a run on the thread (its worktree is no longer
/// fresh).
pub fn has_run(conn: &Connection, thread: &str, member: &str) -> DbResult<bool> {
    Ok(conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE thread_id = ?1 AND member = ?2)")?
        .query_row(params![thread, member], |r| r.get(0))?)
}

/// The commit kd made of a run's changes, and its note.
#[cfg(test)]
pub fn run_work(conn: &Connection, run: &str) -> DbResult<(Option<String>, Option<String>)> {
    Ok(conn
        .prepare_cached("SELECT work_commit, work_note FROM runs WHERE id = ?1")?
        .query_row(params![run], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .unwrap_or((None, None)))
}

/// The operations kdd's work runs and `kd work` call: one transaction each.
impl super::Sqlite {
    /// Records a member's new worktree (`vote`: the task is a best-of-N).
    pub async fn add_worktree(&self, w: Worktree, vote: bool) -> DbResult<()> {
        self.write(move |c, _| insert(c, &w, vote)).await
    }

    /// The worktree of `member` on `thread`, if it has one.
    pub async fn worktree(&self, thread: String, member: String) -> DbResult<Option<Worktree>> {
        self.read(move |c| get(c, &thread, &member)).await
    }

    /// The worktrees of a work thread.
    pub async fn worktrees_of(&self, thread: String) -> DbResult<Vec<Worktree>> {
        self.read(move |c| of_thread(c, &thread)).await
    }

    /// The worktrees of a work thread, each with whether its member has had
    /// a run on the thread (a worktree none has worked in yet is fresh).
    pub async fn worktrees_with_runs(&self, thread: String) -> DbResult<Vec<(bool, Worktree)>> {
        // Most threads have none: a key lookup, on the caller's thread (every
        // question asks; issue 31, item 17). A member's runs are scanned on
        // the blocking pool.
        let trees = self.read_now(|c| of_thread(c, &thread))?;
        if trees.is_empty() {
            return Ok(Vec::new());
        }
        self.read(move |c| trees.into_iter().map(|w| Ok((has_run(c, &thread, &w.member)?, w))).collect()).await
    }

    /// Every worktree kd made (of one repository).
    pub async fn worktrees(&self, repo: Option<String>) -> DbResult<Vec<Worktree>> {
        self.read(move |c| list(c, repo.as_deref())).await
    }

    /// Every worktree whose work is not settled.
    pub async fn unsettled_worktrees(&self) -> DbResult<Vec<Worktree>> {
        self.read(unsettled).await
    }

    /// Sets where the member's work stands.
    pub async fn set_worktree_state(&self, thread: String, member: String, state: WorkState) -> DbResult<()> {
        self.write(move |c, _| set_state(c, &thread, &member, state)).await
    }

    /// Moves the member's work to `state` unless the King settled it, kd
    /// found it tampered with, or its worktree is gone; the worktree as it
    /// stands then (none: no work).
    pub async fn move_worktree_state(
        &self,
        thread: String,
        member: String,
        state: WorkState,
    ) -> DbResult<Option<Worktree>> {
        self.write(move |c, _| {
            let Some(w) = get(c, &thread, &member)? else { return Ok(None) };
            if !w.state.takes_work() || w.removed_at_ms.is_some() {
                return Ok(Some(w));
            }
            set_state(c, &thread, &member, state)?;
            get(c, &thread, &member)
        })
        .await
    }

    /// The branch's new head and the diff's size (files, added, removed)
    /// from the base.
    pub async fn set_worktree_head(
        &self,
        thread: String,
        member: String,
        head: String,
        totals: (u32, u64, u64),
    ) -> DbResult<()> {
        self.write(move |c, _| set_head(c, &thread, &member, &head, totals)).await
    }

    /// The work brought up to date: its new base, head and size.
    pub async fn set_worktree_base(
        &self,
        thread: String,
        member: String,
        base: String,
        head: String,
        (files, added, removed): (u32, u64, u64),
    ) -> DbResult<()> {
        self.write(move |c, _| {
            c.prepare_cached(
                "UPDATE worktrees SET base = ?3, head = ?4, files = ?5, added = ?6, removed = ?7, \
                 uncommitted = NULL WHERE thread_id = ?1 AND member = ?2",
            )?
            .execute(params![thread, member, base, head, files, added as i64, removed as i64])?;
            Ok(())
        })
        .await
    }

    /// Why kd could not commit the member's last run.
    pub async fn set_worktree_uncommitted(&self, thread: String, member: String, why: String) -> DbResult<()> {
        self.write(move |c, _| {
            c.prepare_cached("UPDATE worktrees SET uncommitted = ?3 WHERE thread_id = ?1 AND member = ?2")?
                .execute(params![thread, member, why])?;
            Ok(())
        })
        .await
    }

    /// The member's branch was pushed for a pull request.
    pub async fn set_worktree_shipped(
        &self,
        thread: String,
        member: String,
        shipped: kd_proto::work::Shipped,
    ) -> DbResult<()> {
        let json = serde_json::to_string(&shipped).map_err(|e| DbError::Invalid(e.to_string()))?;
        self.write(move |c, _| {
            c.prepare_cached("UPDATE worktrees SET shipped = ?3 WHERE thread_id = ?1 AND member = ?2")?
                .execute(params![thread, member, json])?;
            Ok(())
        })
        .await
    }

    /// The worktree is gone from disk since `at`.
    pub async fn set_worktree_removed(&self, thread: String, member: String, at: i64) -> DbResult<()> {
        self.write(move |c, _| set_removed(c, &thread, &member, at)).await
    }

    /// Records on a run the commit kd made of its changes and its note.
    pub async fn set_run_work(&self, run: String, commit: Option<String>, note: Option<String>) -> DbResult<()> {
        self.write(move |c, _| set_run_work(c, &run, commit.as_deref(), note.as_deref())).await
    }

    /// A member's work a dead daemon cut: what kd committed of it recorded
    /// on its interrupted run (when known), and the work `state` (`done`,
    /// or `tampered` when kd would not commit it).
    pub async fn work_interrupted(
        &self,
        thread: String,
        member: String,
        run: Option<String>,
        commit: Option<String>,
        note: String,
        state: WorkState,
    ) -> DbResult<()> {
        self.write(move |c, _| {
            if let Some(run) = run {
                set_run_work(c, &run, commit.as_deref(), Some(&note))?;
            }
            set_state(c, &thread, &member, state)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::fixtures::worktree;

    fn db() -> Connection {
        crate::db::sqlite::schema::in_memory_with_thread("t1")
    }

    #[test]
    fn a_best_of_n_task_is_recorded_as_a_vote() {
        let conn = db();
        insert(&conn, &worktree("claude", 1), true).unwrap();
        assert!(is_vote(&conn, "t1").unwrap());
    }

    #[test]
    fn a_member_has_run_once_a_run_of_it_is_recorded_on_the_thread() {
        let conn = db();
        assert!(!has_run(&conn, "t1", "claude").unwrap());
        conn.execute(
            "INSERT INTO runs (id, thread_id, member, backend, status, started_at) VALUES ('r1', 't1', 'claude', 'claude', 'done', 1)",
            [],
        )
        .unwrap();
        assert!(has_run(&conn, "t1", "claude").unwrap());
        assert!(!has_run(&conn, "t1", "codex").unwrap(), "another member's worktree is still fresh");
        set_run_work(&conn, "r1", Some("c1"), Some("note")).unwrap();
        assert_eq!(run_work(&conn, "r1").unwrap(), (Some("c1".into()), Some("note".into())));
    }
}
