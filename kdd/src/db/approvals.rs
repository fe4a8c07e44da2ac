//! Approvals in the registry (issue 33): the vocabulary both engines
//! follow — what a decision changes, when it is refused, the events it
//! records and what subscribers hear. The SQL is each engine's
//! (`sqlite::approvals`, `pg::approvals`).

use kd_proto::approval::{Approval, ApprovalState, DecidedBy, Scope};
use kd_proto::types::ThreadEvent;
use serde_json::json;

use super::events::Record;
use super::{DbError, DbResult, Outbox};

/// Most rows one list returns.
pub const MAX_LIST: u32 = kd_proto::approval::LIST_PAGE;

/// A pending approval's end: decided (by the King, the policy or the
/// timeout) or cancelled.
#[derive(Debug, Clone, PartialEq)]
pub struct Decide {
    pub id: String,
    /// Approved, denied, expired or cancelled (never pending).
    pub state: ApprovalState,
    pub by: Option<DecidedBy>,
    /// What an approval covers.
    pub scope: Option<Scope>,
    pub message: Option<String>,
}

/// What deciding found.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// It was pending and is now decided as asked.
    Now(Approval),
    /// It was decided already (by someone else, or the timeout): as it is.
    Already(Approval),
}

impl Decided {
    pub fn approval(&self) -> &Approval {
        match self {
            Decided::Now(a) | Decided::Already(a) => a,
        }
    }
}

/// The approval `a` (pending) once `d` is applied at `now`; refused when
/// `d` would leave it pending or grants a scope the CLI cannot honour.
pub fn apply(a: &Approval, d: &Decide, now: i64) -> DbResult<Approval> {
    if d.state.is_pending() {
        return Err(DbError::Invalid("an approval is decided to approved, denied, expired or cancelled".into()));
    }
    if let Some(s) = d.scope.filter(|s| !a.scopes.contains(s)) {
        return Err(DbError::Invalid(format!(
            "approval {} cannot be granted for the {} (its CLI honours: {})",
            a.id,
            s.as_str(),
            a.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(Approval {
        state: d.state,
        decided_by: d.by,
        scope: if d.state == ApprovalState::Approved { Some(d.scope.unwrap_or(Scope::Once)) } else { None },
        message: d.message.clone(),
        decided_at_ms: Some(now),
        ..a.clone()
    })
}

/// The event log's record of an approval asked or decided.
pub fn record(a: &Approval) -> Record {
    let kind = if a.state.is_pending() { "approval.requested" } else { "approval.decided" };
    Record {
        kind: kind.into(),
        thread: Some(a.thread.clone()),
        agent: Some(a.member.clone()),
        from: None,
        to: Vec::new(),
        correlation_id: a.run.clone(),
        data: json!({
            "approval": a.id,
            "kind": a.tool.kind.as_str(),
            "title": a.tool.title,
            "state": a.state.as_str(),
            "decided_by": a.decided_by.map(|d| d.as_str()),
            "scope": a.scope.map(|s| s.as_str()),
        }),
    }
}

/// What the thread's subscribers hear of `a`, after the commit.
pub fn told(a: &Approval, out: &mut Outbox) {
    let approval = Box::new(a.clone());
    let event = if a.state.is_pending() {
        ThreadEvent::ApprovalRequested { approval }
    } else {
        ThreadEvent::ApprovalDecided { approval }
    };
    out.publish(&a.thread, event);
}

/// The JSON of the stored columns.
pub fn json_of<T: serde::Serialize>(v: &T) -> DbResult<String> {
    serde_json::to_string(v).map_err(|e| DbError::Invalid(format!("an approval's column: {e}")))
}

/// A stored JSON column read back.
pub fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_str(s).map_err(|e| format!("an approval's column: {e}"))
}

/// The message a pending approval's run is told when its node starts
/// again.
pub const CUT_BY_RESTART: &str = "kdd stopped while this approval was pending";
