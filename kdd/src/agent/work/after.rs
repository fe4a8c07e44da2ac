//! What follows a work run once its changes are committed, which the
//! layers above the agent decide (the check in the worktree and fix until
//! green, [`crate::work::check`]): told through [`AfterWork`], which they
//! install on the [`Runner`], so that nothing here depends on them.

use std::sync::Arc;

use kd_proto::types::RunStatus;

use super::super::Runner;
use super::super::registry::Run;
use super::super::spec::Spec;
use crate::db::check::Started;
use crate::db::now_ms;

/// Told when a member's work run ended and its changes were committed.
pub trait AfterWork: Send + Sync {
    /// `run` of `member` on `thread` ended with `status`; its work is
    /// committed and, when a check is configured, marked `running` on its
    /// head. `path`: the `PATH` the member ran with.
    fn committed(&self, thread: &str, member: &str, status: RunStatus, path: Option<String>);
}

/// Before the work's state moves on at the end of a run: with a check
/// configured (`work.check`), the check of its new head is marked running
/// — in the same event that says the run's work is done, so a client never
/// sees the work done without its check.
pub async fn mark_check(d: &Runner, run: &Run) {
    if d.after_work.get().is_none() {
        return;
    }
    let what = format!("the check of {}'s work on {}", run.member, run.thread);
    let begin = |_| d.db.begin_check(run.thread.clone(), run.member.clone(), now_ms());
    match d.db.until_back(&what, || d.is_closed(), begin).await {
        Ok(Started::Begun(_) | Started::Settled(_) | Started::NoWork) => {}
        Err(e) => tracing::error!(run = run.id, "cannot record the check as running: {e}"),
    }
}

/// After the run is recorded: tells the layer above (the check runs, the
/// member may be sent back).
pub fn committed(d: &Arc<Runner>, run: &Run, spec: &Spec, status: RunStatus) {
    if let Some(after) = d.after_work.get() {
        after.committed(&run.thread, &run.member, status, spec.agent.path.clone());
    }
}
