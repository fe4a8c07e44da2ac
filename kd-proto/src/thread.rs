//! Threads (`ThreadApiServer`, `ThreadApiClient`): conversations, their
//! members and lineage (a trunk and its branches), the current thread of a
//! workspace and branch, archiving, summaries, forks, titles, deleting and
//! importing (`thread.*`).

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;
use crate::message::MessageKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    Active,
    Idle,
    Archived,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Lineage {
    /// The workspace's main line of conversation.
    Trunk,
    /// Forked from a parent thread.
    Branch,
}

/// What a fork carries of its parent into the branch's context bundle
/// (`thread.fork`'s `carry`, `lifecycle.fork_carry`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Carry {
    /// The parent's conversation so far, as history (the default).
    #[default]
    Conversation,
    /// A summary of the parent made at fork time (the summarizer's, else
    /// the extractive one).
    Summary,
    /// Only the identity and policy files and the parent's stored summary.
    None,
}

impl Carry {
    pub fn as_str(self) -> &'static str {
        match self {
            Carry::Conversation => "conversation",
            Carry::Summary => "summary",
            Carry::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Carry> {
        [Carry::Conversation, Carry::Summary, Carry::None].into_iter().find(|c| c.as_str() == s)
    }
}

/// How an agent is given the conversation on each turn (F-A4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextMode {
    /// The whole thread history goes into every prompt; no backend session.
    #[default]
    History,
    /// The backend's own session for this thread and agent is resumed; the
    /// prompt carries only what the agent has not seen.
    Resume,
}

impl ContextMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ContextMode::History => "history",
            ContextMode::Resume => "resume",
        }
    }
}

/// A conversation: messages, its members, where it was started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Thread {
    pub id: String,
    /// The directory the conversation belongs to (the client's git work tree or cwd).
    pub workspace: String,
    /// The git branch checked out in the workspace when the thread was created.
    pub branch: Option<String>,
    pub title: Option<String>,
    pub status: ThreadStatus,
    pub lineage: Lineage,
    /// The thread this one was forked from (branch lineage).
    pub parent: Option<String>,
    /// Council members taking part, in turn order.
    pub members: Vec<String>,
    pub context: ContextMode,
    pub created_at_ms: i64,
    pub last_activity_at_ms: i64,
    /// Highest message seq (0 for an empty thread); also the message count.
    pub last_seq: u64,
    /// Where an imported thread came from (e.g. `kingdom:/repo/.kd/branches/main/threads/council-a8b3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// What the thread came to, written when it was archived (or by
    /// `kd summarize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// Answer to `thread.delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Deleted {
    pub thread: String,
    /// Messages deleted with it.
    pub messages: u64,
    /// Runs that were in flight and were cancelled first (`force`).
    pub cancelled_runs: u32,
}

/// A message of `thread.import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ImportedMessage {
    pub from: String,
    pub to: Vec<String>,
    /// Default: king when from is king, else agent.
    #[serde(default)]
    pub kind: Option<MessageKind>,
    pub body: String,
    pub created_at_ms: i64,
    /// Files the message refers to.
    #[serde(default)]
    pub refs: Vec<String>,
    /// The backend and model that answered, when the file says.
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
}

#[rpc(server, client)]
pub trait ThreadApi {
    #[method(name = "thread.create", param_kind = map)]
    async fn thread_create(
        &self,
        workspace: String,
        branch: Option<String>,
        title: Option<String>,
        members: Option<Vec<String>>,
        id: Option<String>,
        lineage: Option<Lineage>,
        parent: Option<String>,
        set_current: Option<bool>,
        // The macro's generated client uses a local named `context`.
        #[argument(rename = "context")] context_mode: Option<ContextMode>,
    ) -> RpcResult<Thread>;

    #[method(name = "thread.list", param_kind = map)]
    async fn thread_list(
        &self,
        workspace: Option<String>,
        status: Option<ThreadStatus>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<Thread>>;

    #[method(name = "thread.get", param_kind = map)]
    async fn thread_get(&self, thread: String) -> RpcResult<Thread>;

    #[method(name = "thread.current", param_kind = map)]
    async fn thread_current(&self, workspace: String, branch: Option<String>) -> RpcResult<Option<Thread>>;

    #[method(name = "thread.set_current", param_kind = map)]
    async fn thread_set_current(&self, workspace: String, branch: Option<String>, thread: String) -> RpcResult<Thread>;

    #[method(name = "thread.archive", param_kind = map)]
    async fn thread_archive(&self, thread: String) -> RpcResult<Thread>;

    #[method(name = "thread.summarize", param_kind = map)]
    async fn thread_summarize(&self, thread: String, path: Option<String>) -> RpcResult<Thread>;

    #[method(name = "thread.fork", param_kind = map)]
    async fn thread_fork(
        &self,
        thread: String,
        title: Option<String>,
        carry: Option<Carry>,
        path: Option<String>,
    ) -> RpcResult<Thread>;

    #[method(name = "thread.unarchive", param_kind = map)]
    async fn thread_unarchive(&self, thread: String) -> RpcResult<Thread>;

    #[method(name = "thread.delete", param_kind = map)]
    async fn thread_delete(&self, thread: String, force: Option<bool>) -> RpcResult<Deleted>;

    #[method(name = "thread.set_title", param_kind = map)]
    async fn thread_set_title(&self, thread: String, title: String) -> RpcResult<Thread>;

    /// Creates a thread with its messages, in one transaction.
    #[method(name = "thread.import", param_kind = map)]
    async fn thread_import(
        &self,
        workspace: String,
        branch: Option<String>,
        id: Option<String>,
        title: Option<String>,
        members: Option<Vec<String>>,
        created_at_ms: Option<i64>,
        messages: Vec<ImportedMessage>,
        origin: Option<String>,
    ) -> RpcResult<Thread>;
}
