//! kd's own steps and a plan's choices (F-J1): a step kd takes itself — a
//! tally, a merge — is written with its message (and its events) in one
//! transaction, only if it was not done yet, so a replay never writes it
//! twice; a choice drawn once (a vote's labels) is fixed in the plan, the
//! first write winning, so a replay reads the same one. Also what a
//! completion's driver reads back: an exchange by its client's id, each
//! step with its message, and pending steps it will not take.

use kd_proto::types::Message;
use serde_json::Value;

use super::{ExchangeId, ExchangeState};
use crate::db::events::Record;
use crate::db::{DbError, DbResult};

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

/// What fixing a choice of an exchange's plan does.
pub(crate) enum Fix {
    /// It was fixed before (null is not fixed): this choice stands.
    Fixed(Value),
    /// The plan to write, with the choice.
    Write(String),
}

/// Fixing choice `name` of exchange `x`'s `plan` to `value`.
pub(crate) fn fixing(x: ExchangeId, mut plan: Value, name: &str, value: &Value) -> DbResult<Fix> {
    if let Some(fixed) = plan.get(name).filter(|v| !v.is_null()) {
        return Ok(Fix::Fixed(fixed.clone()));
    }
    let Some(map) = plan.as_object_mut() else {
        return Err(DbError::Invalid(format!("exchange {x}'s plan is not an object")));
    };
    map.insert(name.to_string(), value.clone());
    serde_json::to_string(&plan).map(Fix::Write).map_err(|e| DbError::Invalid(format!("an exchange's plan: {e}")))
}
