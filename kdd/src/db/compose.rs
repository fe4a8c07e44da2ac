//! Writes that make a thread and its messages together, in one transaction
//! (above [`super::threads`] and [`super::messages`]): an import, and a new
//! thread created with its first message (so a refused first message leaves
//! no empty thread); and a routed message with its inbox entries, above
//! [`super::inbox`] and [`super::acks`].

use kd_proto::types::{Message, RouteType, Thread};

use super::exchanges::{Exchange, Step};
use super::inbox;
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
