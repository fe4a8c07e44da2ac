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

/// A commit as kd shows it: its first 12 characters.
pub fn short_commit(commit: &str) -> &str {
    match commit.char_indices().nth(12) {
        Some((at, _)) => &commit[..at],
        None => commit,
    }
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
    /// The check (`work.check`) of its last commit, when one ran or runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<WorkCheck>,
    /// Fix until green (`kd work --until-green N`): how many times a member
    /// whose check fails is sent back to fix it (0: never).
    #[serde(default)]
    pub until_green: u32,
    /// How many times it was sent back so far (`fixing 1/2`).
    #[serde(default)]
    pub fixes: u32,
    /// Its branch was pushed for a pull request (`work.pr`), last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shipped: Option<Shipped>,
    /// Why kd could not commit what the member's last run changed (git
    /// failed, or was stopped at its time bound): those changes are in the
    /// worktree only, not on the branch, until a later run's commit goes
    /// through. Such work is not accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncommitted: Option<String>,
}

impl Worktree {
    /// `fixing 1/2` while the member is sent back to fix its work.
    pub fn fixing(&self) -> Option<String> {
        (self.state == WorkState::Working && self.fixes > 0)
            .then(|| format!("fixing {}/{}", self.fixes, self.until_green))
    }

    /// Its check runs now (the work is not final yet).
    pub fn checking(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.status == CheckStatus::Running)
    }
}

/// How a check of a member's work came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// It runs now.
    Running,
    /// It exited 0.
    Pass,
    /// It exited otherwise.
    Fail,
    /// It ran past `work.check_timeout` and was killed.
    Timeout,
    /// kd could not run it (no such program, no confinement on this system, …).
    Error,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Running => "running",
            CheckStatus::Pass => "pass",
            CheckStatus::Fail => "fail",
            CheckStatus::Timeout => "timeout",
            CheckStatus::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<CheckStatus> {
        Some(match s {
            "running" => CheckStatus::Running,
            "pass" => CheckStatus::Pass,
            "fail" => CheckStatus::Fail,
            "timeout" => CheckStatus::Timeout,
            "error" => CheckStatus::Error,
            _ => return None,
        })
    }
}

/// The check (`work.check`) run in a member's worktree on one of its
/// commits, confined to the worktree, bounded in time and output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkCheck {
    pub status: CheckStatus,
    /// The commit it ran on.
    pub commit: String,
    /// Its exit code (none: running, killed, or not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// How long it ran, in milliseconds (0 while it runs).
    #[serde(default)]
    pub duration_ms: u64,
    /// The tail of what it printed (stdout, then stderr; at most 16 KiB), or
    /// why kd could not run it.
    #[serde(default)]
    pub output: String,
    /// When it started.
    pub started_at_ms: i64,
}

impl WorkCheck {
    /// `check pass`, `check fail (exit 1)`, `check timeout`, `checking`.
    pub fn summary(&self) -> String {
        match (self.status, self.exit_code) {
            (CheckStatus::Running, _) => "checking".into(),
            (CheckStatus::Fail, Some(c)) => format!("check fail (exit {c})"),
            (s, _) => format!("check {}", s.as_str()),
        }
    }
}

/// A member's branch pushed to the remote for a pull request (`work.pr`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Shipped {
    /// The git remote it was pushed to, and the commit pushed.
    pub remote: String,
    pub commit: String,
    pub at_ms: i64,
    /// The pull request gh opened (`pr`), or the host's page to open one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `url` is a pull request gh opened, not a page to open one.
    #[serde(default)]
    pub pr: bool,
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
    /// The check of its last commit, when one ran or runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<WorkCheck>,
    /// With `highlight`: the patch parsed file by file, each line cut into
    /// syntax-highlighted tokens — what a page draws (kd web) without
    /// parsing or highlighting anything itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highlighted: Option<Vec<DiffFile>>,
    /// With `commits`: its commits from the base, newest first (at most
    /// [`MAX_COMMITS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commits: Option<Vec<CommitLine>>,
}

/// How many commits `work.diff` lists at most.
pub const MAX_COMMITS: usize = 50;

/// A commit of a member's branch: its id and the first line of its
/// message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CommitLine {
    pub commit: String,
    pub subject: String,
}

/// One file of a highlighted patch (`work.diff` with `highlight`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiffFile {
    /// Its path (relative to the repository's top; the old one when the
    /// work deletes it).
    pub path: String,
    /// The work deletes it: it has no new side.
    #[serde(default)]
    pub deleted: bool,
    /// A binary file: no hunks.
    #[serde(default)]
    pub binary: bool,
    /// The grammar it was highlighted with (`Rust`, `Plain Text`, …).
    pub syntax: String,
    pub hunks: Vec<DiffHunk>,
}

/// One hunk of a highlighted patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiffHunk {
    /// `@@ -a,b +c,d @@ …`.
    pub header: String,
    pub lines: Vec<DiffLine>,
}

/// How a line of a diff stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// On both sides.
    Context,
    /// On the new side only.
    Added,
    /// On the old side only.
    Removed,
    /// `\ No newline at end of file`.
    Note,
}

/// One line of a highlighted hunk: its numbers on each side (1-based)
/// and its text (without the leading ` `, `+`, `-`) as tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DiffLine {
    pub kind: LineKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<u32>,
    pub tokens: Vec<Token>,
}

/// A piece of a line and what the grammar says it is (none: plain text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Token {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<TokenClass>,
}

/// The kinds of token a highlighted diff tells apart (a page styles each
/// as it likes: kd web's classes are `hl-<kind>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenClass {
    Comment,
    String,
    Number,
    Constant,
    Keyword,
    Operator,
    Function,
    Type,
    Tag,
    Attribute,
    Variable,
    Heading,
    Inserted,
    Deleted,
}

