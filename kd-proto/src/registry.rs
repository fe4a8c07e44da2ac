//! The registry's inspection and coordination primitives
//! (`RegistryApiServer`, `RegistryApiClient`): agent runs (`run.*`),
//! sessions (`session.*`), conversation locks (`lock.*`) and the event log
//! (`events.list`).

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;
use crate::message::Purpose;

/// Where a run is in its life (F-A3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted while its member is busy on the thread: it starts when
    /// the member's run in flight has ended (F-C5).
    Queued,
    /// Accepted; the agent is being prepared or spawned — or, once it
    /// runs, it waits on the King's approval (`RunInfo::approval`).
    Waiting,
    /// The agent process runs.
    Streaming,
    Done,
    Error,
    TimedOut,
    Cancelled,
    /// Cut short by the daemon stopping or crashing.
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Waiting => "waiting",
            RunStatus::Streaming => "streaming",
            RunStatus::Done => "done",
            RunStatus::Error => "error",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Waiting | RunStatus::Streaming)
    }

    /// The status `as_str` names.
    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            RunStatus::Queued,
            RunStatus::Waiting,
            RunStatus::Streaming,
            RunStatus::Done,
            RunStatus::Error,
            RunStatus::TimedOut,
            RunStatus::Cancelled,
            RunStatus::Interrupted,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// One agent invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunInfo {
    pub id: String,
    pub thread: String,
    pub member: String,
    /// claude, codex, cursor, gemini or command.
    pub backend: String,
    pub status: RunStatus,
    /// The agent's process id once it is spawned.
    pub pid: Option<u32>,
    pub started_at_ms: i64,
    /// Characters streamed so far.
    pub chars: u64,
    /// The message the run answers.
    pub reply_to: Option<u64>,
    pub round: Option<u32>,
    /// The King's message whose exchange the run belongs to.
    #[serde(default)]
    pub exchange: Option<u64>,
    /// The failed message this run retries.
    #[serde(default)]
    pub replaces: Option<u64>,
    /// Start order: grows with every run the daemon starts (across
    /// restarts). Runs answering the same message are shown in this order.
    #[serde(default)]
    pub ordinal: u64,
    /// What the run writes for a multicast completion (a ballot, a
    /// synthesis), when it is more than an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<Purpose>,
    /// The pending approval the run waits on (its status reads `waiting`
    /// meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
}

impl RunInfo {
    /// Run `id` of `member` (its backend named as it) on `thread`, queued:
    /// not answering anything yet, nothing streamed.
    pub fn new(id: &str, thread: &str, member: &str) -> RunInfo {
        RunInfo {
            id: id.into(),
            thread: thread.into(),
            member: member.into(),
            backend: member.into(),
            status: RunStatus::Queued,
            pid: None,
            started_at_ms: 0,
            chars: 0,
            reply_to: None,
            round: None,
            exchange: None,
            replaces: None,
            ordinal: 0,
            purpose: None,
            approval: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Active,
    Completed,
    Expired,
    Idle,
    Archived,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Completed => "completed",
            SessionStatus::Expired => "expired",
            SessionStatus::Idle => "idle",
            SessionStatus::Archived => "archived",
        }
    }
}

/// An agent's conversation state for one thread (F-R4). At most one session
/// per thread and agent is `active`; resuming an active one is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    pub id: String,
    pub thread: String,
    pub agent: String,
    /// What the backend's `--resume` takes.
    pub backend_session_id: Option<String>,
    pub status: SessionStatus,
    /// Who holds it while active (a client or run label).
    pub holder: Option<String>,
    /// Process using it while active; a dead pid frees the session.
    pub pid: Option<u32>,
    pub started_at_ms: i64,
    pub last_active_at_ms: i64,
    pub metadata: serde_json::Value,
    /// The last message seq the agent was given in this session; a resumed
    /// session is sent every later message it has not seen.
    #[serde(default)]
    pub seen_seq: Option<u64>,
}

/// A held conversation lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Lock {
    pub resource: String,
    pub holder: String,
    pub pid: Option<u32>,
    /// Fencing token: grows with every acquisition, across restarts.
    pub token: u64,
    pub acquired_at_ms: i64,
    pub expires_at_ms: i64,
    /// Time left at the moment of the answer.
    pub expires_in_ms: u64,
}

