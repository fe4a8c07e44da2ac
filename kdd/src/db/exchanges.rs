//! The exchange journal (issue 24): every exchange — a King message's
//! rounds, a hand-off, a completion, a member's work, a review, a retry —
//! with its plan, and its steps, each keyed so that it exists once
//! (exchange, round, member, purpose, cause) and moved only forward by a
//! compare-and-set in the writer: pending → running (with its run) → done
//! (with its message), failed or cancelled; an interrupted run puts its
//! step back to pending with the message the next answer replaces. A
//! driver replays its plan over these rows, so a daemon started again does
//! what is left and nothing twice. The operations are named for what kdd
//! needs; another engine implements the same list.
//!
//! This is the journal's vocabulary, and what an exchange's life records
//! whichever engine keeps it; the drivers, resume at start and the
//! clients' reconnection build on it (see the design).

use serde_json::{Value, json};

use super::events::Record;
use super::row::Columns;

pub type ExchangeId = i64;
pub type StepId = i64;

/// What began an exchange, where it and its steps stand, what a step is
/// for: the wire's names, which the registry stores.
pub use kd_proto::types::{ExchangeKind as Kind, ExchangeState, StepPurpose as Purpose, StepState};

/// What makes a step itself: one per exchange, round, member, purpose and
/// cause (the message handed off, for a hand-off; else 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepKey {
    pub round: u32,
    /// '' for kd's own steps (a tally, a merge).
    pub member: String,
    pub purpose: Purpose,
    pub cause: u64,
}

impl StepKey {
    /// `member`'s answer in `round`.
    pub fn answer(round: u32, member: &str) -> StepKey {
        StepKey { round, member: member.to_string(), purpose: Purpose::Answer, cause: 0 }
    }
}

/// An exchange to begin.
#[derive(Debug, Clone)]
pub struct NewExchange {
    pub thread: String,
    pub seq: u64,
    pub kind: Kind,
    pub correlation_id: Option<String>,
    pub plan: Value,
    /// The steps known at the start (pending).
    pub first_steps: Vec<StepKey>,
    /// The asking client's `PATH`, which its agents are found on and run
    /// with (none: the daemon's own). Kept, never logged.
    pub path: Option<String>,
}

impl NewExchange {
    /// Whether beginning it stops the thread's open exchange of a King's
    /// message ([`SUPERSEDED`]): a King's message does, unless its plan
    /// says it goes beside (`"beside": true`: kd sending a member back to
    /// fix its work while the vote over the task waits for it).
    pub fn supersedes(&self) -> bool {
        matches!(self.kind, Kind::Council | Kind::Work)
            && !self.plan.get("beside").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// An exchange as the journal holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    pub id: ExchangeId,
    pub thread: String,
    pub seq: u64,
    pub kind: Kind,
    pub correlation_id: Option<String>,
    pub plan: Value,
    pub state: ExchangeState,
    pub reason: Option<String>,
    pub plan_done: bool,
    pub result: Option<Value>,
    pub resumes: u32,
    pub created_at_ms: i64,
    /// The `PATH` its agents are found on and run with ([`NewExchange::path`]).
    pub path: Option<String>,
}

/// A step as the journal holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: StepId,
    pub exchange: ExchangeId,
    pub key: StepKey,
    pub state: StepState,
    pub run_id: Option<String>,
    pub reply_to: Option<u64>,
    pub backend_session: Option<String>,
    pub replaces_seq: Option<u64>,
    pub message_seq: Option<u64>,
    pub attempts: u32,
    pub reason: Option<String>,
}

/// A step asked for: the step, or the end of its exchange (no longer open:
/// its driver stops).
#[derive(Debug, Clone, PartialEq)]
pub enum Opened {
    Step(Step),
    Ended(ExchangeState),
}

/// How a step's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// Answered: message `seq`.
    Done { seq: u64 },
    /// Failed or timed out: its error message `seq`, and why.
    Failed { seq: u64, reason: String },
    /// Cancelled by the King.
    Cancelled { reason: String },
    /// The daemon stopped or died while it ran: message `seq` holds what it
    /// had said, which the next answer replaces, in `backend_session` (the
    /// backend's own session it ran in, when known) if the step has none
    /// yet — a run saves it only every second while it streams.
    Interrupted { seq: u64, backend_session: Option<String> },
}

/// What the step of a run becomes as the run ends ([`RunEnd::step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepEnd<'a> {
    pub state: &'static str,
    /// Its message.
    pub seq: Option<u64>,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// The message the next answer replaces.
    pub replaces: Option<u64>,
    /// The backend session the next answer resumes, kept where the step
    /// has none.
    pub backend_session: Option<&'a str>,
}

