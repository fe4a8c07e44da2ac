//! The check in a member's worktree, as the registry keeps it (issue 34):
//! what beginning and ending a check come to, whichever engine records it.

use kd_proto::work::{CheckStatus, WorkCheck, Worktree};

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

/// Whether a check that does not pass sends its member back to fix its
/// work ([`crate::db::Db::end_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// Not sent back (a run the King cancelled or the daemon cut, `kd
    /// check`).
    No,
    /// Sent back while tries are left; the work had counted `fixes` tries
    /// as its check began (so an end tried again knows whether its first
    /// try sent it back: [`rules::written`]).
    Yes { fixes: u32 },
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
    /// its commit lost — and whether that try sent the member back: it
    /// counted one more try than the work had as its check began (only a
    /// check's end counts one, and no later check has ended: its result
    /// would be recorded). `None`: that result is not recorded — the first
    /// try was not written, or another check's is.
    pub fn written(w: &Worktree, result: &WorkCheck, fix: Fix) -> Option<bool> {
        let sent_back = matches!(fix, Fix::Yes { fixes } if w.fixes == fixes + 1);
        (w.check.as_ref() == Some(result)).then_some(sent_back)
    }

    /// Whether `result`, recorded with `fix`, sends the member back: it did
    /// not pass and the work, still taking work, has tries left.
    pub fn sends_back(w: &Worktree, result: &WorkCheck, fix: Fix) -> bool {
        fix != Fix::No
            && result.status != CheckStatus::Pass
            && w.fixes < w.until_green
            && w.state.takes_work()
            && w.removed_at_ms.is_none()
    }
}
