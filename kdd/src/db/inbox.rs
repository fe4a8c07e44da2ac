//! Members' inboxes (F-X3): a routed message kept for a member — queued,
//! copied, or waiting for the run that answers it — until it is given in
//! the member's next prompt or the member processes it; the participants
//! of each thread; and the delivery modes members chose with
//! `queue.subscribe`. Every change is recorded in the event log.

use kd_proto::types::{DeliveryMode, InboxStatus, Overflow, Role, RouteType};
use serde_json::{Value, json};

use super::events::{NewEvent, Record};
use super::row::Columns;

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

/// What keeping an entry did.
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

impl Entry {
    /// What the refusal of this entry by its full inbox (`size` pending)
    /// records.
    pub(crate) fn rejected(&self, size: u32) -> NewEvent<'_> {
        self.event("queue.rejected", json!({"seq": self.seq, "queue_size": size, "limit": self.limit}))
    }

    /// What dropping the inbox's `oldest` entry to make room for this one
    /// records.
    pub(crate) fn dropped_for(&self, oldest: i64) -> NewEvent<'_> {
        self.event("queue.dropped", json!({"inbox": oldest, "for_seq": self.seq, "limit": self.limit}))
    }

    fn event(&self, kind: &'static str, data: Value) -> NewEvent<'_> {
        NewEvent {
            kind,
            thread: Some(&self.thread),
            agent: Some(&self.member),
            from: Some(&self.from),
            to: std::slice::from_ref(&self.member),
            correlation_id: Some(&self.correlation_id),
            data,
            ..Default::default()
        }
    }
}

/// What giving `member` its entries `seqs` of `thread` in run `run`'s
/// prompt records.
pub(crate) fn prompted(thread: &str, member: &str, run: &str, seqs: &[u64]) -> Record {
    Record {
        kind: "delivery.prompt".into(),
        thread: Some(thread.into()),
        agent: Some(member.into()),
        from: None,
        to: vec![member.to_string()],
        correlation_id: Some(run.into()),
        data: json!({"seqs": seqs, "run": run}),
    }
}

/// What reading entries `ids` (`status`) of `q`'s inbox records.
pub(crate) fn was_read<'a>(q: &'a Query, status: InboxStatus, ids: &[u64]) -> NewEvent<'a> {
    NewEvent {
        kind: "queue.read",
        thread: q.thread.as_deref(),
        agent: Some(&q.member),
        data: json!({"ids": ids, "status": status, "types": q.types, "mark_read": q.mark_read}),
        ..Default::default()
    }
}

/// What `member` setting its entries `ids` to `status` (`updated` of
/// them) records.
pub(crate) fn processed<'a>(member: &'a str, ids: &[u64], status: InboxStatus, updated: u32) -> NewEvent<'a> {
    NewEvent {
        kind: "queue.process",
        agent: Some(member),
        data: json!({"ids": ids, "status": status, "updated": updated}),
        ..Default::default()
    }
}

/// What `member` choosing `mode` for `types` in `workspace` records.
pub(crate) fn subscribed<'a>(
    workspace: &str,
    member: &'a str,
    types: &[RouteType],
    mode: DeliveryMode,
) -> NewEvent<'a> {
    NewEvent {
        kind: "queue.subscribe",
        agent: Some(member),
        data: json!({"workspace": workspace, "types": types, "mode": mode}),
        ..Default::default()
    }
}

/// An entry's role from its column.
pub(crate) fn role_of(text: &str) -> Role {
    if text == "cc" { Role::Cc } else { Role::To }
}

/// A delivery mode from its column.
pub(crate) fn mode_of(text: &str) -> DeliveryMode {
    if text == "queued" { DeliveryMode::Queued } else { DeliveryMode::Immediate }
}

/// An inbox entry as both engines select it: id, member, thread, seq,
/// from, route type, role, status, queued_at, read_at, body.
pub(crate) fn read<R: Columns>(r: &R) -> Result<kd_proto::types::InboxItem, R::Error> {
    Ok(kd_proto::types::InboxItem {
        id: r.count(0)?,
        member: r.text(1)?,
        thread: r.text(2)?,
        seq: r.count(3)?,
        from: r.text(4)?,
        route_type: RouteType::parse(&r.text(5)?).unwrap_or(RouteType::PointToPoint),
        role: role_of(&r.text(6)?),
        status: InboxStatus::parse(&r.text(7)?).unwrap_or(InboxStatus::Pending),
        queued_at_ms: r.int(8)?,
        read_at_ms: r.opt_int(9)?,
        body: r.text(10)?,
    })
}
