//! Approvals (`ApprovalApiServer`, `ApprovalApiClient`): a permission a
//! member's CLI asks before it uses a tool — run a command, write a file,
//! fetch a page — decided by the workspace's policy (`approvals` in the
//! configuration) or, when the policy says `ask`, by the King from any
//! client. An approval is a registry object (durable across restarts),
//! told on its thread as [`crate::subscribe::ThreadEvent::ApprovalRequested`]
//! and [`crate::subscribe::ThreadEvent::ApprovalDecided`], and to every
//! `approval.subscribe` subscriber. Only the King lists and decides them:
//! these methods are refused to an agent's processes, and the member
//! surface has none of them.

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::core::SubscriptionResult;
use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;

/// Most paths an approval's tool keeps.
pub const MAX_PATHS: usize = 4;
/// Characters kept of a title, a command, a path, a reason or a message.
pub const MAX_TEXT: usize = 300;
/// Characters a command keeps (a script may be long; the King should see it).
pub const MAX_COMMAND: usize = 4000;
/// Bytes of JSON a tool's input keeps; past it the input is replaced by a
/// note saying so.
pub const MAX_INPUT: usize = 16 * 1024;
/// Most approvals one `approval.list` returns (and its default).
pub const LIST_PAGE: u32 = 500;

/// What a tool does, as far as a policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads or searches files.
    Read,
    /// Writes, edits, moves or deletes files.
    Edit,
    /// Runs a command.
    Execute,
    /// Fetches from the network.
    Fetch,
    /// A tool of an MCP server.
    Mcp,
    /// Anything else (the CLI did not say).
    Other,
}

impl ToolKind {
    pub const ALL: [ToolKind; 6] =
        [ToolKind::Read, ToolKind::Edit, ToolKind::Execute, ToolKind::Fetch, ToolKind::Mcp, ToolKind::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Read => "read",
            ToolKind::Edit => "edit",
            ToolKind::Execute => "execute",
            ToolKind::Fetch => "fetch",
            ToolKind::Mcp => "mcp",
            ToolKind::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<ToolKind> {
        ToolKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// The tool a member's CLI asks to use, as the agent described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalTool {
    pub kind: ToolKind,
    /// The CLI's own name of the tool: `Bash`, `Write`,
    /// `commandExecution`, `fileChange`, an ACP tool's title.
    #[serde(default)]
    pub name: Option<String>,
    /// One line a human reads: `touch x`, `Write /path/notes.md`.
    pub title: String,
    /// A command's text, when it runs one.
    #[serde(default)]
    pub command: Option<String>,
    /// The paths it touches (a few).
    #[serde(default)]
    pub paths: Vec<String>,
    /// The tool's input as the agent gave it (at most [`MAX_INPUT`] bytes
    /// of JSON, else a note saying how long it was).
    #[serde(default)]
    pub input: serde_json::Value,
    /// The agent's justification (codex's `reason`).
    #[serde(default)]
    pub reason: Option<String>,
}

fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

impl ApprovalTool {
    /// A tool of `kind` named to a human by `title`, nothing else known yet.
    pub fn new(kind: ToolKind, title: impl Into<String>) -> ApprovalTool {
        ApprovalTool {
            kind,
            name: None,
            title: title.into(),
            command: None,
            paths: Vec::new(),
            input: serde_json::Value::Null,
            reason: None,
        }
    }

    /// The same, within the bounds kd keeps ([`MAX_TEXT`], [`MAX_COMMAND`],
    /// [`MAX_PATHS`], [`MAX_INPUT`]); the title on one line.
    pub fn bounded(self) -> ApprovalTool {
        let one_line: String = self.title.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        let input = match serde_json::to_string(&self.input) {
            Ok(s) if s.len() <= MAX_INPUT => self.input,
            Ok(s) => serde_json::json!({ "kd_note": format!("input of {} bytes not kept", s.len()) }),
            Err(_) => serde_json::Value::Null,
        };
        ApprovalTool {
            kind: self.kind,
            name: self.name.map(|n| cut(&n, MAX_TEXT)),
            title: cut(one_line.trim(), MAX_TEXT),
            command: self.command.map(|c| cut(&c, MAX_COMMAND)),
            paths: self.paths.iter().take(MAX_PATHS).map(|p| cut(p, MAX_TEXT)).collect(),
            input,
            reason: self.reason.map(|r| cut(&r, MAX_TEXT)),
        }
    }
}

/// What an approval covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This one call.
    Once,
    /// This call and, for the rest of the member's run, every later one of
    /// the same kind.
    Run,
    /// This call and, for this member on this thread (every later run),
    /// every later one of the same kind.
    Thread,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Run => "run",
            Scope::Thread => "thread",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        [Scope::Once, Scope::Run, Scope::Thread].into_iter().find(|x| x.as_str() == s)
    }
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting for the King.
    Pending,
    Approved,
    Denied,
    /// Nobody answered within `approvals.timeout`: the agent was denied.
    Expired,
    /// Its run ended (cancelled, timed out, kdd stopped or died) before
    /// anyone answered.
    Cancelled,
}

impl ApprovalState {
    pub const ALL: [ApprovalState; 5] = [
        ApprovalState::Pending,
        ApprovalState::Approved,
        ApprovalState::Denied,
        ApprovalState::Expired,
        ApprovalState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
            ApprovalState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<ApprovalState> {
        ApprovalState::ALL.into_iter().find(|x| x.as_str() == s)
    }

    pub fn is_pending(self) -> bool {
        self == ApprovalState::Pending
    }
}

/// Who decided an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// The workspace's `approvals` policy, or an earlier grant of the King
    /// for the run or the thread that covers it.
    Policy,
    /// The King, from a client.
    King,
    /// Nobody, within `approvals.timeout`.
    Timeout,
}

