//! Agent sessions per thread (F-R4) and the single-resume rule: at most one
//! active session per thread and agent, and resuming a session that someone
//! else has active is refused, never forked. A session whose holder process
//! died is free again. Here: what a start, resume, end or refusal is
//! given and records, and who blocks whom ([`candidates`]), for both
//! engines.

use kd_proto::types::{Session, SessionStatus};
use serde_json::{Value, json};

use super::events::NewEvent;
use super::row::Columns;
use super::{DbError, DbResult};

/// Parameters of a session's start, already validated.
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

/// The sessions that may block, in the order an engine tries them:
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

/// What a started session (`id`) records.
pub(crate) fn started<'a>(s: &'a NewSession, id: &'a str) -> NewEvent<'a> {
    NewEvent {
        kind: "session.start",
        thread: Some(&s.thread),
        session: Some(id),
        agent: Some(&s.agent),
        data: json!({"holder": s.holder, "pid": s.pid, "backend_session_id": s.backend_session_id}),
        ..Default::default()
    }
}

/// A session archived with its thread is not resumed.
pub(crate) fn refuse_archived(session: &Session) -> DbResult<()> {
    match session.status {
        SessionStatus::Archived => {
            Err(DbError::Invalid(format!("session {} is archived with its thread and cannot be resumed", session.id)))
        }
        _ => Ok(()),
    }
}

/// What a resumed session records, now held by `holder` (`pid`).
pub(crate) fn resumed<'a>(session: &'a Session, holder: Option<&str>, pid: Option<u32>) -> NewEvent<'a> {
    NewEvent {
        kind: "session.resume",
        thread: Some(&session.thread),
        session: Some(&session.id),
        agent: Some(&session.agent),
        data: json!({"holder": holder, "pid": pid, "backend_session_id": session.backend_session_id}),
        ..Default::default()
    }
}

/// A session is made active by a start or a resume, never by an end.
pub(crate) fn refuse_active_end(e: &SessionEnd) -> DbResult<()> {
    match e.status {
        SessionStatus::Active => {
            Err(DbError::Invalid("session.end cannot set status active; use session.resume".into()))
        }
        _ => Ok(()),
    }
}

/// What ending `session` as `e` says records: `race.session_fork` when the
/// backend went on in another conversation than the one resumed
/// (continuity is broken: kd follows the new one, and says so), then
/// `session.end`.
pub(crate) fn end_events<'a>(session: &'a Session, e: &SessionEnd) -> Vec<NewEvent<'a>> {
    let mut events = Vec::new();
    if let (Some(expected), Some(got)) = (&session.backend_session_id, &e.backend_session_id)
        && expected != got
    {
        events.push(NewEvent {
            kind: "race.session_fork",
            thread: Some(&session.thread),
            session: Some(&session.id),
            agent: Some(&session.agent),
            data: json!({"expected": expected, "got": got, "holder": session.holder}),
            ..Default::default()
        });
    }
    events.push(NewEvent {
        kind: "session.end",
        thread: Some(&session.thread),
        session: Some(&session.id),
        agent: Some(&session.agent),
        data: json!({"status": e.status.as_str(), "previous": session.status.as_str()}),
        ..Default::default()
    });
    events
}

/// What the release of a session whose holder (`pid`) died records.
pub(crate) fn reclaimed(s: &Session, pid: u32) -> NewEvent<'_> {
    NewEvent {
        kind: "session.reclaimed",
        thread: Some(&s.thread),
        session: Some(&s.id),
        agent: Some(&s.agent),
        data: json!({"dead_pid": pid, "holder": s.holder}),
        ..Default::default()
    }
}

/// A session as both engines select it: id, thread, agent,
/// backend_session_id, status, holder, pid, started_at, last_active_at,
/// metadata, seen_seq.
pub(crate) fn read<R: Columns>(r: &R) -> Result<Session, R::Error> {
    Ok(Session {
        id: r.text(0)?,
        thread: r.text(1)?,
        agent: r.text(2)?,
        backend_session_id: r.opt_text(3)?,
        status: status_of(&r.text(4)?),
        holder: r.opt_text(5)?,
        pid: r.opt_int(6)?.map(|p| p as u32),
        started_at_ms: r.int(7)?,
        last_active_at_ms: r.int(8)?,
        metadata: serde_json::from_str(&r.text(9)?).unwrap_or(Value::Null),
        seen_seq: r.opt_count(10)?,
    })
}
