//! Members do the work (F-W1..W6): each member a task is given to
//! implements it in a git worktree of its own, on a branch of its own, run
//! writable there and nowhere else; kd commits what it changed at the end
//! of each run. The King sees the diffs, has the council review or rank
//! them, and accepts one into their own branch (`WorkApiServer`,
//! `WorkApiClient`). These are the King's methods: an agent's process may
//! not call them.

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;

/// Where a member's work stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkState {
    /// A run of the member is in flight in its worktree, or none has ended
    /// yet.
    Working,
    /// Its last run ended; its changes are committed on its branch.
    Done,
    /// Merged into the King's branch (`work.accept`).
    Accepted,
    /// Turned down by the King (`work.reject`).
    Rejected,
    /// Another member's work of the same task was accepted.
    Superseded,
    /// Its worktree's `.git` is not what kd made (replaced by a repository
    /// of the member's own, a symlink, gone): kd did not commit the run's
    /// changes and will not run the member there again. Its files are kept
    /// for the King to look at; it can be rejected, never accepted.
    Tampered,
}

impl WorkState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkState::Working => "working",
            WorkState::Done => "done",
            WorkState::Accepted => "accepted",
            WorkState::Rejected => "rejected",
            WorkState::Superseded => "superseded",
            WorkState::Tampered => "tampered",
        }
    }

    pub fn parse(s: &str) -> Option<WorkState> {
        Some(match s {
            "working" => WorkState::Working,
            "done" => WorkState::Done,
            "accepted" => WorkState::Accepted,
            "rejected" => WorkState::Rejected,
            "superseded" => WorkState::Superseded,
            "tampered" => WorkState::Tampered,
            _ => return None,
        })
    }

    /// Its worktree and branch may go without losing anything a King would
    /// want: the work was merged or turned down.
    pub fn is_settled(self) -> bool {
        matches!(self, WorkState::Accepted | WorkState::Rejected | WorkState::Superseded)
    }

    /// The member works in its worktree when asked again (until the King
    /// settles it, or kd found it tampered with).
    pub fn takes_work(self) -> bool {
        matches!(self, WorkState::Working | WorkState::Done)
    }
}

/// One member's worktree of a work thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Worktree {
    pub thread: String,
    pub member: String,
    /// The task, as the King gave it.
    pub task: String,
    /// The repository's top-level directory (the King's tree).
    pub repo: String,
    /// The worktree's directory.
    pub path: String,
    /// `kd/<thread>/<member>`.
    pub branch: String,
    /// The commit the worktree was made at (the King's HEAD then).
    pub base: String,
    /// The branch's last commit (the base until kd committed the member's
    /// changes).
    pub head: String,
    pub state: WorkState,
    /// Files changed, lines added and removed, from the base to the head.
    pub files: u32,
    pub added: u64,
    pub removed: u64,
    /// The worktree is gone (its work accepted, rejected or empty, and the
    /// thread archived or deleted); the branch may be too.
    #[serde(default)]
    pub removed_at_ms: Option<i64>,
    pub created_at_ms: i64,
    /// How the member's last run in it ended (none yet: absent) — `done`
    /// work whose last run failed, was cancelled or cut is said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<crate::registry::RunStatus>,
}

/// What `work.start` began.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkStarted {
    /// The branch thread of the task, and its title.
    pub thread: String,
    pub title: String,
    /// The King's message giving the task.
    pub seq: u64,
    pub worktrees: Vec<Worktree>,
    /// The members' runs (their ids).
    pub runs: Vec<String>,
    /// A best-of-N: once every run ended, the members rank the diffs.
    pub vote: bool,
}

/// One file of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileStat {
    pub path: String,
    pub added: u64,
    pub removed: u64,
    /// A binary file: no line counts.
    #[serde(default)]
    pub binary: bool,
}

