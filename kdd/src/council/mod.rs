//! The council: delivering routed messages to members ([`deliver`]),
//! sending a King
//! message ([`send`]), the rounds that follow it ([`exchange`]), the
//! hand-offs each exchange may make ([`hops`]), and retrying failed answers
//! ([`retry`]). It decides who is asked and when;
//! [`crate::agent`] runs them and [`crate::prompt`] says what they are told.

pub mod budget;
pub mod deliver;
pub mod exchange;
pub mod exchanges;
pub mod hops;
pub mod retry;
pub mod send;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kd_proto::types::{Style, Thread, ThreadEvent};

use crate::agent::Runner;
use crate::agent::registry::{Claim, Place, Run};
use crate::agent::spec::{ResumeFrom, WorkRun};
use crate::agent::supervisor::{self, Spec};
use crate::client::ClientId;
use crate::config::Config;
use crate::db::exchanges::Step;
use crate::db::random_id;
use crate::lifecycle::Archived;
use exchanges::Exchanges;

/// What the council's operations share: the runner that starts runs, the
/// exchange in progress on each thread, and where threads archived on the
/// way (a send ages its thread) are told.
pub struct Council {
    pub agents: Arc<Runner>,
    pub exchanges: Exchanges,
    /// The hand-offs each exchange has made.
    pub hops: hops::Hops,
    pub archived: Archived,
}

impl Council {
    pub fn new(agents: Arc<Runner>, archived: Archived) -> Council {
        Council { agents, exchanges: Exchanges::default(), hops: Default::default(), archived }
    }

    /// The daemon is stopping: no exchange takes another turn and no run
    /// starts. Runs in flight are left to [`crate::agent::stop_all`].
    pub fn close(&self) {
        self.agents.close();
        self.exchanges.stop_all();
    }
}

/// What every run of a send or an exchange shares.
#[derive(Debug, Clone)]
pub struct Launch {
    pub thread: Thread,
    pub config: Config,
    pub style: Style,
    /// Overrides the members' timeouts.
    pub timeout: Option<Duration>,
    pub client: Option<ClientId>,
    /// A prompt of its own instead of the thread (a ballot or a synthesis
    /// of `completion.agents`), after the preamble and the agent's prompt.
    pub prompt: Option<String>,
    /// The worktrees of the thread's members who work (F-W1): their runs
    /// answering the thread work there, writable; runs with a prompt of
    /// their own (ballots, syntheses, reviews) advise, read-only.
    pub work: WorkRuns,
}

/// Refuses to start members' runs here on `thread` when its workspace is
/// another live node's: its members run there, so that a member answers
/// one question at a time on a thread, cluster-wide. A dead node's thread
/// is served here when this host has its workspace. (A King's question,
/// `council.send`, is not refused: it is routed to that node.)
pub async fn runs_here(db: &crate::db::Db, thread: &str) -> Result<(), jsonrpsee::types::ErrorObjectOwned> {
    let Some((owner, live)) = db.thread_node(thread.to_string()).await? else { return Ok(()) };
    let workspace = db.thread(thread.to_string()).await?.workspace;
    if !live && std::path::Path::new(&workspace).is_dir() {
        return Ok(());
    }
    let state = if live { "" } else { ", which is not live now" };
    Err(kd_proto::ErrorCode::Conflict.error(format!(
        "thread {thread}'s workspace is node {owner}'s{state}: its members run there; do this on node {owner} \
         (a question sent from here with kd ask goes there)"
    )))
}

/// Lists the council of `config` as `thread`'s members when the thread
/// lists others (or none): what `kd threads` and `kd show` say it asks.
pub async fn keep_members(db: &crate::db::Db, thread: &Thread, config: &Config) -> crate::db::DbResult<()> {
    if thread.members != config.council.members {
        db.set_thread_members(thread.id.clone(), config.council.members.clone()).await?;
    }
    Ok(())
}

/// The node whose members run on `thread`, when it is another live node
/// than this one: what is cancelled here is cancelled there.
pub async fn live_owner(db: &crate::db::Db, thread: &str) -> crate::db::DbResult<Option<String>> {
    Ok(db.thread_node(thread.to_string()).await?.filter(|(_, live)| *live).map(|(owner, _)| owner))
}

/// The worktree each member works in, on a work thread.
pub type WorkRuns = Arc<BTreeMap<String, WorkRun>>;

