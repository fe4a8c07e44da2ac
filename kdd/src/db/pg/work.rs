//! The registry of members' worktrees on PostgreSQL: the operations of
//! [`crate::db::work`].

use deadpool_postgres::GenericClient;
use kd_proto::types::RunStatus;
use kd_proto::work::{WorkState, Worktree};
use tokio_postgres::Row;

use super::Pg;
use crate::db::{DbError, DbResult};

/// The worktree's columns, and how the member's last run on the thread
/// that answered it (not a ballot or a review) ended.
const COLUMNS: &str = "thread_id, member, task, repo, path, branch, base, head, state, files, added, removed, \
                       removed_at, created_at, (SELECT r.status FROM runs r WHERE r.thread_id = worktrees.thread_id \
                       AND r.member = worktrees.member AND r.purpose IS NULL AND r.ended_at IS NOT NULL \
                       ORDER BY r.ended_at DESC, r.ordinal DESC NULLS LAST LIMIT 1), check_status, check_commit, \
                       check_exit, check_ms, check_output, check_at, until_green, fixes, shipped, uncommitted";

fn row(r: &Row) -> DbResult<Worktree> {
    let state: &str = r.try_get(8)?;
    Ok(Worktree {
        thread: r.try_get(0)?,
        member: r.try_get(1)?,
        task: r.try_get(2)?,
        repo: r.try_get(3)?,
        path: r.try_get(4)?,
        branch: r.try_get(5)?,
        base: r.try_get(6)?,
        head: r.try_get(7)?,
        state: WorkState::parse(state).unwrap_or(WorkState::Done),
        files: r.try_get::<_, i64>(9)?.clamp(0, u32::MAX as i64) as u32,
        added: r.try_get::<_, i64>(10)?.max(0) as u64,
        removed: r.try_get::<_, i64>(11)?.max(0) as u64,
        removed_at_ms: r.try_get(12)?,
        created_at_ms: r.try_get(13)?,
        last_run: r.try_get::<_, Option<&str>>(14)?.and_then(RunStatus::parse),
        check: super::check::from_row(r, 15)?,
        until_green: r.try_get::<_, i32>(21)?.max(0) as u32,
        fixes: r.try_get::<_, i32>(22)?.max(0) as u32,
        shipped: r.try_get::<_, Option<&str>>(23)?.and_then(|j| serde_json::from_str(j).ok()),
        uncommitted: r.try_get(24)?,
    })
}

/// Records a member's new worktree (`vote`: the task is a best-of-N).
pub(crate) async fn insert(c: &impl GenericClient, w: &Worktree, vote: bool) -> DbResult<()> {
    c.execute(
        &c.prepare_cached(
            "INSERT INTO worktrees (thread_id, member, task, repo, path, branch, base, head, state, files, added, \
             removed, vote, created_at, until_green) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
             $14, $15)",
        )
        .await?,
        &[
            &w.thread,
            &w.member,
            &w.task,
            &w.repo,
            &w.path,
            &w.branch,
            &w.base,
            &w.head,
            &w.state.as_str(),
            &i64::from(w.files),
            &(w.added as i64),
            &(w.removed as i64),
            &i64::from(vote),
            &w.created_at_ms,
            &i32::try_from(w.until_green).unwrap_or(i32::MAX),
        ],
    )
    .await?;
    Ok(())
}

/// The member's worktree on the thread.
pub(crate) async fn get(c: &impl GenericClient, thread: &str, member: &str) -> DbResult<Option<Worktree>> {
    let found = c
        .query_opt(
            &c.prepare_cached(&format!("SELECT {COLUMNS} FROM worktrees WHERE thread_id = $1 AND member = $2")).await?,
            &[&thread, &member],
        )
        .await?;
    found.as_ref().map(row).transpose()
}

/// The thread's worktrees, in the order they were made.
pub(crate) async fn of_thread(c: &impl GenericClient, thread: &str) -> DbResult<Vec<Worktree>> {
    let rows = c
        .query(
            &c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM worktrees WHERE thread_id = $1 ORDER BY created_at, member"
            ))
            .await?,
            &[&thread],
        )
        .await?;
    rows.iter().map(row).collect()
}

