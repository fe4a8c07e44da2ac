//! Writes that make a thread and its messages together, in one transaction
//! (above [`super::threads`] and [`super::messages`]): an import, and a new
//! thread created with its first message (so a refused first message leaves
//! no empty thread); and a routed message with its inbox entries, above
//! [`super::inbox`] and [`super::acks`].

use kd_proto::types::{Message, RouteType, Thread};

use serde_json::json;

use super::events::Record;
use super::exchanges::{Exchange, Step};
use super::inbox::{self, Entry, Kept};
use super::messages::NewMessage;

/// A question written with its journal (F-J1): the King's message (and
/// the thread it creates), its exchange and the exchange's first steps.
#[derive(Debug)]
pub struct Asked {
    pub thread: Option<Thread>,
    pub message: Message,
    pub exchange: Exchange,
    pub steps: Vec<Step>,
}

/// A routed message (F-X1): the message, who keeps it in their inbox and
/// how each is delivered, written with the routing decision's events in
/// one transaction.
#[derive(Debug, Clone)]
pub struct Routing {
    pub message: Carrier,
    pub route: RouteType,
    /// One per recipient, with its delivery (`immediate`, `queued`,
    /// `copied`, `emergency`); their `seq` is filled in here.
    pub entries: Vec<(inbox::Entry, &'static str)>,
    /// For an emergency broadcast: its id; every recipient owes an ack.
    pub emergency: Option<String>,
    pub correlation_id: String,
}

/// The message a routing carries: a new one, or one already stored (an
/// answer that hands off).
#[derive(Debug, Clone)]
pub enum Carrier {
    New(NewMessage),
    Stored(Message),
}

/// What [`route`] wrote.
#[derive(Debug, Clone)]
pub struct Routed {
    pub message: Message,
    /// Per entry of [`Routing::entries`], in order.
    pub kept: Vec<inbox::Kept>,
    pub participants: Vec<String>,
}

/// The routing decision's event: message `m` routed as `route`, its
/// participants now `participants`.
pub(crate) fn routed(route: RouteType, correlation_id: &str, m: &Message, participants: &[String]) -> Record {
    Record {
        kind: format!("routing.{}", route.as_str()),
        thread: Some(m.thread.clone()),
        agent: None,
        from: Some(m.from.clone()),
        to: m.to.clone(),
        correlation_id: Some(correlation_id.to_string()),
        data: json!({"seq": m.seq, "cc": m.cc, "reply_to": m.reply_to, "participants": participants}),
    }
}

/// What keeping `e` in its member's inbox (`how`: queued, delivered…)
/// records: the delivery, or its refusal by a full inbox.
pub(crate) fn delivered(e: &Entry, how: &str, kept: &Kept, correlation_id: &str, m: &Message) -> Record {
    let (kind, data) = match kept {
        Kept::Queued { id, size, dropped } => (
            format!("delivery.{how}"),
            json!({"seq": m.seq, "inbox": id, "queue_size": size, "dropped": dropped, "role": e.role}),
        ),
        Kept::Rejected { size } => {
            ("delivery.rejected".to_string(), json!({"seq": m.seq, "queue_size": size, "limit": e.limit}))
        }
    };
    Record {
        kind,
        thread: Some(m.thread.clone()),
        agent: Some(e.member.clone()),
        from: Some(m.from.clone()),
        to: vec![e.member.clone()],
        correlation_id: Some(correlation_id.to_string()),
        data,
    }
}

/// What an emergency `broadcast` (message `m`) records: the members who
/// owe its acknowledgement.
pub(crate) fn emergency(broadcast: &str, m: &Message, members: &[String]) -> Record {
    Record {
        kind: "system.emergency_broadcast".into(),
        thread: Some(m.thread.clone()),
        agent: None,
        from: Some(m.from.clone()),
        to: members.to_vec(),
        correlation_id: Some(broadcast.to_string()),
        data: json!({"broadcast": broadcast, "seq": m.seq}),
    }
}

/// The title an untitled imported thread takes: as a native thread, from
/// the King's first message.
pub(crate) fn import_title(messages: &[(i64, NewMessage)]) -> Option<String> {
    messages.iter().find(|(_, m)| m.kind == kd_proto::types::MessageKind::King).and_then(|(_, m)| m.title())
}

/// The messages of an import, moved to the thread they are imported as.
pub(crate) fn imported_into(thread: &str, messages: Vec<(i64, NewMessage)>) -> Vec<(i64, NewMessage)> {
    messages
        .into_iter()
        .map(|(at, mut m)| {
            m.thread = thread.to_string();
            (at, m)
        })
        .collect()
}
