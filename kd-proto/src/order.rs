//! The one order a thread is shown in — by `kd show`, `kd export`, the
//! chat (live and reopened) and the history agents are given.
//!
//! **An answer's place is fixed when its run starts**: right after the
//! message it answers (`reply_to`), among the answers to that message in the
//! order their runs started ([`RunInfo::ordinal`]) — not where it happened
//! to finish. Every other message stands at its `seq`. A retry takes the
//! place of the failure it replaces. So a parallel round shows its members
//! in the order they were asked, however fast each was, and a panel that
//! grew while streaming never jumps when the thread is reopened.

use std::collections::HashMap;

use crate::message::Message;
use crate::registry::RunInfo;

/// Where something stands in a thread; smaller comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    /// The seq it stands after (its own seq for a message that is not an answer).
    pub anchor: u64,
    /// 0: the anchor message itself; 1: an answer to it; 2: an answer whose
    /// run has not started yet (a client's placeholder).
    pub class: u8,
    /// The run's start order among answers to the anchor.
    pub ordinal: u64,
    /// Last resort: the message's seq.
    pub seq: u64,
}

/// The place of a stored message.
pub fn message_place(m: &Message) -> Place {
    match (m.reply_to, m.run.as_ref().and_then(|r| r.ordinal)) {
        (Some(anchor), Some(ordinal)) if anchor < m.seq => Place { anchor, class: 1, ordinal, seq: m.seq },
        _ => Place { anchor: m.seq, class: 0, ordinal: 0, seq: m.seq },
    }
}

/// The place of a run's answer, known from the moment the run starts.
pub fn run_place(r: &RunInfo) -> Place {
    match r.reply_to {
        Some(anchor) => Place { anchor, class: 1, ordinal: r.ordinal, seq: u64::MAX },
        None => Place { anchor: u64::MAX, class: 1, ordinal: r.ordinal, seq: u64::MAX },
    }
}

/// Messages in the order they are shown (see the module docs). A retry's
/// answer takes the place of the failed message it replaces, following a
/// chain of retries to its last link.
pub fn display_order(messages: &[Message]) -> Vec<&Message> {
    let by_seq: HashMap<u64, &Message> = messages.iter().map(|m| (m.seq, m)).collect();
    let mut replaced_by = HashMap::new();
    for m in messages {
        if let Some(r) = m.replaces {
            replaced_by.insert(r, m.seq);
        }
    }
    let mut out: Vec<(Place, &Message)> = Vec::with_capacity(messages.len());
    for m in messages {
        if m.replaces.is_some_and(|r| by_seq.contains_key(&r)) {
            continue;
        }
        let mut cur = m;
        let mut hops = 0;
        while let Some(next) = replaced_by.get(&cur.seq).and_then(|s| by_seq.get(s)) {
            cur = next;
            hops += 1;
            if hops > messages.len() {
                break;
            }
        }
        out.push((message_place(m), cur));
    }
    out.sort_by_key(|(place, _)| *place);
    out.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{MessageKind, RunMeta};

    fn msg(seq: u64, from: &str, reply_to: Option<u64>, ordinal: Option<u64>) -> Message {
        let run = ordinal.map(|o| RunMeta { ordinal: Some(o), ..RunMeta::default() });
        Message { reply_to, run, ..Message::new("t", seq, from, "") }
    }

    fn order(messages: &[Message]) -> Vec<u64> {
        display_order(messages).iter().map(|m| m.seq).collect()
    }

    #[test]
    fn answers_stand_in_the_order_their_runs_started_not_finished() {
        // claude (ordinal 1) was asked first but finished last.
        let round = [msg(1, "king", None, None), msg(2, "codex", Some(1), Some(2)), msg(3, "claude", Some(1), Some(1))];
        assert_eq!(order(&round), [1, 3, 2]);
    }

    #[test]
    fn a_message_sent_while_answers_stream_comes_after_them() {
        // The King spoke again (seq 3) while claude still answered message 1.
        let t = [
            msg(1, "king", None, None),
            msg(2, "codex", Some(1), Some(2)),
            msg(3, "king", None, None),
            msg(4, "claude", Some(1), Some(1)),
        ];
        assert_eq!(order(&t), [1, 4, 2, 3]);
    }

    #[test]
    fn sequential_turns_and_plain_messages_keep_seq_order() {
        let t = [
            msg(1, "king", None, None),
            msg(2, "claude", Some(1), Some(1)),
            msg(3, "codex", Some(2), Some(2)),
            msg(4, "claude", Some(3), Some(3)),
            msg(5, "tool", None, None),
        ];
        assert_eq!(order(&t), [1, 2, 3, 4, 5]);
        // Messages from before ordinals were recorded keep their seq order.
        assert_eq!(
            order(&[msg(1, "king", None, None), msg(2, "b", Some(1), None), msg(3, "a", Some(1), None)]),
            [1, 2, 3]
        );
    }

    #[test]
    fn a_retry_takes_the_place_of_the_failure() {
        let mut failed = msg(2, "codex", Some(1), Some(1));
        failed.kind = MessageKind::Error;
        let mut retry = msg(4, "codex", Some(1), Some(9));
        retry.replaces = Some(2);
        let t = [msg(1, "king", None, None), failed, msg(3, "claude", Some(1), Some(2)), retry];
        assert_eq!(order(&t), [1, 4, 3]);
    }
}