/// The worktrees of `thread`'s members whose work is not settled (a member
/// whose work was accepted, rejected or removed, or that kd found tampered
/// with, advises again, read-only).
pub async fn work_runs(db: &crate::db::Db, thread: &str) -> crate::db::DbResult<WorkRuns> {
    let id = thread.to_string();
    // A worktree none of its member's runs has worked in yet is fresh: its
    // first run sets it up (work.copy, work.setup).
    let trees = db.worktrees_with_runs(id).await?;
    Ok(Arc::new(
        trees
            .into_iter()
            .filter(|(_, w)| w.state.takes_work() && w.removed_at_ms.is_none())
            .map(|(ran, w)| {
                let run = WorkRun {
                    dir: PathBuf::from(&w.path),
                    repo: PathBuf::from(&w.repo),
                    branch: w.branch,
                    base: w.base,
                    task: w.task,
                    fresh: !ran,
                };
                (w.member, run)
            })
            .collect(),
    ))
}

impl Launch {
    /// Claims `member`'s run at `place` (see [`Claim`]): a new run starts
    /// now, a queued one once the member's run in flight on the thread has
    /// ended, and a request for the question the member is already
    /// answering joins that run. Nothing starts once the daemon is stopping.
    pub fn start(&self, c: &Council, member: &str, place: Place) -> Option<Claim> {
        self.start_with(c, member, place, None)
    }

    /// Claims `member`'s run taking journal step `step` (F-J1): it answers
    /// where the step first did, and a step a restart cut is asked again —
    /// in the backend session the cut run had, replacing what it had said.
    pub fn start_step(&self, c: &Council, member: &str, place: Place, step: &Step) -> Option<Claim> {
        let place = Place {
            step: Some(step.id),
            reply_to: step.reply_to.or(place.reply_to),
            replaces: step.replaces_seq.or(place.replaces),
            ..place
        };
        let resume = (step.attempts > 0 && step.replaces_seq.is_some())
            .then(|| ResumeFrom { backend_session: step.backend_session.clone() });
        self.start_with(c, member, place, resume)
    }

    fn start_with(&self, c: &Council, member: &str, place: Place, resume_from: Option<ResumeFrom>) -> Option<Claim> {
        if c.agents.is_closed() {
            return None;
        }
        let agent = self.config.agent(member)?.clone();
        let claim = c.agents.runs.claim(&self.thread.id, member, &place, |ordinal| {
            Run::new(
                format!("r-{}", random_id(10)),
                ordinal,
                self.thread.id.clone(),
                member.to_string(),
                agent.backend.as_str(),
                place,
                self.client,
            )
            .found_on(agent.path.clone())
        });
        // kd's MCP server for the run, when the member has it and a kd to
        // serve it is found (else the run goes without, as doctor says).
        let kd = (agent.mcp && agent.backend.takes_mcp())
            .then(|| crate::config::find_kd(&crate::config::Env::process()))
            .flatten();
        let work = self.prompt.is_none().then(|| self.work.get(member).cloned()).flatten();
        // A run in the member's worktree is told where it works (F-W1).
        let preamble = match &work {
            Some(w) => self.config.work_preamble(&w.dir, &w.branch, kd.is_some()),
            None => self.config.preamble(self.style, kd.is_some()),
        };
        let spec = || Spec {
            timeout: self.timeout.unwrap_or(Duration::from_secs(self.config.timeout_s(member))),
            agent,
            preamble,
            kd,
            style: self.style,
            context: self.thread.context,
            workspace: PathBuf::from(&self.thread.workspace),
            max_answer_bytes: self.config.council.max_answer_bytes,
            members: self.config.council.members.clone(),
            prompt: self.prompt.clone(),
            work,
            work_settings: self.config.work.clone(),
            resume_from: resume_from.clone(),
        };
        match &claim {
            Claim::New(run) => {
                tokio::spawn(supervisor::supervise(c.agents.clone(), run.clone(), spec()));
            }
            Claim::Queued(run) => {
                // Subscribers see it waiting its turn; the run's record is
                // written when it starts (or is stopped before it could).
                c.agents.hub.publish(&run.thread, ThreadEvent::RunWaiting { run: run.info() });
                let (agents, run, spec) = (c.agents.clone(), run.clone(), spec());
                tokio::spawn(async move {
                    agents.runs.turn(&run).await;
                    run.leave_queue();
                    supervisor::supervise(agents, run, spec).await;
                });
            }
            Claim::Joined(_) => {}
        }
        Some(claim)
    }
}
