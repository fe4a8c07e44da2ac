//! The registry's inspection and coordination primitives: `run.*`,
//! `session.*`, `lock.*`, `events.list`.

use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::registry::*;

use super::error::invalid;
use super::{Rpc, validate};
use crate::agent::registry::StopReason;
use crate::db::events::EventFilter;
use crate::db::sessions::{NewSession, SessionEnd};

#[async_trait]
impl RegistryApiServer for Rpc {
    async fn run_list(&self, thread: Option<String>) -> RpcResult<Vec<RunInfo>> {
        validate::label("thread", thread.as_deref())?;
        Ok(self.d.agents.runs.list(thread.as_deref()).iter().map(|r| r.info()).collect())
    }

    async fn run_cancel(&self, thread: String, member: Option<String>, run: Option<String>) -> RpcResult<Vec<RunInfo>> {
        validate::thread_id(&thread)?;
        validate::label("member", member.as_deref())?;
        validate::label("run", run.as_deref())?;
        self.d.db.thread(thread.clone()).await?;
        // The thread's members run on another node: it stops them there.
        if let Some(owner) = crate::council::live_owner(&self.d.db, &thread).await? {
            let cancel = crate::db::runs::Cancel { thread, member, run, turns: false };
            return Ok(self.d.db.cancel_on_node(owner, cancel).await?);
        }
        let chosen: Vec<_> = self
            .d
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

    async fn session_start(
        &self,
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
        Ok(self.d.db.start_session(s).await?)
    }

    async fn session_resume(&self, session: String, holder: Option<String>, pid: Option<u32>) -> RpcResult<Session> {
        validate::label("session", Some(&session))?;
        validate::label("holder", holder.as_deref())?;
        validate::pid(pid)?;
        Ok(self.d.db.resume_session(session, holder, pid).await?)
    }

    async fn session_end(
        &self,
        session: String,
        status: Option<SessionStatus>,
        backend_session_id: Option<String>,
    ) -> RpcResult<Session> {
        validate::label("session", Some(&session))?;
        validate::label("backend_session_id", backend_session_id.as_deref())?;
        let status = status.unwrap_or(SessionStatus::Completed);
        let end = SessionEnd { id: session, status, backend_session_id, seen_seq: None };
        Ok(self.d.db.end_session(end).await?)
    }

    async fn session_list(
        &self,
        thread: Option<String>,
        agent: Option<String>,
        status: Option<SessionStatus>,
    ) -> RpcResult<Vec<Session>> {
        validate::label("thread", thread.as_deref())?;
        validate::label("agent", agent.as_deref())?;
        Ok(self.d.db.sessions(thread, agent, status).await?)
    }

    async fn session_get(&self, session: String) -> RpcResult<Session> {
        validate::label("session", Some(&session))?;
        Ok(self.d.db.session(session).await?)
    }

    async fn lock_acquire(
        &self,
        resource: String,
        holder: String,
        ttl_ms: u64,
        pid: Option<u32>,
    ) -> RpcResult<LockOutcome> {
        validate::required_label("resource", &resource)?;
        validate::required_label("holder", &holder)?;
        validate::ttl(ttl_ms)?;
        validate::pid(pid)?;
        Ok(self.d.db.acquire_lock(resource, holder, ttl_ms, pid).await?)
    }

    async fn lock_release(&self, resource: String, token: u64) -> RpcResult<LockReleased> {
        validate::required_label("resource", &resource)?;
        Ok(self.d.db.release_lock(resource, token).await?)
    }

    async fn lock_list(&self, resource: Option<String>) -> RpcResult<Vec<Lock>> {
        validate::label("resource", resource.as_deref())?;
        Ok(self.d.db.locks(resource).await?)
    }

    async fn events_list(
        &self,
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
        Ok(self.d.db.events(EventFilter { thread, agent, kind, since_id, before_id, limit }).await?)
    }
}
