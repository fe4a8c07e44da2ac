//! Attention (issue 33): what kd sends the King's notification sinks when
//! it needs the King — an approval waits, an exchange or a work task
//! ended, a member failed or timed out, a budget stopped an exchange, an
//! emergency broadcast is not acknowledged — and `notify.test`
//! (`NotifyApiServer`, `NotifyApiClient`), which sends one to each sink a
//! workspace's configuration names and says what each answered, and
//! `notify.subscribe`, every notification live (kd web's attention view).
//!
//! [`Notification`] is also what a sink receives: the JSON body a
//! `notify.webhook` POSTs and the JSON a `notify.command` reads on stdin.

use jsonrpsee::core::SubscriptionResult;
use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;

/// Why kd calls the King.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotifyKind {
    /// A member's CLI asks a permission only the King can give.
    Approval,
    /// An exchange ended: every round ran (a vote's or a completion's last
    /// step included).
    Done,
    /// A work task ended (`kd work`): the members' work is committed.
    Work,
    /// A member's run failed.
    Failed,
    /// A member's run timed out.
    Timeout,
    /// `council.budget_usd` stopped an exchange's pending turns.
    Budget,
    /// An emergency broadcast is not acknowledged within `notify.ack_within`.
    Emergency,
    /// Sent by `notify.test`.
    Test,
}

impl NotifyKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [NotifyKind; 8] = [
        NotifyKind::Approval,
        NotifyKind::Done,
        NotifyKind::Work,
        NotifyKind::Failed,
        NotifyKind::Timeout,
        NotifyKind::Budget,
        NotifyKind::Emergency,
        NotifyKind::Test,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotifyKind::Approval => "approval",
            NotifyKind::Done => "done",
            NotifyKind::Work => "work",
            NotifyKind::Failed => "failed",
            NotifyKind::Timeout => "timeout",
            NotifyKind::Budget => "budget",
            NotifyKind::Emergency => "emergency",
            NotifyKind::Test => "test",
        }
    }

    pub fn parse(s: &str) -> Option<NotifyKind> {
        NotifyKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One notification, as every sink gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Notification {
    /// Its number on the daemon that sent it: increasing, and larger after
    /// a restart than before it (`notify.subscribe`'s `since`); 0 for a
    /// test.
    #[serde(default)]
    pub id: u64,
    pub kind: NotifyKind,
    /// The thread it is about (none for `test`).
    pub thread: Option<String>,
    /// One line: what needs the King, e.g. `Approval waits: claude wants
    /// to run "npm test"`.
    pub title: String,
    /// The member it is about, when one is.
    pub member: Option<String>,
    /// A few lines more: the thread's title, the error, the command.
    pub text: String,
    /// Where to look: `notify.link` with `{thread}` filled in, when it is
    /// configured, else none.
    pub link: Option<String>,
    /// The workspace of the thread.
    pub workspace: Option<String>,
    /// The King's message whose exchange it is about, when one is.
    pub exchange: Option<u64>,
    /// The approval that waits (kind `approval`): `kd approve ID`,
    /// `approval.decide`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    pub at_ms: i64,
}

/// What one sink answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SinkAnswer {
    /// `webhook`, `command` or `desktop`.
    pub sink: String,
    /// The URL (without its user info and query), the program, or the
    /// notification service.
    pub target: String,
    pub ok: bool,
    /// What it said: an HTTP status, an exit status with the end of its
    /// stderr, the desktop notification's id — or why it failed.
    pub answer: String,
    /// How long the call took.
    pub ms: u64,
}

/// What the notifier did since kdd started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NotifyStats {
    /// Notifications handed to sinks.
    pub sent: u64,
    /// Sink calls that failed or took too long.
    pub failed: u64,
    /// Events or sink calls dropped because the notifier's queue or its
    /// sinks were full.
    pub dropped: u64,
}

/// Answer to `notify.test`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NotifyTest {
    /// The notification sent.
    pub sent: Notification,
    /// One answer per configured sink (none: nothing is configured).
    pub sinks: Vec<SinkAnswer>,
    pub stats: NotifyStats,
}

/// How many notifications kdd keeps for `notify.subscribe` (the newest).
pub const KEPT: usize = 100;

/// An item of a `notify.subscribe` subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NotifyEvent {
    /// A notification kd sent (first the kept ones after `since`, oldest
    /// first; then each as it is sent).
    Notified { notification: Box<Notification> },
    /// The subscriber fell behind and `missed` notifications were dropped.
    Lagged { missed: u64 },
}

#[rpc(server, client)]
pub trait NotifyApi {
    /// Sends one `test` notification to each sink the workspace's
    /// configuration names and says what each answered.
    #[method(name = "notify.test", param_kind = map)]
    async fn notify_test(&self, workspace: String) -> RpcResult<NotifyTest>;

    /// kd's notifications on this daemon, live, whether or not a sink is
    /// configured (kd web's attention view): first the kept ones (at most
    /// [`KEPT`]) numbered after `since`, then each as it is sent.
    #[subscription(
        name = "notify.subscribe" => "notify.event",
        unsubscribe = "notify.unsubscribe",
        item = NotifyEvent,
        param_kind = map
    )]
    async fn notify_subscribe(&self, since: Option<u64>) -> SubscriptionResult;
}
