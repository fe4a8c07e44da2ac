//! The check in a member's worktree on PostgreSQL (issue 34): the check's
//! columns of `worktrees`, begun, ended (with the fix it may send the
//! member back for), and the checks a stopped daemon left running.

use deadpool_postgres::GenericClient;
use kd_proto::types::ThreadEvent;
use kd_proto::work::{CheckStatus, WorkCheck, Worktree};
use tokio_postgres::Row;

use super::Pg;
use super::work::get;
use crate::db::check::{CheckEnded, Fix, Started, rules};
use crate::db::outage::Again;
use crate::db::{DbResult, Outbox};

/// The check of a worktree row, from its columns at `at` (status, commit,
/// exit, ms, output, started).
pub(crate) fn from_row(r: &Row, at: usize) -> DbResult<Option<WorkCheck>> {
    let Some(status) = r.try_get::<_, Option<&str>>(at)?.and_then(CheckStatus::parse) else { return Ok(None) };
    Ok(Some(WorkCheck {
        status,
        commit: r.try_get::<_, Option<String>>(at + 1)?.unwrap_or_default(),
        exit_code: r.try_get::<_, Option<i32>>(at + 2)?,
        duration_ms: r.try_get::<_, Option<i64>>(at + 3)?.unwrap_or(0).max(0) as u64,
        output: r.try_get::<_, Option<String>>(at + 4)?.unwrap_or_default(),
        started_at_ms: r.try_get::<_, Option<i64>>(at + 5)?.unwrap_or(0),
    }))
}

async fn set(c: &impl GenericClient, w: &Worktree, check: &WorkCheck) -> DbResult<()> {
    c.execute(
        &c.prepare_cached(
            "UPDATE worktrees SET check_status = $3, check_commit = $4, check_exit = $5, check_ms = $6, \
             check_output = $7, check_at = $8 WHERE thread_id = $1 AND member = $2",
        )
        .await?,
        &[
            &w.thread,
            &w.member,
            &check.status.as_str(),
            &check.commit,
            &check.exit_code,
            &(check.duration_ms.min(i64::MAX as u64) as i64),
            &check.output,
            &check.started_at_ms,
        ],
    )
    .await?;
    Ok(())
}

async fn lock(c: &impl GenericClient, thread: &str, member: &str) -> DbResult<()> {
    c.execute(
        &c.prepare_cached("SELECT 1 FROM worktrees WHERE thread_id = $1 AND member = $2 FOR UPDATE").await?,
        &[&thread, &member],
    )
    .await
    .map_err(super::still_open)?;
    Ok(())
}

impl Pg {
    /// Marks the check of the member's head running since `at` (told on the
    /// thread), unless the work is settled or gone.
    pub async fn begin_check(&self, thread: String, member: String, at: i64) -> DbResult<Started> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        lock(&tx, &thread, &member).await?;
        let Some(w) = get(&tx, &thread, &member).await? else { return Ok(Started::NoWork) };
        let Some(check) = rules::begins(&w, at) else { return Ok(Started::Settled(w)) };
        set(&tx, &w, &check).await?;
        let Some(w) = get(&tx, &thread, &member).await? else { return Ok(Started::NoWork) };
        let mut out = Outbox::default();
        out.publish(&thread, ThreadEvent::Work { worktree: Box::new(w.clone()) });
        self.commit(tx, out).await?;
        Ok(Started::Begun(w))
    }

    /// Records a check's result if it is still the running one (told on
    /// the thread); with `fix`, sends the member back when it failed and
    /// tries are left. Tried [`Again`], a result its first try recorded is
    /// answered as that try would have been ([`rules::written`]).
    pub async fn end_check(
        &self,
        thread: String,
        member: String,
        check: WorkCheck,
        fix: Fix,
        again: Again,
    ) -> DbResult<CheckEnded> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        // A first try whose `COMMIT` is still on its way holds the row:
        // waited out.
        lock(&tx, &thread, &member).await?;
        let Some(w) = get(&tx, &thread, &member).await? else { return Ok(CheckEnded::Superseded) };
        // Tried again, its first try's result is answered as that try was.
        let written = if again == Again::Retry { rules::written(&w, &check, fix) } else { None };
        let fixing = match written {
            Some(fixing) => fixing,
            None if !rules::is_current(&w, &check) => return Ok(CheckEnded::Superseded),
            None => {
                set(&tx, &w, &check).await?;
                let fixing = rules::sends_back(&w, &check, fix);
                if fixing {
                    tx.execute(
                        &tx.prepare_cached(
                            "UPDATE worktrees SET fixes = fixes + 1, state = 'working' \
                             WHERE thread_id = $1 AND member = $2",
                        )
                        .await?,
                        &[&thread, &member],
                    )
                    .await?;
                }
                fixing
            }
        };
        let Some(w) = get(&tx, &thread, &member).await? else { return Ok(CheckEnded::Superseded) };
        let mut out = Outbox::default();
        out.publish(&thread, ThreadEvent::Work { worktree: Box::new(w.clone()) });
        self.commit(tx, out).await?;
        Ok(CheckEnded::Recorded { worktree: Box::new(w), fixing })
    }

    /// The worktrees whose check was running when a daemon stopped.
    pub async fn running_checks(&self) -> DbResult<Vec<Worktree>> {
        let c = self.conn().await?;
        let keys = c
            .query(
                &c.prepare_cached(
                    "SELECT thread_id, member FROM worktrees WHERE check_status = 'running' AND removed_at IS NULL \
                     ORDER BY created_at",
                )
                .await?,
                &[],
            )
            .await?;
        let mut out = Vec::new();
        for k in keys {
            let (t, m): (String, String) = (k.try_get(0)?, k.try_get(1)?);
            out.extend(get(&c, &t, &m).await?);
        }
        Ok(out)
    }
}
