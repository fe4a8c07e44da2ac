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

pub mod claude;
pub mod policy;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kd_proto::approval::{Approval, ApprovalState, ApprovalTool, DecidedBy, Scope};
use kd_proto::types::ThreadEvent;

use crate::config::Backend;
use crate::db::Db;
use crate::db::approvals::{CUT_BY_RESTART, Decide};
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
    db: Arc<Db>,
    hub: Arc<Hub>,
    waits: Arc<dyn Waits>,
}

/// The runs in flight (the agent's run registry), told when one waits on
/// an approval — its status reads `waiting` with the approval's id — and
/// when it waits no more.
pub trait Waits: Send + Sync {
    /// `run` waits on `approval`.
    fn waiting(&self, run: &str, approval: &str);
    /// `run` no longer waits on `approval` (decided, expired, cancelled).
    fn answered(&self, run: &str, approval: &str);
}

/// No run is told (tests of the service alone).
pub struct NoWaits;

impl Waits for NoWaits {
    fn waiting(&self, _: &str, _: &str) {}
    fn answered(&self, _: &str, _: &str) {}
}

/// The message a denial by the timeout carries to the agent.
pub fn expired_message(timeout: Duration) -> String {
    format!(
        "kd asked the King for this permission and nobody answered within {}: the approval expired, so the tool \
         was not run. Go on without it, or say what you needed.",
        human(timeout)
    )
}

impl Approvals {
    pub fn new(db: Arc<Db>, hub: Arc<Hub>, waits: Arc<dyn Waits>) -> Approvals {
        Approvals { db, hub, waits }
    }

    /// Decides `ask`: by the policy when it says allow or deny; else, when
    /// a King's client can answer, by the King (a durable pending
    /// approval, bounded by `approvals.timeout`, after which the agent is
    /// denied and told why); else `today`, the CLI's fixed policy of
    /// before. Dropping the future while the approval is pending records
    /// it `cancelled`. Never blocks kd: callers run it beside their
    /// reading loop.
    pub async fn ask(&self, ask: Ask, today: Answer) -> Answer {
        let policy = self.policy_of(&ask.thread).await;
        let (verdict, source) =
            policy::verdict(&policy, &ask.member, ask.backend, ask.tool.kind, &ask.tool.paths, ask.worktree.as_deref());
        match verdict {
            Verdict::Allow => {
                if source == policy::Source::Rule {
                    self.record(&ask, ApprovalState::Approved, None).await;
                }
                return Answer::Allow { scope: Scope::Once };
            }
            Verdict::Deny => {
                let message = denied_by_policy(&ask);
                self.record(&ask, ApprovalState::Denied, Some(message.clone())).await;
                return Answer::Deny { message };
            }
            Verdict::Ask => {}
        }
        if let Some(scope) = self.granted(&ask).await {
            return Answer::Allow { scope };
        }
        if !self.hub.king_listens(&ask.thread) {
            return today;
        }
        self.pending(ask, policy.timeout, today).await
    }

    /// The thread's workspace's `approvals` policy, the user's section and
    /// the workspace's (its defaults when the thread or its configuration
    /// cannot be read: the configuration's errors are told where it is
    /// loaded for a run). Read from disk on each request, as every
    /// question reads the configuration afresh (the config module keeps
    /// no cache).
    async fn policy_of(&self, thread: &str) -> Policy {
        let Ok(t) = self.db.thread(thread.to_string()).await else { return Policy::default() };
        let workspace = PathBuf::from(t.workspace);
        match tokio::task::spawn_blocking(move || crate::config::load(&workspace)).await {
            Ok(Ok(c)) => c.approvals,
            _ => Policy::default(),
        }
    }

    /// What the King granted earlier for this run or this thread that
    /// covers a tool of this kind.
    async fn granted(&self, ask: &Ask) -> Option<Scope> {
        let grants = self.db.approvals_granted(ask.thread.clone(), ask.member.clone(), ask.run.clone()).await.ok()?;
        grants.into_iter().find(|a| a.tool.kind == ask.tool.kind).and_then(|a| a.scope)
    }

    fn approval(&self, ask: &Ask, state: ApprovalState, timeout: Option<Duration>) -> Approval {
        let now = crate::db::now_ms();
        let mut scopes = ask.scopes.clone();
        if !scopes.contains(&Scope::Once) {
            scopes.insert(0, Scope::Once);
        }
        Approval {
            id: format!("ap-{}", crate::db::random_id(8)),
            thread: ask.thread.clone(),
            member: ask.member.clone(),
            run: ask.run.clone(),
            tool: ask.tool.clone().bounded(),
            scopes,
            state,
            decided_by: None,
            scope: None,
            message: None,
            requested_at_ms: now,
            decided_at_ms: None,
            expires_at_ms: timeout.map(|t| now + t.as_millis() as i64),
        }
    }

