//! The registry's inspection and coordination primitives: `run.*`,
//! `session.*`, `lock.*`, `events.list`.

use kd_proto::RpcResult;
use kd_proto::types::*;

use super::error::invalid;
use super::validate;
use crate::agent::registry::StopReason;
use crate::db::events::EventFilter;
use crate::db::sessions::{NewSession, SessionEnd};
use crate::state::Daemon;

pub async fn run_list(d: &Daemon, thread: Option<String>) -> RpcResult<Vec<RunInfo>> {
    validate::label("thread", thread.as_deref())?;
    Ok(d.agents.runs.list(thread.as_deref()).iter().map(|r| r.info()).collect())
}

pub async fn run_cancel(
    d: &Daemon,
    thread: String,
    member: Option<String>,
    run: Option<String>,
) -> RpcResult<Vec<RunInfo>> {
    validate::thread_id(&thread)?;
    validate::label("member", member.as_deref())?;
    validate::label("run", run.as_deref())?;
    d.db.thread(thread.clone()).await?;
    // The thread's members run on another node: it stops them there.
    if let Some(owner) = crate::council::live_owner(&d.db, &thread).await? {
        let cancel = crate::db::runs::Cancel { thread, member, run, turns: false };
        return Ok(d.db.cancel_on_node(owner, cancel).await?);
    }
    let chosen: Vec<_> = d
        .agents
        .runs
        .list(Some(&thread))
        .into_iter()
        .filter(|r| member.as_ref().is_none_or(|m| &r.member == m) && run.as_ref().is_none_or(|id| &r.id == id))
        .collect();
    for r in &chosen {
        r.stop(StopReason::Cancelled);
    }
    Ok(chosen.iter().map(|r| r.info()).collect())
}

pub async fn session_start(
    d: &Daemon,
    thread: String,
    agent: String,
    backend_session_id: Option<String>,
    holder: Option<String>,
    pid: Option<u32>,
    metadata: Option<serde_json::Value>,
) -> RpcResult<Session> {
    validate::thread_id(&thread)?;
    validate::member(&agent)?;
    validate::label("backend_session_id", backend_session_id.as_deref())?;
    validate::label("holder", holder.as_deref())?;
    validate::pid(pid)?;
    let metadata = metadata.unwrap_or_else(|| serde_json::json!({}));
    if !metadata.is_object() {
        return Err(invalid("metadata must be a JSON object"));
    }
    let s = NewSession { thread, agent, backend_session_id, holder, pid, metadata };
    Ok(d.db.start_session(s).await?)
}

pub async fn session_resume(
    d: &Daemon,
    session: String,
    holder: Option<String>,
    pid: Option<u32>,
) -> RpcResult<Session> {
    validate::label("session", Some(&session))?;
    validate::label("holder", holder.as_deref())?;
    validate::pid(pid)?;
    Ok(d.db.resume_session(session, holder, pid).await?)
}

pub async fn session_end(
    d: &Daemon,
    session: String,
    status: Option<SessionStatus>,
    backend_session_id: Option<String>,
) -> RpcResult<Session> {
    validate::label("session", Some(&session))?;
    validate::label("backend_session_id", backend_session_id.as_deref())?;
    let status = status.unwrap_or(SessionStatus::Completed);
    let end = SessionEnd { id: session, status, backend_session_id, seen_seq: None };
    Ok(d.db.end_session(end).await?)
}

pub async fn session_list(
    d: &Daemon,
    thread: Option<String>,
    agent: Option<String>,
    status: Option<SessionStatus>,
) -> RpcResult<Vec<Session>> {
    validate::label("thread", thread.as_deref())?;
    validate::label("agent", agent.as_deref())?;
    Ok(d.db.sessions(thread, agent, status).await?)
}

pub async fn session_get(d: &Daemon, session: String) -> RpcResult<Session> {
    validate::label("session", Some(&session))?;
    Ok(d.db.session(session).await?)
}

pub async fn lock_acquire(
    d: &Daemon,
    resource: String,
    holder: String,
    ttl_ms: u64,
    pid: Option<u32>,
) -> RpcResult<LockOutcome> {
    validate::required_label("resource", &resource)?;
    validate::required_label("holder", &holder)?;
    validate::ttl(ttl_ms)?;
    validate::pid(pid)?;
    Ok(d.db.acquire_lock(resource, holder, ttl_ms, pid).await?)
}

pub async fn lock_release(d: &Daemon, resource: String, token: u64) -> RpcResult<LockReleased> {
    validate::required_label("resource", &resource)?;
    Ok(d.db.release_lock(resource, token).await?)
}

pub async fn lock_list(d: &Daemon, resource: Option<String>) -> RpcResult<Vec<Lock>> {
    validate::label("resource", resource.as_deref())?;
    Ok(d.db.locks(resource).await?)
}

pub async fn events_list(
    d: &Daemon,
    thread: Option<String>,
    agent: Option<String>,
    kind: Option<String>,
    since_id: Option<u64>,
    limit: Option<u32>,
    before_id: Option<u64>,
) -> RpcResult<Vec<Event>> {
    validate::position("since_id", since_id)?;
    validate::position("before_id", before_id)?;
    validate::label("thread", thread.as_deref())?;
    validate::label("agent", agent.as_deref())?;
    validate::label("kind", kind.as_deref())?;
    // Refused, not cut: a client asking for more would think it had all.
    let limit = match limit {
        Some(n) if n > EVENTS_PAGE => {
            return Err(invalid(format!(
                "limit is at most {EVENTS_PAGE} events at once, got {n}; page with before_id or since_id"
            )));
        }
        n => n.unwrap_or(EVENTS_PAGE),
    };
    Ok(d.db.events(EventFilter { thread, agent, kind, since_id, before_id, limit }).await?)
}
