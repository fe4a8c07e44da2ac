//! `exchange.get`'s read of the journal: the exchange a message began,
//! with its steps, as the wire's [`ExchangeInfo`].

use kd_proto::types::{Completion, ExchangeInfo, StepInfo};

use super::{Exchange, Step};

pub(crate) fn wire(x: Exchange, steps: Vec<Step>) -> ExchangeInfo {
    ExchangeInfo {
        rounds: x.plan.get("rounds").and_then(|r| r.as_u64()).and_then(|r| u32::try_from(r).ok()),
        // A completion's result is its answer as it was sent; one that
        // no longer reads as one is left out rather than refused.
        result: x.result.and_then(|r| serde_json::from_value::<Completion>(r).ok()),
        thread: x.thread,
        seq: x.seq,
        kind: x.kind,
        state: x.state,
        reason: x.reason,
        steps: steps.into_iter().map(step).collect(),
    }
}

fn step(s: Step) -> StepInfo {
    StepInfo {
        round: s.key.round,
        member: s.key.member,
        purpose: s.key.purpose,
        state: s.state,
        run: s.run_id,
        message_seq: s.message_seq,
        attempts: s.attempts,
        reason: s.reason,
    }
}
