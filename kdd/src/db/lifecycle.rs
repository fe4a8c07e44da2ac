//! Thread lifecycle writes (SPEC §8, F-L2): a thread goes idle (its sessions
//! suspended), is archived (its sessions archived, a summary kept), is
//! revived by a message or unarchived when asked, and is deleted with all it
//! holds. Every transition is an event and a `status` notice to the
//! thread's subscribers. When to age a thread is [`crate::lifecycle`]'s
//! call; an engine only checks, in its transaction, that nothing changed
//! since that call ([`stale_age`]). Here: what each transition and change
//! records, for both engines.

use kd_proto::types::{Thread, ThreadStatus};
use serde_json::{Value, json};

use super::events::NewEvent;
use super::threads::status_str;
use super::{DbError, DbResult};

/// A summary and who wrote it (a member, or `kd` for the extractive one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub text: String,
    pub by: String,
}

/// What an extractive summary is made of: the King's first questions and
/// each member's last answer, in the order members last spoke.
pub struct Material {
    pub questions: Vec<String>,
    pub last_answers: Vec<(String, String)>,
}

/// The event a move of `thread` to `to` for `reason` records at `now`,
/// `sessions` of its sessions moved with it (suspended when it goes idle,
/// archived with it).
pub(crate) fn moved(
    thread: &Thread,
    to: ThreadStatus,
    reason: &str,
    now: i64,
    sessions: u64,
    summary: Option<&Summary>,
) -> (&'static str, Value) {
    match to {
        ThreadStatus::Idle => (
            "thread.idle",
            json!({"reason": reason, "sessions_suspended": sessions, "idle_for_ms": now - thread.last_activity_at_ms}),
        ),
        ThreadStatus::Archived => (
            "thread.archive",
            json!({"reason": reason, "sessions_archived": sessions, "summary_by": summary.map(|s| s.by.as_str())}),
        ),
        ThreadStatus::Active => {
            let kind = if thread.status == ThreadStatus::Archived { "thread.unarchive" } else { "thread.revive" };
            (kind, json!({"reason": reason, "from": status_str(thread.status)}))
        }
    }
}

/// Whether the reaper's view of `thread` (no activity since
/// `seen_activity`, `running` runs in flight) no longer holds, or it is at
/// `to` already: it is not aged then.
pub(crate) fn stale_age(thread: &Thread, seen_activity: i64, to: ThreadStatus, running: u32) -> bool {
    thread.last_activity_at_ms != seen_activity || thread.status == to || running > 0
}

/// A thread with `running` runs in flight is not deleted.
pub(crate) fn refuse_delete(id: &str, running: u32) -> DbResult<()> {
    if running == 0 {
        return Ok(());
    }
    Err(DbError::Invalid(format!(
        "thread {id} has {running} run{} in flight; cancel {} or delete with force",
        if running == 1 { "" } else { "s" },
        if running == 1 { "it" } else { "them" }
    )))
}

/// What keeping a summary by `by` records.
pub(crate) fn summarised<'a>(id: &'a str, by: &str) -> NewEvent<'a> {
    NewEvent { kind: "thread.summary", thread: Some(id), data: json!({"by": by}), ..Default::default() }
}

/// What naming a thread records.
pub(crate) fn titled<'a>(id: &'a str, title: &str) -> NewEvent<'a> {
    NewEvent { kind: "thread.title", thread: Some(id), data: json!({"title": title}), ..Default::default() }
}

/// What deleting a thread and its `messages` records (under no thread: it
/// is gone).
pub(crate) fn deleted(id: &str, messages: i64) -> NewEvent<'static> {
    NewEvent { kind: "thread.delete", data: json!({"thread": id, "messages": messages}), ..Default::default() }
}
