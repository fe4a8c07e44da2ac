//! The check in a member's worktree, as the registry keeps it (issue 34):
//! what beginning and ending a check come to, whichever engine records it.

use kd_proto::work::Worktree;

/// What [`crate::db::Db::begin_check`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// The check of the worktree's head is recorded running.
    Begun(Worktree),
    /// The work is settled, tampered with or gone: no check.
    Settled(Worktree),
    /// The member has no work on the thread.
    NoWork,
}

/// What [`crate::db::Db::end_check`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckEnded {
    /// The result is recorded; `fixing`: the member is sent back to fix its
    /// work (one more try counted, its work `working`).
    Recorded { worktree: Box<Worktree>, fixing: bool },
    /// Another check began since, or the work is gone: nothing recorded.
    Superseded,
}
