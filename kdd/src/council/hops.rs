//! Hand-offs per exchange (F-X1): an answer's `@name` hand-offs and a
//! member's `send` during an exchange (`member.send`) count against one
//! limit, `council.max_hops`, so that two agents cannot ping-pong — through
//! their answers or through their tools. An exchange is named by the
//! message that started it (the King's, or the one a run answered when it
//! belongs to none): the runs a hand-off starts belong to the same one, so
//! a chain of sends stays one exchange. Past the limit nothing is
//! delivered; a `routing.hop_limit` event and a notice from kd to the King
//! say whose message was not.
//!
//! The counts are in memory, kept while the exchange is the thread's or a
//! run of it is in flight (a count no one can add to is forgotten).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use kd_proto::names::{KD, KING};
use kd_proto::types::MessageKind;
use serde_json::json;

use super::Council;
use crate::db::events::Record;
use crate::db::messages::NewMessage;

/// The hand-offs of each exchange, by thread and the seq that started it.
#[derive(Default)]
pub struct Hops {
    by_exchange: Mutex<HashMap<(String, u64), u32>>,
}

impl Hops {
    fn map(&self) -> MutexGuard<'_, HashMap<(String, u64), u32>> {
        self.by_exchange.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one more hand-off of `exchange` on `thread` when it has had
    /// fewer than `max`: `Ok(count)` after it, else `Err(count)` (the
    /// limit is reached and nothing is counted).
    fn take(&self, thread: &str, exchange: u64, max: u32) -> Result<u32, u32> {
        let mut map = self.map();
        let n = map.entry((thread.to_string(), exchange)).or_default();
        if *n >= max {
            return Err(*n);
        }
        *n += 1;
        Ok(*n)
    }

    /// Sets the hand-offs `exchange` of `thread` had made (a resumed
    /// exchange, from its journal), unless more are counted already.
    pub fn seed(&self, thread: &str, exchange: u64, made: u32) {
        let mut map = self.map();
        let n = map.entry((thread.to_string(), exchange)).or_default();
        *n = (*n).max(made);
    }

    /// Forgets the exchanges `live` says nothing can add to.
    fn retain(&self, live: impl Fn(&str, u64) -> bool) {
        self.map().retain(|(thread, exchange), _| live(thread, *exchange));
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A hand-off about to be delivered: who sends what to whom, in which
/// exchange.
pub struct HandOff<'a> {
    pub thread: &'a str,
    pub exchange: u64,
    pub from: &'a str,
    pub to: &'a [String],
    /// The answer handing off (none for a `send`, whose message is not
    /// written when it is refused).
    pub seq: Option<u64>,
    pub max: u32,
}

/// Counts `h` against its exchange's `council.max_hops`: true when it may
/// be delivered. When it may not, the refusal is recorded (a
/// `routing.hop_limit` event and kd's notice to the King) and false
/// returned.
pub async fn take(c: &Council, h: HandOff<'_>) -> bool {
    // Exchanges that are no longer the thread's and have no run in flight
    // can have no more hand-offs: their counts go.
    c.hops.retain(|thread, exchange| {
        c.exchanges.current(thread).is_some_and(|x| x.king == exchange)
            || c.agents.runs.list(Some(thread)).iter().any(|r| r.exchange == Some(exchange))
    });
    let hops = match c.hops.take(h.thread, h.exchange, h.max) {
        Ok(_) => return true,
        Err(n) => n,
    };
    let correlation_id = format!("x-{}", h.exchange);
    let mut data = json!({"hops": hops, "max_hops": h.max});
    if let Some(seq) = h.seq {
        data["seq"] = seq.into();
    } else {
        data["via"] = "send".into();
    }
    let event = Record {
        kind: "routing.hop_limit".into(),
        thread: Some(h.thread.to_string()),
        agent: Some(h.from.to_string()),
        from: Some(h.from.to_string()),
        to: h.to.to_vec(),
        correlation_id: Some(correlation_id.clone()),
        data,
    };
    if let Err(e) = c.agents.db.record(vec![event]).await {
        tracing::warn!(thread = h.thread, "cannot record the hop limit: {e}");
    }
    let what = if h.seq.is_some() { "hand-off" } else { "message" };
    let body = format!(
        "{}'s {what} to {} was not delivered: this exchange reached council.max_hops ({}).",
        h.from,
        h.to.join(", "),
        h.max
    );
    let notice = NewMessage {
        reply_to: h.seq,
        correlation_id: Some(correlation_id),
        ..NewMessage::new(h.thread, KD, vec![KING.to_string()], MessageKind::System, body)
    };
    if let Err(e) = c.agents.db.append_message(notice).await {
        tracing::warn!(thread = h.thread, "cannot write the hop limit notice: {e}");
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exchange_counts_up_to_its_limit_and_each_exchange_on_its_own() {
        let hops = Hops::default();
        assert_eq!(hops.take("t", 1, 2), Ok(1));
        assert_eq!(hops.take("t", 1, 2), Ok(2));
        assert_eq!(hops.take("t", 1, 2), Err(2), "the limit is reached");
        assert_eq!(hops.take("t", 1, 2), Err(2), "and nothing more is counted");
        assert_eq!(hops.take("t", 7, 2), Ok(1), "another exchange");
        assert_eq!(hops.take("u", 1, 2), Ok(1), "another thread");
        assert_eq!(hops.take("t", 9, 0), Err(0), "a limit of 0 lets nothing through");
        hops.retain(|t, x| t == "t" && x == 1);
        assert_eq!(hops.len(), 1);
        assert_eq!(hops.take("t", 7, 2), Ok(1), "a forgotten exchange starts again");
    }
}
