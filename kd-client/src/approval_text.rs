//! How an approval (issue 33) reads in a terminal, shared by `kd approvals`
//! and `kd chat`: what the member asks (`execute: touch x`) and how it was
//! decided (`approved by king`). What an agent wrote is escaped.

use kd_client::terminal::safe;
use kd_proto::approval::Approval;

/// What is asked: the tool's kind, then its command (or its title when it
/// runs none), escaped: `execute: touch x`.
pub fn what(a: &Approval) -> String {
    let what = a.tool.command.as_deref().unwrap_or(&a.tool.title);
    format!("{}: {}", a.tool.kind.as_str(), safe(what))
}

/// How a decided approval ended, `denied by king` (`cancelled` when nobody
/// decided); None while it is pending.
pub fn decided(a: &Approval) -> Option<String> {
    match (a.state.is_pending(), a.decided_by) {
        (true, _) => None,
        (false, Some(by)) => Some(format!("{} by {}", a.state.as_str(), by.as_str())),
        (false, None) => Some(a.state.as_str().to_string()),
    }
}
