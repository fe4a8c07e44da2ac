//! What the engines' tests and the contract suite build alike: a run, a
//! member's worktree. Only the interface's types: both engines' tests take
//! them from here.

use kd_proto::types::{RunInfo, RunStatus};
use kd_proto::work::{WorkState, Worktree};

/// Run `id` of `member` on thread `t1`, waiting, for round 1 of the
/// exchange begun by message 1.
pub(crate) fn run_of(id: &str, member: &str) -> RunInfo {
    RunInfo {
        id: id.into(),
        thread: "t1".into(),
        member: member.into(),
        backend: "claude".into(),
        status: RunStatus::Waiting,
        pid: None,
        started_at_ms: 0,
        chars: 0,
        reply_to: Some(1),
        round: Some(1),
        exchange: Some(1),
        replaces: None,
        ordinal: 1,
        purpose: None,
    }
}

/// A member's worktree on thread `t1` of `/w`, made at `at`.
pub(crate) fn worktree(member: &str, at: i64) -> Worktree {
    Worktree {
        thread: "t1".into(),
        member: member.into(),
        task: "do it".into(),
        repo: "/w".into(),
        path: format!("/data/worktrees/w-t1/{member}"),
        branch: format!("kd/t1/{member}"),
        base: "b".repeat(40),
        head: "b".repeat(40),
        state: WorkState::Working,
        files: 0,
        added: 0,
        removed: 0,
        removed_at_ms: None,
        created_at_ms: at,
        last_run: None,
    }
}
