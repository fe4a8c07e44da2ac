//! The event log (F-R6): every session change, message, routing decision,
//! run transition and lock change, written in the same transaction as the
//! change it records.

use serde_json::Value;

/// An event to record. Unset fields are stored as NULL.
#[derive(Debug, Default)]
pub struct NewEvent<'a> {
    pub kind: &'a str,
    pub thread: Option<&'a str>,
    pub session: Option<&'a str>,
    pub agent: Option<&'a str>,
    pub from: Option<&'a str>,
    pub to: &'a [String],
    pub correlation_id: Option<&'a str>,
    pub data: Value,
}

/// Filter of [`list`].
#[derive(Debug, Default, Clone)]
pub struct EventFilter {
    pub thread: Option<String>,
    /// Events whose agent, sender or recipients include this name.
    pub agent: Option<String>,
    pub kind: Option<String>,
    /// The first events after it; without it, the newest.
    pub since_id: Option<u64>,
    pub before_id: Option<u64>,
    pub limit: u32,
}

/// An event to record on its own, owning its fields (see [`NewEvent`]).
#[derive(Debug, Default, Clone)]
pub struct Record {
    pub kind: String,
    pub thread: Option<String>,
    pub agent: Option<String>,
    pub from: Option<String>,
    pub to: Vec<String>,
    pub correlation_id: Option<String>,
    pub data: Value,
}

impl Record {
    /// The event to record (no session: a record names none).
    pub(crate) fn event(&self) -> NewEvent<'_> {
        NewEvent {
            kind: &self.kind,
            thread: self.thread.as_deref(),
            session: None,
            agent: self.agent.as_deref(),
            from: self.from.as_deref(),
            to: &self.to,
            correlation_id: self.correlation_id.as_deref(),
            data: self.data.clone(),
        }
    }
}
