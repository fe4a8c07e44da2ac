//! Approvals (issue 33) in the OpenRPC document: the King's inbox of the
//! permissions members' CLIs ask.

use super::Builder;
use crate::approval::{Approval, ApprovalEvent, Decision, Scope};
use crate::error::ErrorCode::*;

pub(super) fn methods(b: &mut Builder) {
    b.method::<Vec<Approval>>(
        "approval.list",
        "approvals",
        "The permissions members' CLIs asked, newest first: the pending ones (waiting for the King), or with all \
         every one (decided by the policy, the King or the timeout, or cancelled). Refused to an agent's processes.",
    );
    b.param::<bool>("all", false, "every state, not only the pending")
        .param::<String>("thread", false, "only this thread's")
        .param::<u32>("limit", false, "at most this many (default and most 500)")
        .errors(&[InvalidArgument, Forbidden]);
    b.method::<Approval>(
        "approval.decide",
        "approval",
        "The King's decision on a pending approval: approve (for scope once, run — the rest of the member's run — or \
         thread — this member on this thread —, one of the approval's scopes) or deny (the message goes to the \
         agent). The member's CLI is answered at once. Refused with conflict once it is decided, expired or \
         cancelled; refused to an agent's processes.",
    );
    b.param::<String>("id", true, "the approval (ap-…)")
        .param::<Decision>("decision", true, "approve or deny")
        .param::<Scope>("scope", false, "what an approval covers (default once)")
        .param::<String>("message", false, "a denial's message for the agent (at most 1200 characters)")
        .errors(&[InvalidArgument, NotFound, Conflict, Forbidden]);
    b.method::<ApprovalEvent>(
        "approval.subscribe",
        "event",
        "Every thread's approvals, live: first every pending one (requested), then each request and decision as it \
         happens; lagged when the subscriber fell behind (list them again). Notifications are approval.event; \
         cancel with approval.unsubscribe. Refused to an agent's processes.",
    );
    b.errors(&[Forbidden]);
    if let Some(m) = b.methods.last_mut() {
        m.subscription = Some(("approval.event", "approval.unsubscribe"));
    }
}
