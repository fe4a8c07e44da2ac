//! `kdd`: the kd daemon. See the crate docs of the `kdd` library.

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kdd::limits::Limits;

/// Large buffers in huge pages (`kdd::memory`).
#[global_allocator]
static ALLOCATOR: kdd::memory::Allocator = kdd::memory::Allocator;

/// The kd daemon: registry, agent runner and JSON-RPC server on a Unix socket.
#[derive(Debug, Parser)]
#[command(name = "kdd", version = kd_proto::LONG_VERSION)]
struct Args {
    /// Socket to listen on [default: $KD_SOCKET, $XDG_RUNTIME_DIR/kd/kdd.sock, /tmp/kd-$UID/kdd.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// The registry: a SQLite file, or a PostgreSQL database's URL
    /// (postgres://user@host/db) shared by several kdd [default: $KD_DB, $XDG_DATA_HOME/kd/kd.sqlite3]
    #[arg(long, value_name = "PATH|URL")]
    db: Option<PathBuf>,
    /// This daemon's name among the nodes of a shared (PostgreSQL) registry
    /// [default: $KD_NODE, the host name]
    #[arg(long, value_name = "NAME", env = "KD_NODE", value_parser = node_name)]
    node: Option<String>,
    /// Write logs to this file instead of stderr (RUST_LOG sets the level)
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Most open client connections
    #[arg(long, default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// Largest request body in bytes (at least 4096)
    #[arg(
        long,
        default_value_t = Limits::default().max_request_bytes,
        value_parser = clap::value_parser!(u32).range(i64::from(kd_proto::SMALLEST_REQUEST_LIMIT)..)
    )]
    max_request_bytes: u32,
    /// Largest answer in bytes (thread.messages pages within a quarter of it)
    #[arg(long, default_value_t = Limits::default().max_response_bytes)]
    max_response_bytes: u32,
    /// Most subscriptions per connection
    #[arg(long, default_value_t = Limits::default().max_subscriptions_per_connection)]
    max_subscriptions: u32,
    /// Milliseconds a cancelled agent has to exit before SIGKILL
    #[arg(long, default_value_t = 5000, value_parser = millis())]
    kill_grace_ms: u64,
    /// Milliseconds a client may leave a message unread before it is disconnected
    #[arg(long, default_value_t = Limits::default().client_timeout.as_millis() as u64, value_parser = millis())]
    client_timeout_ms: u64,
    /// Milliseconds connections have to close at shutdown before they are cut
    #[arg(long, default_value_t = Limits::default().shutdown_grace.as_millis() as u64, value_parser = millis())]
    shutdown_grace_ms: u64,
    /// Connections kept free, beyond --max-connections, for plain HTTP calls (kd daemon status, stop)
    #[arg(long, default_value_t = Limits::default().reserved_connections)]
    reserved_connections: usize,
    /// Milliseconds an HTTP connection may sit idle, or a WebSocket leave pings unanswered, before it is dropped
    #[arg(long, default_value_t = Limits::default().idle_timeout.as_millis() as u64, value_parser = millis())]
    idle_timeout_ms: u64,
    /// How often threads are aged (lifecycle.idle_after, archive_after); a
    /// read of a thread ages it at once anyway
    #[arg(long, default_value_t = kdd::lifecycle::REAP_INTERVAL.as_millis() as u64, value_parser = millis())]
    reap_interval_ms: u64,
    /// Milliseconds a codex app-server may sit idle (nothing asked of it)
    /// before it is stopped; the next run starts another
    #[arg(long, default_value_t = kdd::agent::APP_SERVER_IDLE.as_millis() as u64, value_parser = millis())]
    agent_idle_ms: u64,
    /// On a shared (PostgreSQL) registry: milliseconds a node stays live
    /// after its heartbeat and holds the exchanges it drives (cluster.lease)
    #[arg(long, default_value_t = kdd::cluster::LEASE.as_millis() as u64, value_parser = millis())]
    cluster_lease_ms: u64,
    /// On a shared registry: how often a node looks for work routed to it
    /// and for dead nodes when it was not told
    #[arg(long, default_value_t = kdd::cluster::POLL.as_millis() as u64, value_parser = millis())]
    cluster_poll_ms: u64,
    /// Milliseconds a git command kd runs in a member's worktree (the
    /// commit at the end of a run) may take before it is stopped; in your
    /// tree, where your hooks run, five times that
    #[arg(long, default_value_t = kdd::git::TIME_BOUND.as_millis() as u64, value_parser = millis())]
    git_timeout_ms: u64,
}

