//! The check in a member's worktree, as the registry keeps it (issue 34):
//! what beginning and ending a check come to, whichever engine records it.

use kd_proto::work::{CheckStatus, WorkCheck, WorkState, Worktree};

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

/// The rules both engines record a check by.
pub mod rules {
    use super::*;

    /// The running check a worktree's head gets since `at`; None when the
    /// work takes no check (settled, tampered, its worktree gone).
    pub fn begins(w: &Worktree, at: i64) -> Option<WorkCheck> {
        (w.state.takes_work() && w.removed_at_ms.is_none()).then(|| WorkCheck {
            status: CheckStatus::Running,
            commit: w.head.clone(),
            exit_code: None,
            duration_ms: 0,
            output: String::new(),
            started_at_ms: at,
        })
    }

    /// Whether `result` is of the check `w` has running (begun at the same
    /// time, on the same commit): a newer check supersedes it.
    pub fn is_current(w: &Worktree, result: &WorkCheck) -> bool {
        w.check.as_ref().is_some_and(|c| {
            c.status == CheckStatus::Running && c.started_at_ms == result.started_at_ms && c.commit == result.commit
        })
    }

    /// What an end of a check tried again (`db::outage::Again`) finds its
    /// first try wrote — `result` recorded as `w`'s check, the answer of
    /// its commit lost — and whether that try sent the member back: with
    /// `fix`, a result that did not pass leaves the work `working` only
    /// then (a check ends on work that is done: `kd check` refuses work in
    /// progress, and a run's end marks its check running as its work is
    /// done). `None`: that result is not recorded — the first try was not
    /// written, or another check's is.
    pub fn written(w: &Worktree, result: &WorkCheck, fix: bool) -> Option<bool> {
        let failed = result.status != CheckStatus::Pass;
        (w.check.as_ref() == Some(result)).then_some(fix && failed && w.state == WorkState::Working)
    }

    /// Whether `result`, recorded with `fix`, sends the member back: it did
    /// not pass and the work, still taking work, has tries left.
    pub fn sends_back(w: &Worktree, result: &WorkCheck, fix: bool) -> bool {
        fix && result.status != CheckStatus::Pass
            && w.fixes < w.until_green
            && w.state.takes_work()
            && w.removed_at_ms.is_none()
    }
}
