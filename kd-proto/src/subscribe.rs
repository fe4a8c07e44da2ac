//! A thread, live (`SubscribeApiServer`, `SubscribeApiClient`):
//! `thread.subscribe` sends the messages after a seq from the registry,
//! then every [`ThreadEvent`] as it happens — messages, runs and their
//! tokens, rounds, emergencies, the thread's status, members' work.

use jsonrpsee::core::SubscriptionResult;
use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::council::RoundState;
use crate::message::Message;
use crate::registry::RunInfo;
use crate::thread::ThreadStatus;

/// An item of a `thread.subscribe` subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThreadEvent {
    /// A message was appended (or, first, one of the backlog).
    Message { message: Box<Message> },
    /// The subscriber fell behind and `missed` live items were dropped.
    /// Messages are resent from the registry after this notice; only
    /// transient items (token deltas, and the `run_waiting`, `run_started`
    /// and `activity` of runs whose message is resent) are lost: a run
    /// never heard of is known by its message.
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
    /// `reason`: why, when no client cancelled it — a member's emergency
    /// broadcast stopped it (absent: a client's `run.cancel`).
    RunCancelled {
        run: String,
        member: String,
        seq: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
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
    /// A member's CLI asks permission for a tool and the King is asked
    /// (the policy said `ask`): the approval is pending until decided,
    /// expired or cancelled. Its run is `waiting` meanwhile.
    ApprovalRequested { approval: Box<crate::approval::Approval> },
    /// An approval was decided (by the policy, the King or the timeout) or
    /// cancelled.
    ApprovalDecided { approval: Box<crate::approval::Approval> },
    /// `council.ask`'s first item (never `thread.subscribe`'s): the
    /// question was asked in `thread`, whose events follow from after seq
    /// `since`; `sent` is what `council.send` answers.
    Asked { thread: String, since: u64, sent: Box<crate::council::Sent> },
}

#[rpc(server, client)]
pub trait SubscribeApi {
    /// Messages after `since_seq` from the registry; where the thread's
    /// exchanges stand (the last round of those begun after `since_seq`
    /// that are over, the round of the one under way) and its runs in
    /// flight; then live events.
    #[subscription(
        name = "thread.subscribe" => "thread.event",
        unsubscribe = "thread.unsubscribe",
        item = ThreadEvent,
        param_kind = map,
        with_extensions
    )]
    async fn thread_subscribe(
        &self,
        thread: String,
        since_seq: Option<u64>,
        // The macro's generated server uses a local named `pending`.
        #[argument(rename = "pending")] not_yet_created: Option<bool>,
    ) -> SubscriptionResult;
}
