//! What kd does once a member's work run is committed, above the agent
//! layer, installed on the runner as its one [`AfterWork`]: the check of
//! the new head runs, and may send the member back ([`super::check`]);
//! the comments whose lines the commit changed are resolved then, not when
//! someone next reads them ([`super::comments::refresh`]).

use std::sync::Arc;

use kd_proto::types::RunStatus;

use super::check::Checks;
use crate::agent::work::after::AfterWork;
use crate::council::Council;

/// The runner's [`AfterWork`]: the checks, then the comments.
pub struct AfterRun {
    checks: Arc<Checks>,
    council: std::sync::Weak<Council>,
}

/// Installs what follows each work run on `council`'s runner.
pub fn install(council: &Arc<Council>, checks: Arc<Checks>) {
    let after: Arc<dyn AfterWork> = Arc::new(AfterRun { checks, council: Arc::downgrade(council) });
    if council.agents.after_work.set(after).is_err() {
        tracing::error!("what follows work runs was installed twice");
    }
}

impl AfterWork for AfterRun {
    fn committed(&self, thread: &str, member: &str, status: RunStatus, path: Option<String>) {
        self.checks.committed(thread, member, status, path);
        let Some(council) = self.council.upgrade() else { return };
        let (thread, member) = (thread.to_string(), member.to_string());
        tokio::spawn(async move {
            if let Err(e) = super::comments::refresh(&council.agents.db, &thread, Some(&member)).await {
                tracing::warn!(thread, member, "cannot resolve the comments the work answered: {}", e.message());
            }
        });
    }
}
