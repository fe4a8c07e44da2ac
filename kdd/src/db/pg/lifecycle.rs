//! Thread lifecycle writes on PostgreSQL: the operations of
//! [`crate::db::lifecycle`]. A transition locks the thread's row first,
//! so the check "nothing changed since the reaper looked"
//! and the move are one step against appends, which lock the same row.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Thread, ThreadEvent, ThreadStatus};
use serde_json::json;

use super::Pg;
use super::{events, threads};
use crate::db::events::NewEvent;
use crate::db::lifecycle::{Material, Summary};
use crate::db::threads::status_str;
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Locks thread `id`'s row until the transaction ends (`lock`: `FOR NO KEY
/// UPDATE`, the lock an append takes; `FOR UPDATE` for a delete, which
/// also waits for rows being added under the thread); NotFound when there
/// is none.
async fn lock_thread(c: &impl GenericClient, id: &str, lock: &str) -> DbResult<()> {
    let row = c
        .query_opt(&c.prepare_cached(&format!("SELECT 1 FROM threads WHERE id = $1 FOR {lock}")).await?, &[&id])
        .await?;
    match row {
        Some(_) => Ok(()),
        None => Err(DbError::NotFound(format!("thread {id}"))),
    }
}

/// Moves thread `id` to `to` for `reason` (`age`, `message`, `archive`,
/// `unarchive`), with `summary` when archiving. Nothing happens when it is
/// there already.
pub(crate) async fn set_status(
    c: &impl GenericClient,
    now: i64,
    id: &str,
    to: ThreadStatus,
    reason: &str,
    summary: Option<&Summary>,
    out: &mut Outbox,
) -> DbResult<Thread> {
    lock_thread(c, id, "NO KEY UPDATE").await?;
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
                json!({"reason": reason, "sessions_suspended": suspended,
                                   "idle_for_ms": now - thread.last_activity_at_ms}),
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
                c.execute(
                    &c.prepare_cached("UPDATE threads SET summary = $2, summary_by = $3 WHERE id = $1").await?,
                    &[&id, &s.text, &s.by],
                )
                .await?;
            }
            (
                "thread.archive",
                json!({"reason": reason, "sessions_archived": archived,
                                      "summary_by": summary.map(|s| s.by.as_str())}),
            )
        }
        ThreadStatus::Active => {
            let kind = if thread.status == ThreadStatus::Archived { "thread.unarchive" } else { "thread.revive" };
            (kind, json!({"reason": reason, "from": status_str(thread.status)}))
        }
    };
    if to == ThreadStatus::Active {
        // Opening a thread again is activity: it starts its idle time anew.
        c.execute(
            &c.prepare_cached("UPDATE threads SET last_activity_at = greatest(last_activity_at, $2) WHERE id = $1")
                .await?,
            &[&id, &now],
        )
        .await?;
    }
    c.execute(&c.prepare_cached("UPDATE threads SET status = $2 WHERE id = $1").await?, &[&id, &status_str(to)])
        .await?;
    events::record(c, now, &NewEvent { kind, thread: Some(id), data, ..Default::default() }).await?;
    out.publish(id, ThreadEvent::Status { status: to, reason: reason.to_string() });
    threads::get(c, id).await
}

/// Ages thread `id` to `to` only if it is as the reaper saw it: no activity
/// since `seen_activity`, no run in flight. Returns whether it moved.
pub(crate) async fn age(
    c: &impl GenericClient,
    now: i64,
    id: &str,
    seen_activity: i64,
    to: ThreadStatus,
    summary: Option<&Summary>,
    out: &mut Outbox,
) -> DbResult<bool> {
    lock_thread(c, id, "NO KEY UPDATE").await?;
    let thread = threads::get(c, id).await?;
    if thread.last_activity_at_ms != seen_activity || thread.status == to || in_flight(c, id).await? > 0 {
        return Ok(false);
    }
    set_status(c, now, id, to, "age", summary, out).await?;
    Ok(true)
}

/// Runs of the thread still waiting or streaming.
pub(crate) async fn in_flight(c: &impl GenericClient, id: &str) -> DbResult<u32> {
    let n: i64 = c
        .query_one(
            &c.prepare_cached(
                "SELECT count(*) FROM runs WHERE thread_id = $1 AND (status = 'waiting' OR status = 'streaming')",
            )
            .await?,
            &[&id],
        )
        .await?
        .try_get(0)?;
    Ok(n as u32)
}

