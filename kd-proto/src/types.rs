//! Serde types of everything that crosses the socket: params, results and
//! subscription items. Times are Unix milliseconds (`*_ms`), durations are
//! milliseconds, ids are short strings of `[a-z0-9-]`.

pub use crate::coord::*;
pub use crate::daemon::*;
pub use crate::exchange::*;
pub use crate::library::*;
pub use crate::message::*;
pub use crate::registry::*;
pub use crate::thread::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::order::display_order;

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

/// An item of a `thread.subscribe` subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThreadEvent {
    /// A message was appended (or, first, one of the backlog).
    Message { message: Box<Message> },
    /// The subscriber fell behind and `missed` live items were dropped.
    /// Messages are resent from the registry after this notice; only
    /// transient items (such as token deltas) are lost.
    Lagged { missed: u64 },
    /// A run was accepted; its agent is about to start.
    RunWaiting { run: RunInfo },
    /// The agent process was spawned.
    RunStarted { run: String, member: String, pid: u32 },
    /// Text the agent produced. `chars` counts the run's characters after
    /// this delta. A subscriber joining mid-run first gets one delta with
    /// all the text so far.
    Delta { run: String, member: String, text: String, chars: u64 },
    /// What the agent is doing besides writing its answer — a command it
    /// runs, a file it changes, its plan, thinking — in a few words (at
    /// most 200 characters). Shown while the run streams; never stored.
    Activity { run: String, member: String, what: String },
    /// The run finished; its answer is message `seq`.
    RunFinished { run: String, member: String, seq: u64 },
    /// The run failed or timed out; the `error` message `seq` says why.
    RunError { run: String, member: String, error: String, timed_out: bool, seq: u64 },
    /// The run was cancelled; message `seq` (kind `interrupted`) holds the
    /// text it had produced. `interrupted`: it was cut by kdd stopping, not
    /// cancelled by anyone (absent: false); the daemon may ask again.
    RunCancelled {
        run: String,
        member: String,
        seq: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    /// An exchange moved: round `round` of `rounds` is running, or it ended.
    /// `expected` are the members expected to answer in this round.
    Round { exchange: u64, round: u32, rounds: u32, state: RoundState, expected: Vec<String> },
    /// An emergency broadcast (message `seq`) and the members who have not
    /// acknowledged it yet; sent again at every acknowledgement, the last
    /// time with `pending` empty.
    Emergency { broadcast: String, seq: u64, from: String, pending: Vec<String> },
    /// The thread's status changed (F-L2): `reason` is `age` (the reaper),
    /// `message` (a message revived it), `archive` or `unarchive` (asked).
    Status { status: ThreadStatus, reason: String },
    /// A member's work moved (F-W1..W6): kd committed its changes, or the
    /// King accepted, rejected or removed it.
    Work { worktree: Box<crate::work::Worktree> },
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