/// Answer to `lock.acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum LockOutcome {
    /// The caller holds the lock; present `token` with fenced writes.
    Acquired {
        resource: String,
        token: u64,
        expires_at_ms: i64,
        /// True when the caller already held it and only the TTL was extended.
        renewed: bool,
    },
    /// Someone else holds it.
    Denied { resource: String, holder: String, pid: Option<u32>, expires_in_ms: u64 },
}

/// Answer to `lock.release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LockReleased {
    pub resource: String,
    pub token: u64,
}

/// Most events one `events.list` returns (and its default).
pub const EVENTS_PAGE: u32 = 1000;

/// One entry of the event log (F-R6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// Increasing id; pass it back as `since_id` (newer) or `before_id`
    /// (older) to page.
    pub id: u64,
    pub at_ms: i64,
    /// e.g. `thread.create`, `message`, `session.resume`, `lock.acquire`.
    pub kind: String,
    pub thread: Option<String>,
    pub session: Option<String>,
    pub agent: Option<String>,
    pub from: Option<String>,
    pub to: Vec<String>,
    pub correlation_id: Option<String>,
    pub data: serde_json::Value,
}

#[rpc(server, client)]
pub trait RegistryApi {
    #[method(name = "run.list", param_kind = map)]
    async fn run_list(&self, thread: Option<String>) -> RpcResult<Vec<RunInfo>>;

    #[method(name = "run.cancel", param_kind = map)]
    async fn run_cancel(&self, thread: String, member: Option<String>, run: Option<String>) -> RpcResult<Vec<RunInfo>>;

    #[method(name = "session.start", param_kind = map)]
    async fn session_start(
        &self,
        thread: String,
        agent: String,
        backend_session_id: Option<String>,
        holder: Option<String>,
        pid: Option<u32>,
        metadata: Option<serde_json::Value>,
    ) -> RpcResult<Session>;

    #[method(name = "session.resume", param_kind = map)]
    async fn session_resume(&self, session: String, holder: Option<String>, pid: Option<u32>) -> RpcResult<Session>;

    #[method(name = "session.end", param_kind = map)]
    async fn session_end(
        &self,
        session: String,
        status: Option<SessionStatus>,
        backend_session_id: Option<String>,
    ) -> RpcResult<Session>;

    #[method(name = "session.list", param_kind = map)]
    async fn session_list(
        &self,
        thread: Option<String>,
        agent: Option<String>,
        status: Option<SessionStatus>,
    ) -> RpcResult<Vec<Session>>;

    #[method(name = "session.get", param_kind = map)]
    async fn session_get(&self, session: String) -> RpcResult<Session>;

    #[method(name = "lock.acquire", param_kind = map)]
    async fn lock_acquire(
        &self,
        resource: String,
        holder: String,
        ttl_ms: u64,
        pid: Option<u32>,
    ) -> RpcResult<LockOutcome>;

    #[method(name = "lock.release", param_kind = map)]
    async fn lock_release(&self, resource: String, token: u64) -> RpcResult<LockReleased>;

    #[method(name = "lock.list", param_kind = map)]
    async fn lock_list(&self, resource: Option<String>) -> RpcResult<Vec<Lock>>;

    /// The newest events (before `before_id`), or the first after
    /// `since_id`; oldest first either way. At most
    /// `types::EVENTS_PAGE` at once.
    #[method(name = "events.list", param_kind = map)]
    async fn events_list(
        &self,
        thread: Option<String>,
        agent: Option<String>,
        kind: Option<String>,
        since_id: Option<u64>,
        limit: Option<u32>,
        before_id: Option<u64>,
    ) -> RpcResult<Vec<Event>>;
}

#[cfg(test)]
mod tests {
    use super::RunStatus;

    #[test]
    fn a_run_status_is_read_back_from_its_name() {
        for s in ["queued", "waiting", "streaming", "done", "error", "timed_out", "cancelled", "interrupted"] {
            assert_eq!(RunStatus::parse(s).map(RunStatus::as_str), Some(s));
        }
        assert_eq!(RunStatus::parse("lost"), None);
    }
}
