//! # kdd — the kd daemon
//!
//! One long-running process per user that owns the registry and serves the
//! JSON-RPC API on a Unix socket.
//!
//! - [`server`]: one daemon per socket (lock file), socket permissions,
//!   peer-uid check, connection bound, HTTP + WebSocket per connection;
//! - [`web`]: kd web, the web client served on a TCP address (paired
//!   browsers, the same methods at `/rpc`);
//! - [`rpc`]: each domain's `…ApiServer` trait implemented, parameter
//!   checks, error mapping, subscriptions;
//! - [`state`]: what handlers share;
//! - [`limits`] and [`connections`]: the server's bounds and its open
//!   connections, below both [`server`] and [`state`];
//! - [`council`]: who is asked and when (sends, rounds, retries);
//! - [`cluster`]: this node among others on a shared registry — work
//!   routed here, dead nodes' work taken over;
//! - [`agent`]: running the agent CLIs and reading their streams;
//! - [`approvals`]: the permissions members' CLIs ask, decided by policy or
//!   by the King;
//! - [`prompt`]: what agents are told and the clean-up of what they say;
//! - [`config`]: the workspace's council configuration;
//! - [`db`]: the SQLite registry — one writer thread, pooled readers, all SQL;
//! - [`hub`]: fan-out of thread events to subscribers;
//! - [`notify`]: telling the King when kd needs them (webhook, command,
//!   desktop), off every run's path;
//! - [`client`]: the identity of a client connection;
//! - [`doctor`]: the checks behind `kd doctor`;
//! - [`log`]: logging that never panics or blocks;
//! - [`private`]: the daemon's files are the user's alone (umask, tightening);
//! - [`shutdown`]: signals and the shutdown order;
//! - [`proc`]: process liveness;
//! - [`identity`]: who a connection's peer is — the King, or a process of an
//!   agent kd runs, confined to acting as that agent's member — and kdd as
//!   the agents' child subreaper.
//!
//! The entry point is [`run`].

#![deny(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod agent;
pub mod approvals;
pub mod client;
pub mod cluster;
pub mod config;
pub mod connections;
pub mod coord;
pub mod council;
pub mod db;
pub mod doctor;
pub mod git;
pub mod hub;
pub mod identity;
#[cfg(test)]
mod layers;
pub mod lifecycle;
pub mod limits;
pub mod log;
pub mod markdown;
pub mod memory;
pub mod notify;
pub mod private;
pub mod proc;
pub mod prompt;
#[cfg(test)]
mod proptests;
pub mod resume;
pub mod rpc;
pub mod server;
pub mod service;
pub mod shutdown;
pub mod state;
pub mod summary;
pub mod web;
pub mod work;

use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;

use db::Db;
use hub::Hub;
use limits::Limits;
use server::SocketClaim;
use state::Daemon;

/// How to run the daemon.
#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    pub db: kd_proto::paths::DbLocation,
    /// This daemon's node name on a shared registry (`--node`).
    pub node: String,
    /// Whether kd chose the database's place (no `--db` or `KD_DB`): then its
    /// directory is kd's and is kept private too.
    pub db_dir_is_kds: bool,
    pub limits: Limits,
    /// How long a signalled agent has before SIGKILL.
    pub kill_grace: std::time::Duration,
    /// How often the lifecycle reaper ages threads.
    pub reap_interval: std::time::Duration,
    /// How long a codex app-server may sit idle before it is stopped.
    pub agent_idle: std::time::Duration,
    /// How the nodes of a shared registry keep track of each other.
    pub cluster: cluster::Settings,
    /// How long kd's git in a member's worktree may take before it is
    /// stopped ([`git::set_time_bound`]).
    pub git_timeout: std::time::Duration,
}

/// This machine's name, as the kernel has it.
pub fn host_name() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// The node name a daemon takes by default: the host name, lowercased,
/// with what a node name may not hold made `-`.
pub fn default_node() -> String {
    let name: String = host_name()
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '-' })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(kd_proto::names::MAX_NAME_LEN)
        .collect();
    if name.is_empty() { "kdd".into() } else { name }
}