/// Every worktree of the repository at `repo` (its top-level directory),
/// or of every repository, newest first.
pub(crate) async fn list(c: &impl GenericClient, repo: Option<&str>) -> DbResult<Vec<Worktree>> {
    let rows = c
        .query(
            &c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM worktrees WHERE $1::text IS NULL OR repo = $1
                 ORDER BY created_at DESC, thread_id, member"
            ))
            .await?,
            &[&repo],
        )
        .await?;
    rows.iter().map(row).collect()
}

/// The worktrees still on disk whose work is in flight or not settled
/// (working or done), of every thread.
pub(crate) async fn unsettled(c: &impl GenericClient) -> DbResult<Vec<Worktree>> {
    let rows = c
        .query(
            &c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM worktrees WHERE removed_at IS NULL AND (state = 'working' OR state = 'done') \
                 ORDER BY created_at"
            ))
            .await?,
            &[],
        )
        .await?;
    rows.iter().map(row).collect()
}

#[cfg(test)]
/// Whether the thread's task is a best-of-N.
pub(crate) async fn is_vote(c: &impl GenericClient, thread: &str) -> DbResult<bool> {
    let vote: Option<i64> = c
        .query_one(&c.prepare_cached("SELECT max(vote) FROM worktrees WHERE thread_id = $1").await?, &[&thread])
        .await?
        .try_get(0)?;
    Ok(vote.is_some_and(|v| v != 0))
}

/// Sets where the member's work stands.
pub(crate) async fn set_state(c: &impl GenericClient, thread: &str, member: &str, state: WorkState) -> DbResult<()> {
    let n = c
        .execute(
            &c.prepare_cached("UPDATE worktrees SET state = $3 WHERE thread_id = $1 AND member = $2").await?,
            &[&thread, &member, &state.as_str()],
        )
        .await?;
    if n == 0 {
        return Err(DbError::NotFound(format!("no work of {member} on thread {thread}")));
    }
    Ok(())
}

/// The branch's new head and the diff's size from the base.
pub(crate) async fn set_head(
    c: &impl GenericClient,
    thread: &str,
    member: &str,
    head: &str,
    (files, added, removed): (u32, u64, u64),
) -> DbResult<()> {
    c.execute(
        &c.prepare_cached(
            "UPDATE worktrees SET head = $3, files = $4, added = $5, removed = $6, uncommitted = NULL \
             WHERE thread_id = $1 AND member = $2",
        )
        .await?,
        &[&thread, &member, &head, &i64::from(files), &(added as i64), &(removed as i64)],
    )
    .await?;
    Ok(())
}

/// The worktree is gone from disk.
pub(crate) async fn set_removed(c: &impl GenericClient, thread: &str, member: &str, now: i64) -> DbResult<()> {
    c.execute(
        &c.prepare_cached("UPDATE worktrees SET removed_at = $3 WHERE thread_id = $1 AND member = $2").await?,
        &[&thread, &member, &now],
    )
    .await?;
    Ok(())
}

/// Records on a run the commit kd made of its changes (none: nothing
/// changed) and what the run should say about its work.
pub(crate) async fn set_run_work(
    c: &impl GenericClient,
    run: &str,
    commit: Option<&str>,
    note: Option<&str>,
) -> DbResult<()> {
    c.execute(
        &c.prepare_cached("UPDATE runs SET work_commit = $2, work_note = $3 WHERE id = $1").await?,
        &[&run, &commit, &note],
    )
    .await?;
    Ok(())
}

/// Whether `member` has had a run on the thread (its worktree is no longer
/// fresh).
pub(crate) async fn has_run(c: &impl GenericClient, thread: &str, member: &str) -> DbResult<bool> {
    Ok(c.query_one(
        &c.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE thread_id = $1 AND member = $2)").await?,
        &[&thread, &member],
    )
    .await?
    .try_get(0)?)
}

