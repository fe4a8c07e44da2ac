//! The event log (F-R6): every session change, message, routing decision,
//! run transition and lock change, written in the same transaction as the
//! change it records.

use kd_proto::types::Event;
use serde_json::Value;

use super::row::Columns;

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

/// An event as both engines select it: id, at, kind, thread, session,
/// agent, from, to, correlation_id, data, and the body of the message it
/// refers to (joined back into its data).
pub(crate) fn read<R: Columns>(r: &R) -> Result<Event, R::Error> {
    let mut data: Value = serde_json::from_str(&r.text(9)?).unwrap_or(Value::Null);
    if let (Some(body), Some(fields)) = (r.opt_text(10)?, data.as_object_mut()) {
        fields.insert("body".into(), Value::String(body));
    }
    Ok(Event {
        id: r.count(0)?,
        at_ms: r.int(1)?,
        kind: r.text(2)?,
        thread: r.opt_text(3)?,
        session: r.opt_text(4)?,
        agent: r.opt_text(5)?,
        from: r.opt_text(6)?,
        to: super::parse_list(&r.text(7)?),
        correlation_id: r.opt_text(8)?,
        data,
    })
}