/// Says beside the socket whether this daemon is a node of a shared
/// registry (`paths::node_marker`), so that a client finding the socket
/// dead does not start a daemon on a registry of its own in its place.
fn mark_node(socket: &std::path::Path, db: &Db) {
    let marker = kd_proto::paths::node_marker(socket);
    if !db.is_shared() {
        let _ = std::fs::remove_file(&marker);
        return;
    }
    let line = format!("node {} of {}\n", db.node().id, db.location());
    let written = kd_proto::paths::open_lock_file(&marker).and_then(|mut f| {
        use std::io::Write;
        f.set_len(0)?;
        f.write_all(line.as_bytes())
    });
    if let Err(e) = written {
        tracing::warn!("cannot write {}: {e}", marker.display());
    }
}

/// Why a daemon that started stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// A signal, `daemon.shutdown`, `kd daemon stop`.
    Asked,
    /// The other nodes of a shared registry declared this one dead (its
    /// heartbeat stalled past the lease): it stopped so as not to act on
    /// what is theirs now, and is to be started again.
    DeclaredDead,
}

impl Stopped {
    /// kdd's exit status: 0 when it was asked to stop;
    /// [`DECLARED_DEAD_STATUS`] when declared dead, which a service manager
    /// restarts (`Restart=on-failure`; launchd's `KeepAlive` when not a
    /// successful exit).
    pub fn status(self) -> u8 {
        match self {
            Stopped::Asked => 0,
            Stopped::DeclaredDead => DECLARED_DEAD_STATUS,
        }
    }
}

/// The exit status of a node that stopped because the others declared it
/// dead: sysexits' `EX_TEMPFAIL` (try again later), distinct from 1, a
/// daemon that could not start or failed.
pub const DECLARED_DEAD_STATUS: u8 = 75;

/// [`run`] on `runtime`, from a thread outside it.
///
/// Here in the library rather than in `main`: the daemon's future is
/// compiled where it is polled, and polled here it is compiled once, with
/// the library, instead of again in the binary after the library is done
/// (issue 31, item 18: 17 s of a release build, one after the other).
pub fn run_on(runtime: &tokio::runtime::Runtime, opts: Options) -> anyhow::Result<Stopped> {
    runtime.block_on(run(opts))
}