impl DecidedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Policy => "policy",
            DecidedBy::King => "king",
            DecidedBy::Timeout => "timeout",
        }
    }

    pub fn parse(s: &str) -> Option<DecidedBy> {
        [DecidedBy::Policy, DecidedBy::King, DecidedBy::Timeout].into_iter().find(|x| x.as_str() == s)
    }
}

/// A permission a member's CLI asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Approval {
    /// `ap-…`, `[a-z0-9-]`.
    pub id: String,
    pub thread: String,
    pub member: String,
    /// The run that asked.
    #[serde(default)]
    pub run: Option<String>,
    pub tool: ApprovalTool,
    /// The choices this CLI can honour for it (`once` always).
    pub scopes: Vec<Scope>,
    pub state: ApprovalState,
    #[serde(default)]
    pub decided_by: Option<DecidedBy>,
    /// What an approval was granted for.
    #[serde(default)]
    pub scope: Option<Scope>,
    /// A denial's message: the King's, or kd's for a timeout.
    #[serde(default)]
    pub message: Option<String>,
    pub requested_at_ms: i64,
    #[serde(default)]
    pub decided_at_ms: Option<i64>,
    /// When a pending approval expires.
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
}

/// The King's answer to an approval (`approval.decide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Deny,
}

/// An item of an `approval.subscribe` subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ApprovalEvent {
    /// An approval waits for the King (first, every one pending when the
    /// subscription began).
    Requested { approval: Box<Approval> },
    /// An approval was decided, expired or cancelled.
    Decided { approval: Box<Approval> },
    /// The subscriber fell behind and `missed` items were dropped: list the
    /// pending ones again (`approval.list`).
    Lagged { missed: u64 },
}

/// What a member's claude is answered when it asks permission through
/// kd's MCP server (`member.permission`): the JSON its
/// `--permission-prompt-tool` takes, as is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "behavior", rename_all = "snake_case")]
pub enum PermissionAnswer {
    /// Run the tool with this input (the input as the agent gave it:
    /// claude 2.1.197 refuses an allow without it).
    Allow {
        #[serde(rename = "updatedInput")]
        updated_input: serde_json::Value,
    },
    /// Do not; the message goes to the model.
    Deny { message: String },
}

#[rpc(server, client)]
pub trait ApprovalApi {
    /// Approvals, newest first: the pending ones, or with `all` every state;
    /// of one thread, or of every thread. At most `limit` (default and most
    /// [`LIST_PAGE`]).
    #[method(name = "approval.list", param_kind = map)]
    async fn approval_list(
        &self,
        all: Option<bool>,
        thread: Option<String>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<Approval>>;

    /// The King's decision on a pending approval: approve (for `scope`, one
    /// of the approval's `scopes`; default `once`) or deny (with a message
    /// for the agent). Refused (`conflict`) once it is decided.
    #[method(name = "approval.decide", param_kind = map)]
    async fn approval_decide(
        &self,
        id: String,
        decision: Decision,
        scope: Option<Scope>,
        message: Option<String>,
    ) -> RpcResult<Approval>;

    /// Every thread's approvals, live: first every pending one, then each
    /// request and decision as it happens.
    #[subscription(
        name = "approval.subscribe" => "approval.event",
        unsubscribe = "approval.unsubscribe",
        item = ApprovalEvent,
        param_kind = map
    )]
    async fn approval_subscribe(&self) -> SubscriptionResult;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_back() {
        for k in ToolKind::ALL {
            assert_eq!(ToolKind::parse(k.as_str()), Some(k));
        }
        for s in ApprovalState::ALL {
            assert_eq!(ApprovalState::parse(s.as_str()), Some(s));
        }
        for s in [Scope::Once, Scope::Run, Scope::Thread] {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
        }
        for d in [DecidedBy::Policy, DecidedBy::King, DecidedBy::Timeout] {
            assert_eq!(DecidedBy::parse(d.as_str()), Some(d));
        }
        assert_eq!(ToolKind::parse("write"), None);
    }

    #[test]
    fn a_permission_answer_is_what_claude_takes() {
        let allow = PermissionAnswer::Allow { updated_input: serde_json::json!({"command": "touch x"}) };
        assert_eq!(
            serde_json::to_value(&allow).unwrap(),
            serde_json::json!({"behavior": "allow", "updatedInput": {"command": "touch x"}})
        );
        let deny = PermissionAnswer::Deny { message: "no".into() };
        assert_eq!(serde_json::to_value(&deny).unwrap(), serde_json::json!({"behavior": "deny", "message": "no"}));
    }

    #[test]
    fn a_tool_is_kept_within_bounds() {
        let mut t = ApprovalTool::new(ToolKind::Execute, format!("line one\nline two {}", "x".repeat(1000)));
        t.paths = (0..10).map(|i| format!("/p/{i}")).collect();
        t.input = serde_json::json!({"content": "y".repeat(MAX_INPUT * 2)});
        let t = t.bounded();
        assert!(!t.title.contains('\n'));
        assert_eq!(t.title.chars().count(), MAX_TEXT + 1);
        assert_eq!(t.paths.len(), MAX_PATHS);
        assert!(t.input["kd_note"].as_str().unwrap().contains("not kept"));
    }
}