impl RunEnd {
    /// What the step of a run that ended so becomes. An interrupted run's
    /// step is pending again while its exchange is `open`, else cancelled.
    pub(crate) fn step(&self, open: bool) -> StepEnd<'_> {
        let end = |state, seq, reason| StepEnd { state, seq, reason, replaces: None, backend_session: None };
        match self {
            RunEnd::Done { seq } => end("done", Some(*seq), None),
            RunEnd::Failed { seq, reason } => end("failed", Some(*seq), Some(reason.clone())),
            RunEnd::Cancelled { reason } => end("cancelled", None, Some(reason.clone())),
            RunEnd::Interrupted { seq, backend_session } if open => StepEnd {
                replaces: Some(*seq),
                backend_session: backend_session.as_deref(),
                ..end("pending", None, None)
            },
            RunEnd::Interrupted { .. } => end("cancelled", None, Some("the exchange was stopped".into())),
        }
    }
}

/// Takes a pending step for run `run`, at `reply_to` (kept from its first
/// start): false when it was not pending — another run holds it or it is
/// over — and then the run must not start.
/// Why an exchange a new message of the King began stopped. Its
/// question's first answers were asked all the same: a run launched for one
/// before the new message came still takes its step (none is lost).
pub const SUPERSEDED: &str = "superseded by a new message of the King";

pub(crate) mod info;
pub mod kd_step;

impl Exchange {
    /// What a change of the exchange's life (`exchange.stop`, `.cut`,
    /// `.resume`) records, with its `detail`.
    pub(crate) fn told(&self, kind: &str, detail: Value) -> Record {
        Record {
            kind: kind.into(),
            thread: Some(self.thread.clone()),
            correlation_id: Some(format!("x-{}", self.seq)),
            data: json!({"exchange": self.seq, "kind": self.kind.as_str(), "detail": detail}),
            ..Default::default()
        }
    }

    /// What stopping it for good for `reason` records.
    pub(crate) fn stopped(&self, reason: &str) -> Record {
        self.told("exchange.stop", json!({"reason": reason}))
    }

    /// What a graceful stop cutting it, with its `steps`, records: the
    /// steps left for the next start.
    pub(crate) fn cut(&self, steps: Vec<Step>) -> Record {
        let left: Vec<_> = steps
            .into_iter()
            .filter(|s| !s.state.is_over())
            .map(|s| {
                json!({"round": s.key.round, "member": s.key.member, "purpose": s.key.purpose.as_str(),
                       "state": s.state.as_str(), "run": s.run_id})
            })
            .collect();
        self.told("exchange.cut", json!({"steps": left}))
    }

    /// What a starting daemon taking it up again, with its `steps`,
    /// records.
    pub(crate) fn resumed(&self, steps: &[Step]) -> Record {
        let pending = steps.iter().filter(|s| !s.state.is_over()).count();
        self.told("exchange.resume", json!({"pending": pending, "resumes": self.resumes + 1}))
    }
}

/// Exchange `x` is not in the journal.
pub(crate) fn no_exchange(x: ExchangeId) -> crate::db::DbError {
    crate::db::DbError::NotFound(format!("no exchange {x}"))
}

/// The columns both engines select an exchange by, in [`read_exchange`]'s order.
pub(crate) const EXCHANGE: &str =
    "id, thread_id, seq, kind, correlation_id, plan, state, reason, plan_done, result, resumes, created_at, path";

/// The columns both engines select a step by, in [`read_step`]'s order.
pub(crate) const STEP: &str = "id, exchange_id, round, member, purpose, cause, state, run_id, reply_to, \
                               backend_session, replaces_seq, message_seq, attempts, reason";

/// An exchange as both engines select it ([`EXCHANGE`]).
pub(crate) fn read_exchange<R: Columns>(r: &R) -> Result<Exchange, R::Error> {
    Ok(Exchange {
        id: r.int(0)?,
        thread: r.text(1)?,
        seq: r.count(2)?,
        kind: r.named(3, "exchange kind", Kind::parse)?,
        correlation_id: r.opt_text(4)?,
        plan: r.json(5, "plan")?,
        state: r.named(6, "exchange state", ExchangeState::parse)?,
        reason: r.opt_text(7)?,
        plan_done: r.int(8)? != 0,
        result: r.opt_text(9)?.and_then(|t| serde_json::from_str(&t).ok()),
        resumes: r.int(10)? as u32,
        created_at_ms: r.int(11)?,
        path: r.opt_text(12)?,
    })
}

/// A step as both engines select it: id, exchange, round, member,
/// purpose, cause, state, run_id, reply_to, backend_session, replaces_seq,
/// message_seq, attempts, reason.
pub(crate) fn read_step<R: Columns>(r: &R) -> Result<Step, R::Error> {
    Ok(Step {
        id: r.int(0)?,
        exchange: r.int(1)?,
        key: StepKey {
            round: r.int(2)? as u32,
            member: r.text(3)?,
            purpose: r.named(4, "step purpose", Purpose::parse)?,
            cause: r.count(5)?,
        },
        state: r.named(6, "step state", StepState::parse)?,
        run_id: r.opt_text(7)?,
        reply_to: r.opt_count(8)?,
        backend_session: r.opt_text(9)?,
        replaces_seq: r.opt_count(10)?,
        message_seq: r.opt_count(11)?,
        attempts: r.int(12)? as u32,
        reason: r.opt_text(13)?,
    })
}
