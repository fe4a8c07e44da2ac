//! Members' inboxes (F-X3): a routed message kept for a member — queued,
//! copied, or waiting for the run that answers it — until it is given in
//! the member's next prompt or the member processes it; the participants
//! of each thread; and the delivery modes members chose with
//! `queue.subscribe`. Every change is recorded in the event log.

use kd_proto::types::{InboxStatus, Overflow, Role, RouteType};

/// A message to keep in a member's inbox.
#[derive(Debug, Clone)]
pub struct Entry {
    pub thread: String,
    pub member: String,
    pub seq: u64,
    pub from: String,
    pub route: RouteType,
    pub role: Role,
    /// Pending entries the inbox may hold, and what happens past that.
    pub limit: u32,
    pub overflow: Overflow,
    pub correlation_id: String,
}

/// What [`keep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Kept as entry `id`; `dropped` was removed to make room.
    Queued { id: u64, size: u32, dropped: Option<u64> },
    /// The inbox is full and refuses new entries.
    Rejected { size: u32 },
}

pub(crate) fn role_str(r: Role) -> &'static str {
    match r {
        Role::To => "to",
        Role::Cc => "cc",
    }
}

/// What `queue.read` asks for.
#[derive(Debug, Clone)]
pub struct Query {
    pub member: String,
    pub thread: Option<String>,
    pub types: Vec<RouteType>,
    /// Default: pending.
    pub status: Option<InboxStatus>,
    /// The entries already read too (a member's `unread: false`).
    pub also_read: bool,
    pub limit: u32,
    pub mark_read: bool,
}
