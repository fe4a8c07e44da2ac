//! Running agent CLIs (F-A1..F-A3).
//!
//! - [`argv`]: each backend's command line;
//! - [`supervisor`]: one run from start to message, handing it to its transport;
//! - the transports, peers below the supervisor: `cli` (a CLI process per
//!   run), [`appserver`] (codex through one long-lived `codex app-server`),
//!   [`acp`] (any Agent Client Protocol agent, one long-lived process per member);
//! - below them all: [`spec`] (what a run is asked to do), `outcome` (how a
//!   run ends: failures, early stops, the outcome from what the agent said),
//!   `stream` (a run's start and its capped text, told as they happen);
//! - [`process`]: spawning in a process group that dies with the daemon, signals;
//!   `launch`: how such a process is started and set up before it runs
//!   (kdd's own clone); `child`: the process as its caller holds it;
//! - [`lines`]: bounded line reading of stdout;
//! - [`peer`]: a long-lived agent process spoken to in JSON-RPC over stdio;
//! - [`asking`]: a permission such an agent asks, answered by the approvals
//!   service beside the run's loop, never in the peer's reading loop;
//! - [`pool`]: such processes by what they are started from;
//! - [`parse`]: per-backend `parse_line` and the [`parse::Transcript`] that folds lines;
//! - `prepare`: the prompt a run is given and the session it holds;
//!   [`shared_read`]: the thread read once for the runs of a round;
//!   [`thread_cache`]: a thread read whole kept for the next round;
//! - [`registry`]: the runs in flight, in memory;
//! - [`grants`]: the capability each run is given, by which its agent acts
//!   through kd as its member;
//! - [`mcp`]: kd's MCP server (`kd mcp`) as each backend is given it for a
//!   run, and the capabilities of conversations that outlive a run;
//! - `turn`: what a run over a long-lived agent streams, and its clocks;
//! - [`work`]: a run in a member's worktree — the setup of a new one, the
//!   commit of what the member changed at the end of every run, and of
//!   what a run the last daemon died in left.
//!
//! [`Runner`] is what runs need from the daemon: the registry, the hub, the
//! runs in flight and how long a signalled agent has. The council starts
//! runs through it; nothing here knows about councils or the RPC.

pub mod acp;
pub mod appserver;
pub mod argv;
pub mod asking;
mod child;
mod cli;
pub mod grants;
mod launch;
pub mod lines;
pub mod mcp;
mod outcome;
pub mod parse;
pub mod peer;
pub mod pool;
mod prepare;
pub mod process;
pub mod registry;
pub mod shared_read;
pub mod spec;
mod stream;
pub mod supervisor;
pub mod thread_cache;
mod turn;
pub mod work;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use registry::{Registry, StopReason};

use crate::db::{Db, DbResult};
use crate::hub::Hub;

/// What every run shares.
pub struct Runner {
    pub db: Arc<Db>,
    pub hub: Arc<Hub>,
    /// Runs in flight.
    pub runs: Arc<Registry>,
    /// How long a signalled agent has before SIGKILL.
    pub kill_grace: Duration,
    /// The daemon's socket, named to agents as `KD_SOCKET` so that `kd`
    /// run from their shell reaches this daemon.
    pub socket: PathBuf,
    /// The codex app-server processes runs share.
    pub appservers: appserver::AppServers,
    /// The ACP agents' processes.
    pub acp: acp::AcpAgents,
    /// The capabilities runs were given (shared with the long-lived
    /// agents, whose conversations hold some).
    pub grants: Arc<grants::Grants>,
    /// The permissions members' CLIs ask (policy, the King, the timeout).
    pub approvals: Arc<crate::approvals::Approvals>,
    /// What follows a work run once its changes are committed (the check
    /// in the worktree), installed by the layer that decides it.
    pub after_work: std::sync::OnceLock<Arc<dyn work::after::AfterWork>>,
    /// Reads of a thread the runs of a round share.
    pub shared_reads: shared_read::SharedReads,
    /// Threads read whole, kept for the next round's history prompts.
    pub thread_cache: Arc<thread_cache::ThreadCache>,
    /// Set once the daemon stops: no run starts after it.
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl Runner {
    pub fn new(db: Arc<Db>, hub: Arc<Hub>, kill_grace: Duration, socket: PathBuf) -> Runner {
        let runs = Arc::new(Registry::default());
        Runner {
            approvals: Arc::new(crate::approvals::Approvals::new(db.clone(), hub.clone(), runs.clone())),
            db,
            hub,
            runs,
            kill_grace,
            socket,
            appservers: Default::default(),
            acp: Default::default(),
            grants: Default::default(),
            after_work: Default::default(),
            shared_reads: Default::default(),
            thread_cache: Default::default(),
            closed: Default::default(),
        }
    }

    /// No run starts from now on (the daemon is stopping).
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// [`Runner::is_closed`], to ask where the runner is not at hand.
    pub fn closed_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.closed.clone()
    }

