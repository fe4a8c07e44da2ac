//! Agent sessions per thread (F-R4) and the single-resume rule: at most one
//! active session per thread and agent, and resuming a session that someone
//! else has active is refused, never forked. A session whose holder process
//! died is free again.

use kd_proto::types::{Session, SessionStatus};
use serde_json::{Value, json};

use super::events::NewEvent;
use super::{DbError, DbResult};

/// Parameters of [`start`], already validated.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub thread: String,
    pub agent: String,
    pub backend_session_id: Option<String>,
    pub holder: Option<String>,
    pub pid: Option<u32>,
    pub metadata: Value,
}

/// Outcome of a start or resume: rejections are outcomes, not errors, so
/// that the events recording them are committed.
#[derive(Debug)]
pub enum Taken {
    Allowed(Session),
    /// `node`: where the holder runs, on a registry several nodes share.
    Rejected {
        session: String,
        holder: Option<String>,
        pid: Option<u32>,
        node: Option<String>,
    },
}

impl From<Taken> for DbResult<Session> {
    fn from(t: Taken) -> Self {
        match t {
            Taken::Allowed(s) => Ok(s),
            Taken::Rejected { session, holder, pid, node } => {
                Err(DbError::SessionActive { session, holder, pid, node })
            }
        }
    }
}

/// The sessions that may block, in the order [`blocking`] tries them:
/// `own` when active, else the thread's active session of the agent
/// (`of_thread`); then the active `copies` of the same backend
/// conversation but `own`.
pub(crate) fn candidates(own: Option<&Session>, of_thread: Option<Session>, copies: Vec<Session>) -> Vec<Session> {
    let mut candidates = Vec::new();
    match own {
        Some(s) if s.status == SessionStatus::Active => candidates.push(s.clone()),
        _ => candidates.extend(of_thread),
    }
    candidates.extend(copies.into_iter().filter(|c| own.is_none_or(|o| o.id != c.id)));
    candidates
}

/// The pid of an active session's holder when that process is dead: the
/// session is free again. A session without a pid is never reclaimed.
pub(crate) fn dead_holder(s: &Session, alive: &dyn Fn(u32) -> bool) -> Option<u32> {
    s.pid.filter(|&pid| !alive(pid))
}

/// A session's status from its column; an unknown one reads as expired.
pub(crate) fn status_of(text: &str) -> SessionStatus {
    match text {
        "active" => SessionStatus::Active,
        "completed" => SessionStatus::Completed,
        "idle" => SessionStatus::Idle,
        "archived" => SessionStatus::Archived,
        _ => SessionStatus::Expired,
    }
}

/// What a refused start or resume (`session`) records, whatever the engine:
/// `race.resume_conflict`, and `session.resume_rejected` for a resume, each
/// naming the active session that blocked it.
pub(crate) fn refusal_events<'a>(
    thread: &'a str,
    session: Option<&'a str>,
    agent: &'a str,
    active: &Session,
    requested_by: Option<&str>,
    backend: Option<&str>,
) -> Vec<NewEvent<'a>> {
    let data = json!({"holder": active.holder, "pid": active.pid, "requested_by": requested_by,
                      "active_session": active.id, "active_thread": active.thread, "backend_session_id": backend});
    let kinds: &[&'static str] = if session.is_some() {
        &["session.resume_rejected", "race.resume_conflict"]
    } else {
        &["race.resume_conflict"]
    };
    kinds
        .iter()
        .map(|kind| NewEvent {
            kind,
            thread: Some(thread),
            session,
            agent: Some(agent),
            data: data.clone(),
            ..Default::default()
        })
        .collect()
}

/// How a session ends: its status, the backend id to keep, and the last
/// message seq its agent was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnd {
    pub id: String,
    pub status: SessionStatus,
    pub backend_session_id: Option<String>,
    pub seen_seq: Option<u64>,
}
