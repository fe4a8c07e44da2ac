//! STAND-IN until P2's `pgrun` lands (its lifecycle.rs replaces this whole
//! file): only `set_status`, which `messages::append` needs to revive an
//! idle thread, with the same signature.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Thread, ThreadEvent, ThreadStatus};
use serde_json::json;

use super::{events, threads};
use crate::db::events::NewEvent;
use crate::db::lifecycle::Summary;
use crate::db::threads::status_str;
use crate::db::{DbResult, Outbox};

/// Moves thread `id` to `to` for `reason`, with `summary` when archiving.
/// Nothing happens when it is there already.
pub(crate) async fn set_status(
    c: &impl GenericClient,
    now: i64,
    id: &str,
    to: ThreadStatus,
    reason: &str,
    summary: Option<&Summary>,
    out: &mut Outbox,
) -> DbResult<Thread> {
    c.execute(&c.prepare_cached("SELECT 1 FROM threads WHERE id = $1 FOR NO KEY UPDATE").await?, &[&id]).await?;
    let thread = threads::get(c, id).await?;
    if thread.status == to {
        return Ok(thread);
    }
    let (kind, data) = match to {
        ThreadStatus::Idle => {
            let suspended = c
                .execute(
                    &c.prepare_cached(
                        "UPDATE sessions SET status = 'idle', holder = NULL, pid = NULL, last_active_at = $2
                         WHERE thread_id = $1 AND status = 'active'",
                    )
                    .await?,
                    &[&id, &now],
                )
                .await?;
            (
                "thread.idle",
                json!({"reason": reason, "sessions_suspended": suspended, "idle_for_ms": now - thread.last_activity_at_ms}),
            )
        }
        ThreadStatus::Archived => {
            let archived = c
                .execute(
                    &c.prepare_cached(
                        "UPDATE sessions SET status = 'archived', holder = NULL, pid = NULL, last_active_at = $2
                         WHERE thread_id = $1 AND status != 'archived'",
                    )
                    .await?,
                    &[&id, &now],
                )
                .await?;
            if let Some(s) = summary {
                let stmt = c.prepare_cached("UPDATE threads SET summary = $2, summary_by = $3 WHERE id = $1").await?;
                c.execute(&stmt, &[&id, &s.text, &s.by]).await?;
            }
            (
                "thread.archive",
                json!({"reason": reason, "sessions_archived": archived, "summary_by": summary.map(|s| s.by.as_str())}),
            )
        }
        ThreadStatus::Active => {
            let kind = if thread.status == ThreadStatus::Archived { "thread.unarchive" } else { "thread.revive" };
            (kind, json!({"reason": reason, "from": status_str(thread.status)}))
        }
    };
    if to == ThreadStatus::Active {
        // Opening a thread again is activity: it starts its idle time anew.
        let stmt = c
            .prepare_cached("UPDATE threads SET last_activity_at = greatest(last_activity_at, $2) WHERE id = $1")
            .await?;
        c.execute(&stmt, &[&id, &now]).await?;
    }
    c.execute(&c.prepare_cached("UPDATE threads SET status = $2 WHERE id = $1").await?, &[&id, &status_str(to)])
        .await?;
    events::record(c, now, &NewEvent { kind, thread: Some(id), data, ..Default::default() }).await?;
    out.publish(id, ThreadEvent::Status { status: to, reason: reason.to_string() });
    threads::get(c, id).await
}