#[cfg(test)]
/// The commit kd made of a run's changes, and its note.
pub(crate) async fn run_work(c: &impl GenericClient, run: &str) -> DbResult<(Option<String>, Option<String>)> {
    let found =
        c.query_opt(&c.prepare_cached("SELECT work_commit, work_note FROM runs WHERE id = $1").await?, &[&run]).await?;
    match found {
        Some(r) => Ok((r.try_get(0)?, r.try_get(1)?)),
        None => Ok((None, None)),
    }
}

/// The operations kdd's work runs and `kd work` call: one transaction each.
impl Pg {
    /// Records a member's new worktree (`vote`: the task is a best-of-N).
    pub async fn add_worktree(&self, w: Worktree, vote: bool) -> DbResult<()> {
        insert(&self.conn().await?, &w, vote).await
    }

    /// The worktree of `member` on `thread`, if it has one.
    pub async fn worktree(&self, thread: String, member: String) -> DbResult<Option<Worktree>> {
        get(&self.conn().await?, &thread, &member).await
    }

    /// The worktrees of a work thread.
    pub async fn worktrees_of(&self, thread: String) -> DbResult<Vec<Worktree>> {
        of_thread(&self.conn().await?, &thread).await
    }

    /// The worktrees of a work thread, each with whether its member has had
    /// a run on the thread (a worktree none has worked in yet is fresh).
    pub async fn worktrees_with_runs(&self, thread: String) -> DbResult<Vec<(bool, Worktree)>> {
        let c = self.conn().await?;
        let mut out = Vec::new();
        for w in of_thread(&c, &thread).await? {
            out.push((has_run(&c, &thread, &w.member).await?, w));
        }
        Ok(out)
    }

    /// Every worktree kd made (of one repository).
    pub async fn worktrees(&self, repo: Option<String>) -> DbResult<Vec<Worktree>> {
        list(&self.conn().await?, repo.as_deref()).await
    }

    /// Every worktree whose work is not settled.
    pub async fn unsettled_worktrees(&self) -> DbResult<Vec<Worktree>> {
        unsettled(&self.conn().await?).await
    }

    /// Sets where the member's work stands.
    pub async fn set_worktree_state(&self, thread: String, member: String, state: WorkState) -> DbResult<()> {
        set_state(&self.conn().await?, &thread, &member, state).await
    }

