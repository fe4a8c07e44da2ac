//! The SQLite side of [`crate::db::lifecycle`]: its SQL and the engine's operations.

use kd_proto::types::{Thread, ThreadEvent, ThreadStatus};
use rusqlite::{Connection, params};

use super::{events, threads};
use crate::db::events::NewEvent;
use crate::db::lifecycle::{Material, Summary, deleted, moved, refuse_delete, stale_age, summarised, titled};
use crate::db::threads::status_str;
use crate::db::{DbResult, Outbox};

/// Moves thread `id` to `to` for `reason` (`age`, `message`, `archive`,
/// `unarchive`), with `summary` when archiving. Nothing happens when it is
/// there already.
pub fn set_status(
    conn: &Connection,
    now: i64,
    id: &str,
    to: ThreadStatus,
    reason: &str,
    summary: Option<&Summary>,
    out: &mut Outbox,
) -> DbResult<Thread> {
    let thread = threads::get(conn, id)?;
    if thread.status == to {
        return Ok(thread);
    }
    let sessions = match to {
        ThreadStatus::Idle => conn
            .prepare_cached(
                "UPDATE sessions SET status = 'idle', holder = NULL, pid = NULL, last_active_at = ?2
                     WHERE thread_id = ?1 AND status = 'active'",
            )?
            .execute(params![id, now])?,
        ThreadStatus::Archived => {
            let archived = conn
                .prepare_cached(
                    "UPDATE sessions SET status = 'archived', holder = NULL, pid = NULL, last_active_at = ?2
                     WHERE thread_id = ?1 AND status != 'archived'",
                )?
                .execute(params![id, now])?;
            if let Some(s) = summary {
                conn.prepare_cached("UPDATE threads SET summary = ?2, summary_by = ?3 WHERE id = ?1")?
                    .execute(params![id, s.text, s.by])?;
            }
            archived
        }
        ThreadStatus::Active => 0,
    };
    let (kind, data) = moved(&thread, to, reason, now, sessions as u64, summary);
    if to == ThreadStatus::Active {
        // Opening a thread again is activity: it starts its idle time anew.
        conn.prepare_cached("UPDATE threads SET last_activity_at = max(last_activity_at, ?2) WHERE id = ?1")?
            .execute(params![id, now])?;
    }
    conn.prepare_cached("UPDATE threads SET status = ?2 WHERE id = ?1")?.execute(params![id, status_str(to)])?;
    events::record(conn, now, &NewEvent { kind, thread: Some(id), data, ..Default::default() })?;
    out.publish(id, ThreadEvent::Status { status: to, reason: reason.to_string() });
    threads::get(conn, id)
}

/// Ages thread `id` to `to` only if it is as the reaper saw it: no activity
/// since `seen_activity`, no run in flight. Returns whether it moved.
pub fn age(
    conn: &Connection,
    now: i64,
    id: &str,
    seen_activity: i64,
    to: ThreadStatus,
    summary: Option<&Summary>,
    out: &mut Outbox,
) -> DbResult<bool> {
    let thread = threads::get(conn, id)?;
    if stale_age(&thread, seen_activity, to, in_flight(conn, id)?) {
        return Ok(false);
    }
    set_status(conn, now, id, to, "age", summary, out)?;
    Ok(true)
}

/// Runs of the thread still waiting or streaming.
pub fn in_flight(conn: &Connection, id: &str) -> DbResult<u32> {
    Ok(conn
        .prepare_cached(
            "SELECT count(*) FROM runs WHERE thread_id = ?1 AND (status = 'waiting' OR status = 'streaming')",
        )?
        .query_row([id], |r| r.get(0))?)
}