/// What an accept did, or would do (`check`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Accepted {
    pub member: String,
    /// The King's branch it is merged into.
    pub into: String,
    /// The merge (or squash) commit; none for a check, or when the King's
    /// branch held the work already (merged by hand: nothing was merged).
    pub commit: Option<String>,
    pub squash: bool,
    /// Only checked: nothing changed.
    pub checked: bool,
    /// The other members of the task whose work is now superseded.
    pub superseded: Vec<String>,
}

/// How `work.rebase` left a member's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RebaseOutcome {
    /// Its branch already holds the King's HEAD: nothing was done.
    UpToDate,
    /// The King's HEAD merged cleanly into its branch.
    Merged,
    /// The merge conflicts: the member is asked to resolve the markers in
    /// its worktree (a work run); kd commits the merge once none is left,
    /// and says how it ended in a message of kd's answering `seq`.
    Resolving,
}

/// What `work.rebase` did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Rebased {
    pub member: String,
    pub branch: String,
    /// The King's branch, and the commit of it merged in. A merge a
    /// restart cut short, concluded with the King's HEAD detached, is
    /// named by its commit (`from` is the commit's short form).
    pub from: String,
    pub onto: String,
    pub outcome: RebaseOutcome,
    /// `merged`: the branch's new head. `up_to_date`: the branch's head when
    /// the King's commit became the work's base only now (a merge whose base
    /// kd could not record, or one the member made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// `resolving`: the files that conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// `resolving`: the King's message asking the member to resolve them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

impl Rebased {
    /// What was merged in, as the King reads it: `main (1a2b3c4d5e6f)`, or
    /// the commit alone when it is named by its commit (`from`).
    pub fn merged_in(&self) -> String {
        named_commit(&self.from, &self.onto)
    }
}

/// `main (1a2b3c4d5e6f)`: a branch and its commit; the commit alone when
/// `name` is its short form (a detached HEAD is named so).
pub fn named_commit(name: &str, commit: &str) -> String {
    let short = short_commit(commit);
    if name == short { short.to_string() } else { format!("{name} ({short})") }
}

/// What `work.pr` did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PullRequest {
    pub member: String,
    /// The member's branch, pushed under the same name.
    pub branch: String,
    /// The King's branch the pull request is to merge into.
    pub base: String,
    pub shipped: Shipped,
    /// Why no pull request was opened (no gh on the PATH, or a host gh
    /// does not serve), when none was; or that one was open already for
    /// the branch, and the push updated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// With `accept`: the work is accepted (by the pull request), and the
    /// other members of the task whose work is now superseded.
    #[serde(default)]
    pub accepted: bool,
    #[serde(default)]
    pub superseded: Vec<String>,
}

#[rpc(server, client)]
pub trait WorkApi {
    /// Gives a task to members, each in a worktree of its own, in a new
    /// branch thread of the workspace's trunk titled with the task. With
    /// `until_green` (default `work.fix_rounds`), a member whose check fails
    /// is sent back to fix it, up to that many times.
    #[method(name = "work.start", param_kind = map, with_extensions)]
    async fn work_start(
        &self,
        workspace: String,
        task: String,
        to: Option<Vec<String>>,
        vote: Option<bool>,
        path: Option<String>,
        until_green: Option<u32>,
    ) -> RpcResult<WorkStarted>;

    /// The worktrees of a thread, or of every work thread of a workspace.
    #[method(name = "work.list", param_kind = map)]
    async fn work_list(&self, workspace: Option<String>, thread: Option<String>) -> RpcResult<Vec<Worktree>>;

    /// Each member's diff (or one member's) from its base; with
    /// `highlight`, also parsed and syntax highlighted (`highlighted`), with
    /// `commits` its commits.
    #[method(name = "work.diff", param_kind = map)]
    async fn work_diff(
        &self,
        thread: String,
        member: Option<String>,
        stat: Option<bool>,
        max_bytes: Option<u64>,
        highlight: Option<bool>,
        commits: Option<bool>,
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

    /// Runs the check (`work.check`) again in a member's worktree, on its
    /// last commit: returns the worktree with the check `running`; its
    /// result is told on the thread (a `work` event) and in `work.list`.
    #[method(name = "work.check", param_kind = map, with_extensions)]
    async fn work_check(&self, thread: String, member: String, path: Option<String>) -> RpcResult<Worktree>;

    /// Brings a member's work up to date: merges the King's current HEAD
    /// into the member's branch in its worktree (a merge: every commit of
    /// the member stays). When it conflicts, the member is asked to resolve
    /// the markers; kd commits the merge once none is left.
    #[method(name = "work.rebase", param_kind = map, with_extensions)]
    async fn work_rebase(&self, thread: String, member: String, path: Option<String>) -> RpcResult<Rebased>;

    /// Pushes a member's branch to the remote (`work.remote`, default
    /// `origin`) and opens a pull request into the King's current branch
    /// with gh when it is on the PATH, else gives the host's page to open
    /// one; with `accept`, the work is accepted by it (the others
    /// superseded), nothing merged in the King's tree.
    #[method(name = "work.pr", param_kind = map)]
    async fn work_pr(
        &self,
        thread: String,
        member: String,
        accept: Option<bool>,
        path: Option<String>,
    ) -> RpcResult<PullRequest>;

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

#[cfg(test)]
mod tests {
    use super::named_commit;

    #[test]
    fn a_commit_is_named_by_its_branch_or_alone_when_it_has_none() {
        let commit = "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d";
        assert_eq!(named_commit("main", commit), "main (1a2b3c4d5e6f)");
        assert_eq!(named_commit("1a2b3c4d5e6f", commit), "1a2b3c4d5e6f");
    }
}