/// Runs the daemon until SIGTERM, SIGINT or `daemon.shutdown`. Prints one
/// line, `kdd ready …`, on stdout once the socket accepts connections.
pub async fn run(mut opts: Options) -> anyhow::Result<Stopped> {
    // A socket passed by systemd or launchd is used as it is, at its path.
    let inherited = server::activation::inherited()?;
    let claim = match &inherited {
        Some(i) => {
            if i.path != opts.socket {
                tracing::info!("listening on the socket the service manager passed, {}", i.path.display());
                opts.socket = i.path.clone();
            }
            service::set_socket_activated();
            SocketClaim::inherited(&opts.socket)?
        }
        None => SocketClaim::claim(&opts.socket)?,
    };
    // Before any agent starts: what they orphan becomes kdd's, and stays
    // confined (identity).
    identity::reaper::become_subreaper();
    let hub = Arc::new(Hub::new());
    if let Some(file) = opts.db.file() {
        private::tighten_database(file, opts.db_dir_is_kds);
    }
    let me = db::Node {
        lease: opts.cluster.lease,
        id: opts.node.clone(),
        host: host_name(),
        pid: std::process::id(),
        socket: opts.socket.display().to_string(),
    };
    let db = Db::open(&opts.db, hub.clone(), me).await?;
    mark_node(&opts.socket, &db);
    git::set_time_bound(opts.git_timeout);
    git::note_start();
    let recovered = agent::recover(&db, &opts.socket).await.context("cannot recover runs left in flight")?;
    if recovered.runs > 0 {
        tracing::warn!("recorded {} run(s) left in flight by the previous daemon as interrupted", recovered.runs);
    }
    let listener = match inherited {
        Some(i) => tokio::net::UnixListener::from_std(i.listener).context("cannot use the passed socket")?,
        None => claim.bind()?,
    };
    let (archived, archives) = lifecycle::Archived::channel();
    let daemon = Arc::new(Daemon::new(db, hub, opts.socket.clone(), &opts.limits, opts.kill_grace, archived.clone()));
    // What it left open, to resume: read (and the works its rebases'
    // followers will touch claimed) before serving, for what this daemon
    // begins is its own.
    let left = resume::left(&daemon.coord).await;
    shutdown::on_signals(daemon.shutdown.clone()).context("cannot install signal handlers")?;
    identity::reaper::spawn(daemon.close.clone());
    daemon.notify.start(&daemon.hub, daemon.shutdown.clone());
    tracing::info!(
        socket = %opts.socket.display(),
        db = %daemon.db.location(),
        schema = daemon.db.schema_version(),
        "kdd {} listening",
        kd_proto::VERSION
    );
    // Beside serving, in order: what runs a stopped daemon left in their
    // worktrees is committed (each git there bounded in time); then the
    // checks it left running run again, and what it left open goes on
    // (F-J2) — then, on a shared registry, work routed here and dead
    // nodes' work.
    let (checks, coord, shutdown) = (daemon.checks.clone(), daemon.coord.clone(), daemon.shutdown.clone());
    let db = daemon.db.clone();
    tokio::spawn(async move {
        recovered.commit_work(&db).await;
        cluster::spawn(coord, left, opts.cluster, shutdown);
        let n = checks.resume().await;
        if n > 0 {
            tracing::info!("{n} check(s) left running by the previous daemon run again");
        }
    });
    // Whichever path archives a thread, what follows an archive follows.
    tokio::spawn(summary::follow(daemon.council.clone(), archives));
    lifecycle::spawn_reaper(daemon.db.clone(), archived, opts.reap_interval, daemon.shutdown.clone());
    agent::spawn_idle_stop(daemon.agents.clone(), opts.agent_idle, daemon.shutdown.clone());
    db::search::spawn_indexer(daemon.db.clone(), db::search::INDEX_INTERVAL, daemon.shutdown.clone());
    memory::spawn_trim(daemon.shutdown.clone());
    let methods: jsonrpsee::Methods = rpc::module(daemon.clone()).into();
    let state_dir = kd_proto::paths::log_file_of(&opts.db)
        .ok()
        .and_then(|f| f.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_else(|| opts.socket.with_file_name(""));
    let web = Arc::new(web::Web::new(daemon.clone(), methods.clone(), opts.limits.clone(), state_dir));
    if daemon.web.set(web.clone()).is_err() {
        tracing::warn!("kd web was installed twice");
    }
    // `web.listen` in the user's configuration: served from the start.
    web.serve_configured().await;
    shutdown::announce_ready(&opts.socket);
    service::ready(&opts.socket);
    service::spawn_watchdog(daemon.shutdown.clone());
    let serving = tokio::spawn(server::serve(listener, methods, daemon.clone(), opts.limits.clone()));
    daemon.shutdown.cancelled().await;
    tracing::info!("stopping");
    service::stopping();
    // In order: nothing new starts; the runs in flight stop and are recorded
    // (subscribers hear it); then subscriptions end and connections close.
    daemon.council.close();
    daemon.db.stopping();
    // `kd daemon stop --no-resume`: every open exchange ends for good (its
    // runs then end cancelled, not to be asked again).
    let resume = !daemon.no_resume.load(std::sync::atomic::Ordering::SeqCst);
    if !resume {
        match daemon.db.stop_open_exchanges("the daemon was stopped with --no-resume".into()).await {
            Ok(n) if n > 0 => tracing::info!("{n} exchange(s) ended for good (--no-resume)"),
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot end the open exchanges: {e}"),
        }
    }
    // Checks in flight are killed beside the runs, left to run again at
    // the next start.
    let (n, ()) = tokio::join!(agent::stop_all(&daemon.agents), daemon.checks.stop(opts.kill_grace));
    if n > 0 {
        tracing::info!("{n} run(s) recorded as interrupted");
    }
    // Where each open exchange was cut, for the next start to resume it.
    match daemon.db.cut_open_exchanges().await {
        Ok(0) => {}
        Ok(cut) => tracing::info!("{cut} exchange(s) cut, to be resumed at the next start"),
        Err(e) => tracing::warn!("cannot record the exchanges cut: {e}"),
    }
    daemon.close.cancel();
    let (served, ()) = tokio::join!(serving, web.shutdown());
    if let Err(e) = served {
        tracing::error!("the server task failed: {e}");
    }
    let stopped = if daemon.db.lost() { Stopped::DeclaredDead } else { Stopped::Asked };
    daemon.db.close().await;
    drop(claim);
    match stopped {
        Stopped::Asked => tracing::info!("stopped"),
        Stopped::DeclaredDead => tracing::info!(
            "stopped, declared dead by the other nodes: exit status {DECLARED_DEAD_STATUS}, for the service manager \
             to start it again"
        ),
    }
    Ok(stopped)
}