    /// The backend named `run`'s session `backend`: saved on its journal
    /// step while it runs, so that a run cut by a crash resumes in it
    /// (F-J2). (A run that ends first gives it with its end.)
    pub async fn session_seen(&self, run: &registry::Run, backend: &str) {
        if run.step.is_none() {
            return;
        }
        if let Err(e) = self.db.run_session_seen(run.id.clone(), backend.to_string()).await {
            tracing::warn!(run = run.id, "cannot save the backend's session: {e}");
        }
    }
}

/// How long a codex app-server may sit idle before it is stopped (by
/// default; `kdd --agent-idle-ms`).
pub const APP_SERVER_IDLE: Duration = Duration::from_secs(10 * 60);

/// Stops, every `idle`, the codex app-servers nothing was asked of since
/// the last time (one started for a member whose configuration changed
/// since, say), until the daemon stops.
pub fn spawn_idle_stop(d: Arc<Runner>, idle: Duration, shutdown: tokio_util::sync::CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(idle);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    let n = d.appservers.stop_idle().await;
                    if n > 0 {
                        tracing::info!("stopped {n} idle codex app-server(s)");
                    }
                }
            }
        }
    });
}

/// At start, before kdd listens: kills whatever the runs left in flight
/// by a daemon that died still have running — the agent, what it started,
/// what moved away from its group (see [`process::kill_tree`]; a reused
/// pid is never hit; by the run's marker alone when the daemon died before
/// it recorded the agent's pid, [`process::kill_carrying`]) — and what
/// that daemon's long-lived agents and checks started (they died with it;
/// what they started did not, see
/// [`process::kill_left_by_peers`]), then records those runs as
/// interrupted. `socket` is the daemon's. What those runs left in their
/// worktrees is committed after, beside serving ([`Recovered::commit_work`]):
/// git there may take up to its time bound.
pub async fn recover(db: &Db, socket: &Path) -> DbResult<Recovered> {
    let mut unrecorded = Vec::new();
    for orphan in db.orphan_runs().await? {
        let marker = process::marker(process::RUN_MARKER, &orphan.id);
        let Some(pid) = orphan.pid else {
            // Its agent may have started before the daemon died: what it
            // started is found by the run's marker alone.
            unrecorded.push(marker);
            continue;
        };
        let killed =
            tokio::task::spawn_blocking(move || process::kill_tree(pid, orphan.pid_start, &marker)).await.unwrap_or(0);
        if killed > 0 {
            tracing::warn!(run = orphan.id, pid, "killed {killed} process(es) left by the previous daemon");
        }
    }
    let before = process::start_time(std::process::id()).unwrap_or(0);
    let killed = tokio::task::spawn_blocking(move || process::kill_carrying(&unrecorded, before)).await.unwrap_or(0);
    if killed > 0 {
        tracing::warn!("killed {killed} process(es) left by runs whose agent's pid the previous daemon never recorded");
    }
    let socket = socket.display().to_string();
    let killed = tokio::task::spawn_blocking(move || process::kill_left_by_peers(&socket, before)).await.unwrap_or(0);
    if killed > 0 {
        tracing::warn!("killed {killed} process(es) the previous daemon's long-lived agents and checks left");
    }
    let orphans: Vec<(String, String, String)> =
        db.orphan_runs().await?.into_iter().map(|o| (o.id, o.thread, o.member)).collect();
    let runs = db.recover_runs().await?;
    crate::approvals::recover(db).await;
    Ok(Recovered { runs, orphans })
}

/// What [`recover`] found: how many runs it recorded as interrupted, and
/// those runs (by thread and member), whose worktrees are still to commit.
pub struct Recovered {
    pub runs: usize,
    orphans: Vec<(String, String, String)>,
}

impl Recovered {
    /// Commits what a member working in its worktree left ("TASK
    /// (interrupted)"), recorded on its interrupted run (F-W6). Before
    /// anything else runs in those worktrees.
    pub async fn commit_work(&self, db: &Db) -> usize {
        work::recover(db, &self.orphans).await
    }
}

/// Stops every run (recorded as interrupted) and waits until their messages
/// are written, for at most the kill grace period plus a margin.
pub async fn stop_all(d: &Runner) -> usize {
    let runs = d.runs.all();
    for r in &runs {
        r.stop(StopReason::Shutdown);
    }
    let wait = d.kill_grace + Duration::from_secs(5);
    for r in &runs {
        if tokio::time::timeout(wait, r.done()).await.is_err() {
            tracing::warn!(run = r.id, "run did not finish in time at shutdown");
        }
    }
    tokio::join!(d.appservers.stop_all(), d.acp.stop_all());
    runs.len()
}