/// A member's work as a diff from its base.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MemberDiff {
    pub member: String,
    pub branch: String,
    pub base: String,
    pub head: String,
    pub state: WorkState,
    pub files: Vec<FileStat>,
    /// The patch (`git diff base..head`), unless only the stat was asked;
    /// cut at `max_bytes`.
    #[serde(default)]
    pub patch: Option<String>,
    /// The patch was cut.
    #[serde(default)]
    pub truncated: bool,
}

/// What an accept did, or would do (`check`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Accepted {
    pub member: String,
    /// The King's branch it is merged into.
    pub into: String,
    /// The merge (or squash) commit; none for a check.
    pub commit: Option<String>,
    pub squash: bool,
    /// Only checked: nothing changed.
    pub checked: bool,
    /// The other members of the task whose work is now superseded.
    pub superseded: Vec<String>,
}

#[rpc(server, client)]
pub trait WorkApi {
    /// Gives a task to members, each in a worktree of its own, in a new
    /// branch thread of the workspace's trunk titled with the task.
    #[method(name = "work.start", param_kind = map, with_extensions)]
    async fn work_start(
        &self,
        workspace: String,
        task: String,
        to: Option<Vec<String>>,
        vote: Option<bool>,
        path: Option<String>,
    ) -> RpcResult<WorkStarted>;

    /// The worktrees of a thread, or of every work thread of a workspace.
    #[method(name = "work.list", param_kind = map)]
    async fn work_list(&self, workspace: Option<String>, thread: Option<String>) -> RpcResult<Vec<Worktree>>;

    /// Each member's diff (or one member's) from its base.
    #[method(name = "work.diff", param_kind = map)]
    async fn work_diff(
        &self,
        thread: String,
        member: Option<String>,
        stat: Option<bool>,
        max_bytes: Option<u64>,
    ) -> RpcResult<Vec<MemberDiff>>;

    /// Asks members for a verdict on a diff — a member's work on a work
    /// thread, or a git revision of the thread's workspace: approve, or
    /// request changes, with reasons. Returns the asking message's seq.
    #[method(name = "work.review", param_kind = map, with_extensions)]
    async fn work_review(
        &self,
        thread: String,
        member: Option<String>,
        rev: Option<String>,
        to: Option<Vec<String>>,
        path: Option<String>,
    ) -> RpcResult<u64>;

    /// Merges a member's branch into the King's current branch in the
    /// King's tree; with `check`, only says whether it would.
    #[method(name = "work.accept", param_kind = map)]
    async fn work_accept(
        &self,
        thread: String,
        member: String,
        squash: Option<bool>,
        check: Option<bool>,
    ) -> RpcResult<Accepted>;

    /// Marks a member's work rejected.
    #[method(name = "work.reject", param_kind = map)]
    async fn work_reject(&self, thread: String, member: String) -> RpcResult<Worktree>;

    /// Adds the King's pending comment on lines of a member's diff (its
    /// new side, at the work's head): `kd_proto::comment`.
    #[method(name = "work.comment", param_kind = map)]
    async fn work_comment(
        &self,
        thread: String,
        member: String,
        path: String,
        line: u32,
        end_line: Option<u32>,
        body: String,
    ) -> RpcResult<crate::comment::Comment>;

    /// The comments on a work thread's work (of one member), oldest first.
    #[method(name = "work.comments", param_kind = map)]
    async fn work_comments(&self, thread: String, member: Option<String>) -> RpcResult<Vec<crate::comment::Comment>>;

    /// Sends every pending comment on a member's work as one King's
    /// message to it; the member revises in its worktree.
    #[method(name = "work.send_review", param_kind = map, with_extensions)]
    async fn work_send_review(
        &self,
        thread: String,
        member: String,
        message: Option<String>,
        path: Option<String>,
    ) -> RpcResult<crate::comment::ReviewSent>;

    /// Marks a comment resolved.
    #[method(name = "work.resolve_comment", param_kind = map)]
    async fn work_resolve_comment(&self, id: String) -> RpcResult<crate::comment::Comment>;
}
