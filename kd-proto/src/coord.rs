//! Wire types of the coordination layer (SPEC §7): routed messages and
//! their deliveries, inboxes, multicast completions, emergency broadcasts
//! with their acknowledgements, and race checks on shared resources; the
//! methods (`CoordinationApiServer`, `CoordinationApiClient`):
//! `message.route`, `queue.*`, `completion.agents`, `emergency.*` and
//! `resource.*`.

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;
use crate::message::Message;
pub use crate::message::{Purpose, RouteType};

/// How a member takes messages addressed to it (F-X3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// A message starts a run now (or right after the run in flight).
    #[default]
    Immediate,
    /// A message waits in the inbox until the member's next turn or a fetch.
    Queued,
}

impl DeliveryMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::Immediate => "immediate",
            DeliveryMode::Queued => "queued",
        }
    }
}

/// What a full inbox does with one more message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// The oldest pending message is dropped to make room.
    #[default]
    DropOldest,
    /// The new message is refused for this member; the sender is told.
    RejectNew,
}

/// Whether a member is addressed (`to`) or copied (`cc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    To,
    Cc,
}

/// What became of a routed message for one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// A run was started to answer it.
    Started,
    /// The member is running on the thread: a run answering it starts when
    /// that one ends.
    AfterRun,
    /// Kept in the member's inbox.
    Queued,
    /// Refused: the member's inbox is full and its overflow is `reject_new`.
    Rejected,
    /// Copied: in the member's inbox and next prompt, without a run.
    Copied,
}

/// One member's delivery of a routed message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Delivery {
    pub member: String,
    pub role: Role,
    pub mode: DeliveryMode,
    pub status: DeliveryStatus,
    /// The run answering it (started or to start after the run in flight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The inbox entry holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox: Option<u64>,
    /// Pending entries in the member's inbox after this delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_size: Option<u32>,
    /// The inbox entry dropped to make room (`drop_oldest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Answer to `message.route`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Routed {
    /// The message as stored in the thread.
    pub message: Message,
    #[serde(rename = "type")]
    pub route_type: RouteType,
    pub deliveries: Vec<Delivery>,
    /// Everyone who has sent or received a routed message in the thread.
    pub participants: Vec<String>,
    /// Names every event of this routing decision.
    pub correlation_id: String,
}

/// Where an inbox entry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InboxStatus {
    Pending,
    Read,
    /// Given to the member in a prompt, or marked processed by it.
    Processed,
    Dismissed,
    Deferred,
    /// Dropped by `drop_oldest` when the inbox was full.
    Dropped,
}

impl InboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InboxStatus::Pending => "pending",
            InboxStatus::Read => "read",
            InboxStatus::Processed => "processed",
            InboxStatus::Dismissed => "dismissed",
            InboxStatus::Deferred => "deferred",
            InboxStatus::Dropped => "dropped",
        }
    }

    pub fn parse(s: &str) -> Option<InboxStatus> {
        [
            InboxStatus::Pending,
            InboxStatus::Read,
            InboxStatus::Processed,
            InboxStatus::Dismissed,
            InboxStatus::Deferred,
            InboxStatus::Dropped,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

/// One message in a member's inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InboxItem {
    pub id: u64,
    pub member: String,
    pub thread: String,
    /// The message in the thread.
    pub seq: u64,
    pub from: String,
    #[serde(rename = "type")]
    pub route_type: RouteType,
    pub role: Role,
    pub status: InboxStatus,
    pub queued_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at_ms: Option<i64>,
    pub body: String,
}

/// Answer to `queue.process`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Processed {
    pub updated: u32,
    pub status: InboxStatus,
}

/// A member's delivery preferences in effect (`queue.subscribe`'s answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryPrefs {
    pub member: String,
    pub mode: DeliveryMode,
    /// Types delivered immediately whatever the mode.
    pub immediate_types: Vec<RouteType>,
    /// Types queued whatever the mode.
    pub queued_types: Vec<RouteType>,
    pub queue_limit: u32,
    pub overflow: Overflow,
}

/// How `completion.agents` waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// Every member, up to the timeout (late ones are reported `timeout`).
    #[default]
    All,
    /// The first good answer; the other runs are cancelled.
    First,
}

/// How the answers of `completion.agents` are combined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Every answer as it is.
    #[default]
    None,
    /// One message: the answers concatenated, each under its member's name.
    Merge,
    /// Each member ranks the others' anonymised answers; tally and winner.
    Vote,
    /// A chair writes one final answer from all answers (and the rankings).
    Synthesize,
}