/// At most `questions` King messages and the last answer of each member.
pub fn material(conn: &Connection, id: &str, questions: u32) -> DbResult<Material> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT body FROM messages WHERE thread_id = ?1 AND kind = 'king' ORDER BY seq {}",
        super::limit(Some(questions))
    ))?;
    let questions = stmt.query_map(params![id], |r| r.get(0))?.collect::<Result<_, _>>()?;
    let mut stmt = conn.prepare_cached(
        "SELECT m.sender, m.body FROM messages m
         JOIN (SELECT sender, max(seq) AS seq FROM messages WHERE thread_id = ?1 AND kind = 'agent' AND purpose IS NULL
               GROUP BY sender) last ON last.sender = m.sender AND last.seq = m.seq
         WHERE m.thread_id = ?1 ORDER BY m.seq",
    )?;
    let last_answers = stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    Ok(Material { questions, last_answers })
}

/// Keeps `summary` as the thread's summary (its status is unchanged).
pub fn set_summary(conn: &Connection, now: i64, id: &str, summary: &Summary) -> DbResult<Thread> {
    threads::get(conn, id)?;
    conn.prepare_cached("UPDATE threads SET summary = ?2, summary_by = ?3 WHERE id = ?1")?.execute(params![
        id,
        summary.text,
        summary.by
    ])?;
    events::record(conn, now, &summarised(id, &summary.by))?;
    threads::get(conn, id)
}

/// Names the thread.
pub fn set_title(conn: &Connection, now: i64, id: &str, title: &str) -> DbResult<Thread> {
    threads::get(conn, id)?;
    conn.prepare_cached("UPDATE threads SET title = ?2 WHERE id = ?1")?.execute(params![id, title])?;
    events::record(conn, now, &titled(id, title))?;
    threads::get(conn, id)
}

/// Deletes the thread with everything it holds; its branches lose their
/// parent. Refused while runs are in flight. Returns how many messages went.
pub fn delete(conn: &Connection, now: i64, id: &str, out: &mut Outbox) -> DbResult<u64> {
    threads::get(conn, id)?;
    let running = in_flight(conn, id)?;
    refuse_delete(id, running)?;
    let messages: i64 =
        conn.prepare_cached("SELECT count(*) FROM messages WHERE thread_id = ?1")?.query_row([id], |r| r.get(0))?;
    conn.prepare_cached("DELETE FROM conversation_events WHERE thread_id = ?1")?.execute([id])?;
    // Messages, runs (and their partial text), sessions, inbox, participants,
    // acknowledgements and the current-thread entry go by cascade.
    conn.prepare_cached("DELETE FROM threads WHERE id = ?1")?.execute([id])?;
    events::record(conn, now, &deleted(id, messages))?;
    out.threads_added -= 1;
    Ok(messages as u64)
}

impl super::Sqlite {
    pub async fn set_thread_status(
        &self,
        id: String,
        to: ThreadStatus,
        reason: &'static str,
        summary: Option<Summary>,
    ) -> DbResult<Thread> {
        self.write(move |c, out| set_status(c, crate::db::now_ms(), &id, to, reason, summary.as_ref(), out)).await
    }

    pub async fn age_thread(
        &self,
        id: String,
        seen_activity: i64,
        to: ThreadStatus,
        summary: Option<Summary>,
    ) -> DbResult<bool> {
        self.write(move |c, out| age(c, crate::db::now_ms(), &id, seen_activity, to, summary.as_ref(), out)).await
    }

    pub async fn summary_material(&self, id: String, questions: u32) -> DbResult<Material> {
        self.read(move |c| material(c, &id, questions)).await
    }

    pub async fn set_thread_summary(&self, id: String, summary: Summary) -> DbResult<Thread> {
        self.write(move |c, _| set_summary(c, crate::db::now_ms(), &id, &summary)).await
    }

    pub async fn set_thread_title(&self, id: String, title: String) -> DbResult<Thread> {
        self.write(move |c, _| set_title(c, crate::db::now_ms(), &id, &title)).await
    }

    pub async fn delete_thread(&self, id: String) -> DbResult<u64> {
        self.write(move |c, out| delete(c, crate::db::now_ms(), &id, out)).await
    }
}