/// At most `questions` King messages and the last answer of each member.
pub(crate) async fn material(c: &impl GenericClient, id: &str, questions: u32) -> DbResult<Material> {
    let rows = c
        .query(
            &c.prepare_cached("SELECT body FROM messages WHERE thread_id = $1 AND kind = 'king' ORDER BY seq LIMIT $2")
                .await?,
            &[&id, &i64::from(questions)],
        )
        .await?;
    let questions = rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT m.sender, m.body FROM messages m
                 JOIN (SELECT sender, max(seq) AS seq FROM messages WHERE thread_id = $1 AND kind = 'agent' AND purpose IS NULL
                       GROUP BY sender) last ON last.sender = m.sender AND last.seq = m.seq
                 WHERE m.thread_id = $1 ORDER BY m.seq",
            )
            .await?,
            &[&id],
        )
        .await?;
    let last_answers = rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<DbResult<_>>()?;
    Ok(Material { questions, last_answers })
}

/// Keeps `summary` as the thread's summary (its status is unchanged).
pub(crate) async fn set_summary(c: &impl GenericClient, now: i64, id: &str, summary: &Summary) -> DbResult<Thread> {
    threads::get(c, id).await?;
    c.execute(
        &c.prepare_cached("UPDATE threads SET summary = $2, summary_by = $3 WHERE id = $1").await?,
        &[&id, &summary.text, &summary.by],
    )
    .await?;
    events::record(
        c,
        now,
        &NewEvent { kind: "thread.summary", thread: Some(id), data: json!({"by": summary.by}), ..Default::default() },
    )
    .await?;
    threads::get(c, id).await
}

/// Names the thread.
pub(crate) async fn set_title(c: &impl GenericClient, now: i64, id: &str, title: &str) -> DbResult<Thread> {
    threads::get(c, id).await?;
    c.execute(&c.prepare_cached("UPDATE threads SET title = $2 WHERE id = $1").await?, &[&id, &title]).await?;
    events::record(
        c,
        now,
        &NewEvent { kind: "thread.title", thread: Some(id), data: json!({"title": title}), ..Default::default() },
    )
    .await?;
    threads::get(c, id).await
}

/// Deletes the thread with everything it holds; its branches lose their
/// parent. Refused while runs are in flight. Returns how many messages went.
pub(crate) async fn delete(c: &impl GenericClient, now: i64, id: &str, out: &mut Outbox) -> DbResult<u64> {
    lock_thread(c, id, "UPDATE").await?;
    let running = in_flight(c, id).await?;
    if running > 0 {
        return Err(DbError::Invalid(format!(
            "thread {id} has {running} run{} in flight; cancel {} or delete with force",
            if running == 1 { "" } else { "s" },
            if running == 1 { "it" } else { "them" }
        )));
    }
    let messages: i64 = c
        .query_one(&c.prepare_cached("SELECT count(*) FROM messages WHERE thread_id = $1").await?, &[&id])
        .await?
        .try_get(0)?;
    c.execute(&c.prepare_cached("DELETE FROM conversation_events WHERE thread_id = $1").await?, &[&id]).await?;
    // Messages, runs (and their partial text), sessions, inbox, participants,
    // acknowledgements and the current-thread entry go by cascade.
    c.execute(&c.prepare_cached("DELETE FROM threads WHERE id = $1").await?, &[&id]).await?;
    events::record(
        c,
        now,
        &NewEvent { kind: "thread.delete", data: json!({"thread": id, "messages": messages}), ..Default::default() },
    )
    .await?;
    out.threads_added -= 1;
    Ok(messages as u64)
}

impl Pg {
    pub async fn set_thread_status(
        &self,
        id: String,
        to: ThreadStatus,
        reason: &'static str,
        summary: Option<Summary>,
    ) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let thread = set_status(&tx, now_ms(), &id, to, reason, summary.as_ref(), &mut out).await?;
        self.commit(tx, out).await?;
        Ok(thread)
    }

    pub async fn age_thread(
        &self,
        id: String,
        seen_activity: i64,
        to: ThreadStatus,
        summary: Option<Summary>,
    ) -> DbResult<bool> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let moved = age(&tx, now_ms(), &id, seen_activity, to, summary.as_ref(), &mut out).await?;
        self.commit(tx, out).await?;
        Ok(moved)
    }

    pub async fn summary_material(&self, id: String, questions: u32) -> DbResult<Material> {
        material(&self.conn().await?, &id, questions).await
    }

    pub async fn set_thread_summary(&self, id: String, summary: Summary) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let thread = set_summary(&tx, now_ms(), &id, &summary).await?;
        self.commit(tx, Default::default()).await?;
        Ok(thread)
    }

    pub async fn set_thread_title(&self, id: String, title: String) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let thread = set_title(&tx, now_ms(), &id, &title).await?;
        self.commit(tx, Default::default()).await?;
        Ok(thread)
    }

    pub async fn delete_thread(&self, id: String) -> DbResult<u64> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let messages = delete(&tx, now_ms(), &id, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(messages)
    }
}