    /// Records a decision of the policy (for the King to read later).
    async fn record(&self, ask: &Ask, state: ApprovalState, message: Option<String>) {
        let mut a = self.approval(ask, state, None);
        a.decided_by = Some(DecidedBy::Policy);
        a.decided_at_ms = Some(a.requested_at_ms);
        a.scope = (state == ApprovalState::Approved).then_some(Scope::Once);
        a.message = message;
        if let Err(e) = self.db.add_approval(a, self.db.node().id.clone()).await {
            tracing::warn!("cannot record an approval decided by the policy: {e}");
        }
    }

    /// A pending approval the King decides, within `timeout`.
    async fn pending(&self, ask: Ask, timeout: Duration, today: Answer) -> Answer {
        let a = self.approval(&ask, ApprovalState::Pending, Some(timeout));
        let id = a.id.clone();
        // Subscribed before it is told: no decision is missed.
        let mut told = self.hub.subscribe(&ask.thread);
        // Armed before it is recorded: an asker gone while it is written
        // still cancels it (the cancellation is written after it).
        // Told the run before it is recorded: whoever hears of the approval
        // finds its run waiting on it.
        let waits = ask.run.clone().map(|run| {
            self.waits.waiting(&run, &id);
            (self.waits.clone(), run)
        });
        let mut guard = Pending { id: id.clone(), db: Some(self.db.clone()), waits };
        if let Err(e) = self.db.add_approval(a, self.db.node().id.clone()).await {
            guard.db = None;
            tracing::warn!("cannot record approval {id} ({e}): the CLI is answered as before approvals");
            return today;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let decided = loop {
            tokio::select! {
                got = told.recv() => match got {
                    Ok(p) => {
                        if let Ok(ThreadEvent::ApprovalDecided { approval }) = serde_json::from_str(p.json.get())
                            && approval.id == id
                        {
                            break *approval;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if let Ok(Some(a)) = self.db.approval(id.clone()).await
                            && !a.state.is_pending()
                        {
                            break a;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        told = self.hub.subscribe(&ask.thread);
                    }
                },
                () = tokio::time::sleep_until(deadline) => {
                    let d = Decide {
                        id: id.clone(),
                        state: ApprovalState::Expired,
                        by: Some(DecidedBy::Timeout),
                        scope: None,
                        message: Some(expired_message(timeout)),
                    };
                    match self.db.decide_approval(d).await {
                        Ok(d) => break d.approval().clone(),
                        Err(e) => {
                            tracing::warn!("cannot record approval {id} expired: {e}");
                            guard.db = None;
                            return Answer::Deny { message: expired_message(timeout) };
                        }
                    }
                }
            }
        };
        guard.db = None;
        answer_of(&decided)
    }
}

/// A duration as a person says it: `10 minutes`, `90 seconds`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{} hour{}", s / 3600, if s == 3600 { "" } else { "s" }),
        s if s >= 60 && s % 60 == 0 => format!("{} minute{}", s / 60, if s == 60 { "" } else { "s" }),
        s => format!("{s} second{}", if s == 1 { "" } else { "s" }),
    }
}

/// What the CLI is answered for a decided approval.
pub fn answer_of(a: &Approval) -> Answer {
    match a.state {
        ApprovalState::Approved => Answer::Allow { scope: a.scope.unwrap_or(Scope::Once) },
        ApprovalState::Cancelled => Answer::Cancelled,
        ApprovalState::Denied | ApprovalState::Expired | ApprovalState::Pending => Answer::Deny {
            message: a.message.clone().unwrap_or_else(|| "The King denied this permission (kd).".to_string()),
        },
    }
}

/// A pending approval whose asker may go away: dropped while still armed
/// (the run cancelled, the transport gone, kdd stopping), it is recorded
/// `cancelled`. However it ends, its run waits on it no more.
struct Pending {
    id: String,
    db: Option<Arc<Db>>,
    /// The runs to tell, and the run that waits.
    waits: Option<(Arc<dyn Waits>, String)>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some((waits, run)) = self.waits.take() {
            waits.answered(&run, &self.id);
        }
        let Some(db) = self.db.take() else { return };
        let id = std::mem::take(&mut self.id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let d = Decide {
                    id: id.clone(),
                    state: ApprovalState::Cancelled,
                    by: None,
                    scope: None,
                    message: Some("its run ended before anyone answered".into()),
                };
                if let Err(e) = db.decide_approval(d).await {
                    tracing::warn!("cannot record approval {id} cancelled: {e}");
                }
            });
        }
    }
}

/// Cancels the pending approvals this node's runs left when it stopped
/// (their runs died with it), at start.
pub async fn recover(db: &Db) {
    match db.cancel_node_approvals(db.node().id.clone(), CUT_BY_RESTART.to_string()).await {
        Ok(cut) if !cut.is_empty() => tracing::info!("{} approval(s) pending when kdd stopped: cancelled", cut.len()),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot cancel the approvals pending when kdd stopped: {e}"),
    }
}

/// The message of a denial by the policy.
fn denied_by_policy(ask: &Ask) -> String {
    format!(
        "kd's approvals policy denies {} tools to {} (the approvals section of kd's configuration): {}",
        ask.tool.kind.as_str(),
        ask.member,
        ask.tool.title
    )
}

#[cfg(test)]
mod tests;