/// A node name, as `kd_proto::names` allows it.
fn node_name(s: &str) -> Result<String, String> {
    kd_proto::names::check_node_name(s).map(|()| s.to_string()).map_err(|e| e.to_string())
}

/// The longest any duration flag may be, in milliseconds: a day.
const MAX_FLAG_MS: u64 = 24 * 60 * 60 * 1000;

/// A duration flag in milliseconds, from 0 to [`MAX_FLAG_MS`].
fn millis() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(..=MAX_FLAG_MS)
}

fn main() -> ExitCode {
    // Before anything is created: what kdd writes is the user's alone.
    kdd::private::restrict_umask();
    kdd::memory::give_back_large_buffers();
    let args = Args::parse();
    let args_log_to_file = args.log_file.is_some();
    let logging = match kdd::log::init(args.log_file.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            say(&format!("kdd: {e:#}"));
            return ExitCode::FAILURE;
        }
    };
    if let Some(file) = &args.log_file {
        kdd::private::tighten(file);
    }
    let code = run(args, args_log_to_file);
    logging.finish(std::time::Duration::from_secs(1));
    code
}

/// A line on stderr that is lost, not a panic, when stderr is gone.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn run(args: Args, args_log_to_file: bool) -> ExitCode {
    let db = match kd_proto::paths::db_location(args.db.as_deref()) {
        Ok(db) => db,
        Err(e) => {
            say(&format!("kdd: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let opts = kdd::Options {
        socket: kd_proto::paths::socket_path(args.socket.as_deref()),
        db,
        db_dir_is_kds: !kd_proto::paths::db_place_chosen(args.db.as_deref()),
        node: args.node.clone().unwrap_or_else(kdd::default_node),
        limits: Limits {
            max_connections: args.max_connections.max(1),
            max_request_bytes: args.max_request_bytes,
            max_response_bytes: args.max_response_bytes.max(64 * 1024),
            max_subscriptions_per_connection: args.max_subscriptions,
            client_timeout: std::time::Duration::from_millis(args.client_timeout_ms.max(1)),
            shutdown_grace: std::time::Duration::from_millis(args.shutdown_grace_ms),
            reserved_connections: args.reserved_connections,
            idle_timeout: std::time::Duration::from_millis(args.idle_timeout_ms.max(30)),
        },
        kill_grace: std::time::Duration::from_millis(args.kill_grace_ms),
        reap_interval: std::time::Duration::from_millis(args.reap_interval_ms.max(10)),
        agent_idle: std::time::Duration::from_millis(args.agent_idle_ms.max(10)),
        cluster: kdd::cluster::Settings {
            lease: std::time::Duration::from_millis(args.cluster_lease_ms.max(300)),
            poll: std::time::Duration::from_millis(args.cluster_poll_ms.max(10)),
        },
        git_timeout: std::time::Duration::from_millis(args.git_timeout_ms),
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("kdd: cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match kdd::run_on(&runtime, opts) {
        Ok(stopped) => ExitCode::from(stopped.status()),
        Err(e) => {
            if args_log_to_file {
                tracing::error!("{e:#}");
            }
            say(&format!("kdd: {e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// kdd's runtime, with a worker thread fewer than the cores it may use (at
/// least one): the agents it starts, its registry's writer and its spawning
/// thread take the rest. On 2 cores a second worker was mostly woken to
/// take what the first would have run next — two thread switches each
/// time (issue 31, item 17: with one worker, kdd spent 14 % less CPU on a
/// question to three members, with half the context switches).
/// `TOKIO_WORKER_THREADS`, when set, decides instead.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        builder.worker_threads(cores.saturating_sub(1).max(1));
    }
    builder.enable_all().build()
}
