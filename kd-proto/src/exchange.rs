//! The daemon's view of an exchange's journal (issue 24): what a King
//! message, a hand-off, a completion or a member's work began, where it
//! stands, and each of its steps — answered by `exchange.get`
//! (`ExchangeApiServer`, `ExchangeApiClient`), so a client that reconnected
//! after a restart knows whether the exchange it waited on is still going.
//! Re-exported by [`crate::types`].

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::coord::Completion;
use crate::error::RpcResult;

/// What began an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeKind {
    /// A King message and its rounds.
    Council,
    /// A hand-off between members.
    Route,
    /// A `completion.agents`.
    Completion,
    /// A member's work (`kd work`).
    Work,
    /// The vote on members' work.
    Review,
    /// A retry of failed members.
    Retry,
}

/// Where an exchange stands: open (kdd goes on with it, after a restart
/// too), done, or stopped for good (cancelled, superseded, stopped with
/// `--no-resume`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeState {
    Open,
    Done,
    Stopped,
}

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Pending,
    Running,
    Done,
    Failed,
    Cancelled,
}

/// What a step is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepPurpose {
    Answer,
    Handoff,
    Ballot,
    Tally,
    Merge,
    Synthesis,
    Verdicts,
}

macro_rules! names {
    ($t:ident { $($v:ident = $s:literal),* $(,)? }) => {
        impl $t {
            /// Its name, as on the wire and in the registry.
            pub fn as_str(self) -> &'static str {
                match self { $($t::$v => $s),* }
            }

            /// The value `as_str` names.
            pub fn parse(s: &str) -> Option<$t> {
                match s {
                    $($s => Some($t::$v),)*
                    _ => None,
                }
            }
        }
    };
}
names!(ExchangeKind { Council = "council", Route = "route", Completion = "completion", Work = "work", Review = "review", Retry = "retry" });
names!(ExchangeState { Open = "open", Done = "done", Stopped = "stopped" });
names!(StepState { Pending = "pending", Running = "running", Done = "done", Failed = "failed", Cancelled = "cancelled" });
names!(StepPurpose {
    Answer = "answer",
    Handoff = "handoff",
    Ballot = "ballot",
    Tally = "tally",
    Merge = "merge",
    Synthesis = "synthesis",
    Verdicts = "verdicts",
});

impl StepState {
    /// Done, failed or cancelled: nothing more happens to it.
    pub fn is_over(self) -> bool {
        matches!(self, StepState::Done | StepState::Failed | StepState::Cancelled)
    }
}

/// One step of an exchange: a member's answer in a round, a ballot, kd's
/// own tally or merge, ….
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepInfo {
    pub round: u32,
    /// Empty for kd's own steps (a tally, a merge).
    pub member: String,
    pub purpose: StepPurpose,
    pub state: StepState,
    /// The run that holds or held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Its message once done (or failed with an error message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_seq: Option<u64>,
    /// How many runs took it (more than one: asked again after a restart).
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Answer to `exchange.get`: an exchange as the journal holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExchangeInfo {
    pub thread: String,
    /// The message that began it.
    pub seq: u64,
    pub kind: ExchangeKind,
    pub state: ExchangeState,
    /// Why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The rounds planned, when it has rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    /// Its steps, in the order they were made.
    pub steps: Vec<StepInfo>,
    /// What a completion came to, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Completion>,
}

#[rpc(server, client)]
pub trait ExchangeApi {
    /// The daemon's view of the exchange begun by message `seq` of `thread`.
    #[method(name = "exchange.get", param_kind = map)]
    async fn exchange_get(&self, thread: String, seq: u64) -> RpcResult<ExchangeInfo>;
}
