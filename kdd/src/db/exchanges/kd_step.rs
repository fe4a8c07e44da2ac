//! kd's own steps and a plan's choices (F-J1): a step kd takes itself — a
//! tally, a merge — is written with its message (and its events) in one
//! transaction, only if it was not done yet, so a replay never writes it
//! twice; a choice drawn once (a vote's labels) is fixed in the plan, the
//! first write winning, so a replay reads the same one. Also what a
//! completion's driver reads back: an exchange by its client's id, each
//! step with its message, and pending steps it will not take.

use kd_proto::types::Message;

use super::ExchangeState;
use crate::db::events::Record;

/// What came of a kd step.
#[derive(Debug, Clone, PartialEq)]
pub enum KdStep {
    /// Written now, with its message.
    Written(Message),
    /// Written before (a replay): its message as stored.
    Already(Message),
    /// The exchange is no longer open: nothing was written.
    Ended(ExchangeState),
}

/// The events a kd step records with its message, made from it.
pub type EventsOf = Box<dyn FnOnce(&Message) -> Vec<Record> + Send>;