/// How one member's part of a completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PartStatus {
    Done,
    Error,
    /// Not finished within the completion's timeout (its run was cancelled).
    Timeout,
    /// Cancelled because another member answered first.
    Cancelled,
}

/// One member's answer in a completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Part {
    pub member: String,
    pub status: PartStatus,
    /// The message holding its answer (or why it failed).
    pub seq: Option<u64>,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// A member's ranking in a vote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ballot {
    pub voter: String,
    /// Labels best first, as the voter wrote them.
    pub ranking: Vec<String>,
    /// The message holding the voter's evaluation.
    pub seq: Option<u64>,
}

/// A member's score in a vote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Score {
    pub member: String,
    pub label: String,
    /// Borda points: n-1 for a first place among n answers, down to 0.
    pub points: u32,
    /// First places.
    pub firsts: u32,
}

/// The anonymised label an answer was shown under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Label {
    /// `Response A`, `Response B`, …
    pub label: String,
    pub member: String,
}

/// The outcome of a vote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tally {
    pub labels: Vec<Label>,
    pub ballots: Vec<Ballot>,
    /// Best first.
    pub scores: Vec<Score>,
    /// The member with most points; on a tie, the one [`Tally::tie`] says
    /// broke it, or none when the tie is left to the King.
    pub winner: Option<String>,
    /// The message holding the tally, as shown in the thread.
    pub seq: Option<u64>,
    /// When two or more members share the most points: who, and how it was
    /// settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie: Option<Tie>,
}

/// A tie at the top of a vote: the members sharing the most points, and
/// what settled it — more first places, then the chair's ballot, else
/// nothing (left to the King, no winner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tie {
    /// The members sharing the most points, in score order.
    pub members: Vec<String>,
    pub broken_by: TieBreak,
    /// The chair whose ballot broke it (`broken_by: chair`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chair: Option<String>,
}

/// What settled a tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TieBreak {
    /// One of the tied members has more first places.
    FirstPlaces,
    /// Still tied on first places: the chair's ballot ranks one of them
    /// above the others.
    Chair,
    /// Nothing settled it: no winner, the King decides.
    King,
}

impl Tally {
    /// The tally's one-line verdict, as the thread, `kd ask` and the chat
    /// say it: `codex wins.`, `tie between … : left to the King.`, …
    pub fn verdict(&self) -> String {
        let Some(tie) = &self.tie else {
            return match &self.winner {
                Some(w) => format!("{w} wins."),
                None => "no ranking could be read.".to_string(),
            };
        };
        let score = |m: &str| self.scores.iter().find(|s| s.member == m);
        let points = tie.members.first().and_then(|m| score(m)).map(|s| s.points).unwrap_or(0);
        let firsts = |m: &str| score(m).map(|s| s.firsts).unwrap_or(0);
        let top_firsts = tie.members.iter().map(|m| firsts(m)).max().unwrap_or(0);
        let still: Vec<&String> = tie.members.iter().filter(|m| firsts(m) == top_firsts).collect();
        let mut out = format!("tie between {} on {}", and_list(&tie.members), plural(points, "point"));
        if tie.broken_by == TieBreak::FirstPlaces {
            let w = self.winner.as_deref().unwrap_or_default();
            out.push_str(&format!(", broken by first places ({w} has {}): {w} wins.", top_firsts));
            return out;
        }
        if still.len() == tie.members.len() {
            out.push_str(&format!(" and {} each", plural(top_firsts, "first place")));
        } else {
            out.push_str(&format!(", {} with {} each", and_list(&still), plural(top_firsts, "first place")));
        }
        match (tie.broken_by, &self.winner, &tie.chair) {
            (TieBreak::Chair, Some(w), Some(chair)) => {
                out.push_str(&format!(", broken by the chair's ballot ({chair} ranks {w} higher): {w} wins."))
            }
            _ => out.push_str(": left to the King."),
        }
        out
    }
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(names: &[impl AsRef<str>]) -> String {
    match names {
        [] => String::new(),
        [one] => one.as_ref().to_string(),
        [rest @ .., last] => {
            format!("{} and {}", rest.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", "), last.as_ref())
        }
    }
}

fn plural(n: u32, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

/// Totals of a completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Summary {
    pub total: u32,
    pub completed: u32,
    pub errors: u32,
    pub timeouts: u32,
    pub cancelled: u32,
    /// Sum of the costs the backends reported (answers, ballots, synthesis).
    pub cost_usd: f64,
}

/// Answer to `completion.agents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Completion {
    /// Names the completion; every event of it carries it as correlation id.
    pub id: String,
    pub thread: String,
    /// The prompt's message.
    pub seq: u64,
    pub wait: Wait,
    pub aggregation: Aggregation,
    pub parts: Vec<Part>,
    /// The merged message (`merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tally: Option<Tally>,
    /// The chair's final answer (`synthesize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesis: Option<Part>,
    pub summary: Summary,
}