    /// Moves the member's work to `state` unless the King settled it, kd
    /// found it tampered with, or its worktree is gone; the worktree as it
    /// stands then (none: no work).
    /// The row is locked while deciding, as the SQLite writer's serial
    /// execution kept it.
    pub async fn move_worktree_state(
        &self,
        thread: String,
        member: String,
        state: WorkState,
    ) -> DbResult<Option<Worktree>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        tx.execute(
            &tx.prepare_cached("SELECT 1 FROM worktrees WHERE thread_id = $1 AND member = $2 FOR UPDATE").await?,
            &[&thread, &member],
        )
        .await?;
        let Some(w) = get(&tx, &thread, &member).await? else { return Ok(None) };
        if !w.state.takes_work() || w.removed_at_ms.is_some() {
            return Ok(Some(w));
        }
        set_state(&tx, &thread, &member, state).await?;
        let moved = get(&tx, &thread, &member).await?;
        self.commit(tx, Default::default()).await?;
        Ok(moved)
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
        set_head(&self.conn().await?, &thread, &member, &head, totals).await
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
        let c = self.conn().await?;
        c.execute(
            &c.prepare_cached(
                "UPDATE worktrees SET base = $3, head = $4, files = $5, added = $6, removed = $7, \
                 uncommitted = NULL WHERE thread_id = $1 AND member = $2",
            )
            .await?,
            &[&thread, &member, &base, &head, &i64::from(files), &(added as i64), &(removed as i64)],
        )
        .await?;
        Ok(())
    }

    /// Why kd could not commit the member's last run.
    pub async fn set_worktree_uncommitted(&self, thread: String, member: String, why: String) -> DbResult<()> {
        let c = self.conn().await?;
        c.execute(
            &c.prepare_cached("UPDATE worktrees SET uncommitted = $3 WHERE thread_id = $1 AND member = $2").await?,
            &[&thread, &member, &why],
        )
        .await?;
        Ok(())
    }

    /// The member's branch was pushed for a pull request.
    pub async fn set_worktree_shipped(
        &self,
        thread: String,
        member: String,
        shipped: kd_proto::work::Shipped,
    ) -> DbResult<()> {
        let json = serde_json::to_string(&shipped).map_err(|e| DbError::Invalid(e.to_string()))?;
        let c = self.conn().await?;
        c.execute(
            &c.prepare_cached("UPDATE worktrees SET shipped = $3 WHERE thread_id = $1 AND member = $2").await?,
            &[&thread, &member, &json],
        )
        .await?;
        Ok(())
    }

    /// The worktree is gone from disk since `at`.
    pub async fn set_worktree_removed(&self, thread: String, member: String, at: i64) -> DbResult<()> {
        set_removed(&self.conn().await?, &thread, &member, at).await
    }

    /// Records on a run the commit kd made of its changes and its note.
    pub async fn set_run_work(&self, run: String, commit: Option<String>, note: Option<String>) -> DbResult<()> {
        set_run_work(&self.conn().await?, &run, commit.as_deref(), note.as_deref()).await
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
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        if let Some(run) = run {
            set_run_work(&tx, &run, commit.as_deref(), Some(&note)).await?;
        }
        set_state(&tx, &thread, &member, state).await?;
        self.commit(tx, Default::default()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::fixtures::worktree;
    use crate::db::pg::test_rows::{run, thread};
    use crate::db::pg::testing;

    #[tokio::test]
    async fn a_member_has_run_once_a_run_of_it_is_recorded_on_the_thread() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t1").await;
        pg.add_worktree(worktree("claude", 1), false).await.unwrap();
        pg.add_worktree(worktree("codex", 2), false).await.unwrap();
        assert!(!is_vote(&pg.conn().await.unwrap(), "t1").await.unwrap());
        thread(&pg, "t2").await;
        pg.add_worktree(Worktree { thread: "t2".into(), ..worktree("claude", 3) }, true).await.unwrap();
        assert!(is_vote(&pg.conn().await.unwrap(), "t2").await.unwrap(), "a best-of-N task");
        let fresh = pg.worktrees_with_runs("t1".into()).await.unwrap();
        assert!(fresh.iter().all(|(ran, _)| !ran));
        run(&pg, "r1", "t1", "claude", "done").await;
        let c = pg.conn().await.unwrap();
        assert!(has_run(&c, "t1", "claude").await.unwrap());
        assert!(!has_run(&c, "t1", "codex").await.unwrap(), "another member's worktree is still fresh");
        let ran = pg.worktrees_with_runs("t1".into()).await.unwrap();
        assert_eq!(
            ran.iter().map(|(r, w)| (*r, w.member.as_str())).collect::<Vec<_>>(),
            [(true, "claude"), (false, "codex")]
        );
        pg.set_run_work("r1".into(), Some("c1".into()), Some("note".into())).await.unwrap();
        assert_eq!(run_work(&c, "r1").await.unwrap(), (Some("c1".into()), Some("note".into())));
        assert_eq!(run_work(&c, "r9").await.unwrap(), (None, None));
        // The last answering run's end shows on the worktree.
        c.execute("UPDATE runs SET ended_at = 5 WHERE id = 'r1'", &[]).await.unwrap();
        assert_eq!(pg.worktree("t1".into(), "claude".into()).await.unwrap().unwrap().last_run, Some(RunStatus::Done));
        pg.work_interrupted("t1".into(), "claude".into(), Some("r1".into()), None, "cut".into(), WorkState::Done)
            .await
            .unwrap();
        assert_eq!(run_work(&c, "r1").await.unwrap(), (None, Some("cut".into())));
        assert_eq!(pg.worktree("t1".into(), "claude".into()).await.unwrap().unwrap().state, WorkState::Done);
    }
}
