//! The council (`CouncilApiServer`, `CouncilApiClient`): a King's message
//! and the exchange it starts (`council.send`), its rounds and their
//! modes, interrupting and retrying members' runs, and the configuration a
//! workspace's council runs with (`config.get`).

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::core::SubscriptionResult;
use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;
use crate::message::Message;
use crate::registry::RunInfo;
use crate::subscribe::ThreadEvent;
use crate::thread::{ContextMode, Lineage};

/// Which preamble frames the prompt (F-A6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Style {
    /// An advisory council answering the King (`kd ask`).
    #[default]
    Council,
    /// A conversational group chat (`kd chat`).
    Chat,
}

/// How a council exchange proceeds (F-C2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A parallel first round, then sequential rounds.
    #[default]
    Broadcast,
    /// Round-robin from the start.
    Sequential,
}

/// Where an exchange stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoundState {
    Running,
    /// Every round ran.
    Done,
    /// Interrupted, or superseded by a new King message.
    Stopped,
}

/// A thread `council.send` creates together with its first message, so
/// that a refused question leaves no empty thread behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NewThread {
    /// The directory the conversation belongs to (absolute).
    pub workspace: String,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    /// history (default) or resume.
    #[serde(default)]
    pub context: Option<ContextMode>,
    /// Make it the current thread of its workspace and branch.
    #[serde(default)]
    pub set_current: bool,
    /// `trunk`: only as the first thread of its workspace and branch,
    /// refused (already_exists) when it has a trunk — how `kd ask` without
    /// `--new` makes sure concurrent questions share one trunk. Default:
    /// the trunk when there is none, else a branch of it.
    #[serde(default)]
    pub lineage: Option<Lineage>,
}

/// Answer to `council.send`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sent {
    /// The message as stored; its seq names the exchange.
    pub message: Message,
    /// Who answers: the addressed members, less the muted.
    pub members: Vec<String>,
    /// Rounds planned: 1 + auto rounds (1 for a directed message).
    pub rounds: u32,
    pub mode: Mode,
    /// Something the user should know, e.g. that members were found on PATH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// The runs answering it, one per addressed member. A member already
    /// running on the thread is not started twice: its run in flight is
    /// listed with `attached: true`.
    pub runs: Vec<SentRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SentRun {
    #[serde(flatten)]
    pub run: RunInfo,
    pub attached: bool,
}

/// Answer to `council.interrupt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Interrupted {
    /// Runs that were cancelled.
    pub runs: Vec<RunInfo>,
    /// Whether pending auto-turns were stopped.
    pub stopped_exchange: bool,
}

/// One effective configuration value and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigEntry {
    /// Dotted key, e.g. `council.auto_rounds`, `agents.claude.model`.
    pub key: String,
    pub value: serde_json::Value,
    /// The file path, `default`, or `found on PATH`.
    pub source: String,
}

/// Answer to `config.get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigView {
    pub workspace: String,
    /// The file in effect, if any.
    pub file: Option<String>,
    pub entries: Vec<ConfigEntry>,
    /// e.g. members found on PATH, or none found.
    pub notice: Option<String>,
    /// One line for each key of the file kd reads but does not use (e.g.
    /// Kingdom's `peasant`).
    #[serde(default)]
    pub notices: Vec<String>,
    /// One line for each value kd takes that will not work (e.g. an
    /// argument `codex app-server` refuses, so the member cannot start).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[rpc(server, client)]
pub trait CouncilApi {
    /// Sends a message from the King and starts a run for each addressed member.
    #[method(name = "council.send", param_kind = map, with_extensions)]
    async fn council_send(
        &self,
        thread: String,
        body: String,
        to: Option<Vec<String>>,
        mute: Option<Vec<String>>,
        style: Option<Style>,
        timeout_s: Option<u64>,
        correlation_id: Option<String>,
        rounds: Option<u32>,
        new_thread: Option<NewThread>,
        path: Option<String>,
    ) -> RpcResult<Sent>;

    /// `kd ask`'s question in one call, a round trip fewer than
    /// `thread.current`, then `thread.subscribe` beside `council.send`
    /// (issue 31, item 17): asked in the current thread of `new_thread`'s
    /// workspace and branch — or, when it has none, in `new_thread`, created
    /// as thread `thread` with the question — and subscribed to from before
    /// the question. The first item is [`ThreadEvent::Asked`]; the thread's
    /// events follow as `thread.subscribe` sends them. Refused, nothing is
    /// asked, when `protocol` is not the daemon's.
    #[subscription(
        name = "council.ask" => "council.event",
        unsubscribe = "council.unask",
        item = ThreadEvent,
        param_kind = map,
        with_extensions
    )]
    async fn council_ask(
        &self,
        protocol: u32,
        thread: String,
        new_thread: NewThread,
        body: String,
        to: Option<Vec<String>>,
        mute: Option<Vec<String>>,
        timeout_s: Option<u64>,
        rounds: Option<u32>,
        path: Option<String>,
    ) -> SubscriptionResult;

    /// Cancels this client's runs on the thread (all runs with `all`) and
    /// stops further auto-turns until the next King message.
    #[method(name = "council.interrupt", param_kind = map, with_extensions)]
    async fn council_interrupt(&self, thread: String, all: Option<bool>) -> RpcResult<Interrupted>;

    /// Re-queries the members whose last run failed; each answer replaces
    /// the failed one.
    #[method(name = "council.retry", param_kind = map, with_extensions)]
    async fn council_retry(
        &self,
        thread: String,
        style: Option<Style>,
        timeout_s: Option<u64>,
        path: Option<String>,
    ) -> RpcResult<Vec<RunInfo>>;

    /// The effective configuration of a workspace, value by value, with
    /// where each came from; an invalid configuration is an error.
    #[method(name = "config.get", param_kind = map)]
    async fn config_get(&self, workspace: String, path: Option<String>) -> RpcResult<ConfigView>;
}