/// An acknowledgement owed for an emergency broadcast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ack {
    /// The broadcast (`e-…`).
    pub broadcast: String,
    pub thread: String,
    /// The broadcast's message.
    pub seq: u64,
    pub member: String,
    pub acknowledged: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acked_at_ms: Option<i64>,
    /// `answer` (the member's next answer) or `kd ack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
}

/// Answer to `emergency.broadcast`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Emergency {
    pub broadcast: String,
    pub message: Message,
    /// Every member, each owing an acknowledgement.
    pub members: Vec<String>,
    /// Runs in flight that were told (recorded on the run).
    pub told_runs: Vec<String>,
    /// Runs stopped because the sender asked `stop`.
    pub stopped_runs: Vec<String>,
}

/// A declared use of a shared resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
}

/// What a race check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RaceStatus {
    /// No conflict; a write is now held for the window.
    Ok,
    /// Read while another writes: allowed, the data may be stale.
    Warning,
    /// Write while another writes: refused; retry after `backoff_ms`.
    Rejected,
}

/// Answer to `resource.write` and `resource.read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RaceCheck {
    pub resource: String,
    pub agent: String,
    pub access: Access,
    pub status: RaceStatus,
    /// The writers holding the resource inside the window.
    pub writers: Vec<String>,
    /// Until when this write is held (status ok, access write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until_ms: Option<i64>,
    /// When to retry a rejected write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
}

#[rpc(server, client)]
pub trait CoordinationApi {
    /// Routes a message from the King or a member to members (F-X1).
    #[method(name = "message.route", param_kind = map, with_extensions)]
    async fn message_route(
        &self,
        thread: String,
        from: String,
        body: String,
        to: Option<Vec<String>>,
        cc: Option<Vec<String>>,
        reply_to: Option<u64>,
        #[argument(rename = "type")] route_type: Option<RouteType>,
        correlation_id: Option<String>,
        path: Option<String>,
    ) -> RpcResult<Routed>;

    /// A member's inbox (F-X3).
    #[method(name = "queue.read", param_kind = map)]
    async fn queue_read(
        &self,
        member: String,
        thread: Option<String>,
        types: Option<Vec<RouteType>>,
        status: Option<InboxStatus>,
        limit: Option<u32>,
        mark_read: Option<bool>,
    ) -> RpcResult<Vec<InboxItem>>;

    #[method(name = "queue.process", param_kind = map)]
    async fn queue_process(&self, member: String, ids: Vec<u64>, action: Option<InboxStatus>) -> RpcResult<Processed>;

    #[method(name = "queue.subscribe", param_kind = map)]
    async fn queue_subscribe(
        &self,
        thread: String,
        member: String,
        types: Vec<RouteType>,
        mode: DeliveryMode,
    ) -> RpcResult<DeliveryPrefs>;

    /// One prompt to several members in parallel (F-X2).
    #[method(name = "completion.agents", param_kind = map, with_extensions)]
    async fn completion_agents(
        &self,
        thread: String,
        body: String,
        agents: Option<Vec<String>>,
        wait: Option<Wait>,
        timeout_s: Option<u64>,
        aggregation: Option<Aggregation>,
        vote: Option<bool>,
        chair: Option<String>,
        id: Option<String>,
        path: Option<String>,
    ) -> RpcResult<Completion>;

    /// An emergency to every member (F-X4).
    #[method(name = "emergency.broadcast", param_kind = map, with_extensions)]
    async fn emergency_broadcast(
        &self,
        thread: String,
        body: String,
        from: Option<String>,
        stop: Option<bool>,
        path: Option<String>,
    ) -> RpcResult<Emergency>;

    #[method(name = "emergency.ack", param_kind = map)]
    async fn emergency_ack(&self, thread: String, member: String, broadcast: Option<String>) -> RpcResult<Vec<Ack>>;

    #[method(name = "emergency.pending", param_kind = map)]
    async fn emergency_pending(&self, thread: Option<String>, all: Option<bool>) -> RpcResult<Vec<Ack>>;

    /// Declares a write of a shared resource (F-X5).
    #[method(name = "resource.write", param_kind = map)]
    async fn resource_write(
        &self,
        resource: String,
        agent: String,
        thread: Option<String>,
        window_ms: Option<u64>,
    ) -> RpcResult<RaceCheck>;

    #[method(name = "resource.read", param_kind = map)]
    async fn resource_read(&self, resource: String, agent: String, thread: Option<String>) -> RpcResult<RaceCheck>;
}
