//! `kdd`: the kd daemon. See the crate docs of the `kdd` library.

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kdd::server::Limits;

/// The kd daemon: registry, agent runner and JSON-RPC server on a Unix socket.
#[derive(Debug, Parser)]
#[command(name = "kdd", version)]
struct Args {
    /// Socket to listen on [default: $KD_SOCKET, $XDG_RUNTIME_DIR/kd/kdd.sock, /tmp/kd-$UID/kdd.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// SQLite database [default: $KD_DB, $XDG_DATA_HOME/kd/kd.sqlite3]
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Write logs to this file instead of stderr (RUST_LOG sets the level)
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Most open client connections
    #[arg(long, default_value_t = Limits::default().max_connections)]
    max_connections: usize,
    /// Largest request body in bytes
    #[arg(long, default_value_t = Limits::default().max_request_bytes)]
    max_request_bytes: u32,
    /// Most subscriptions per connection
    #[arg(long, default_value_t = Limits::default().max_subscriptions_per_connection)]
    max_subscriptions: u32,
    /// Milliseconds a cancelled agent has to exit before SIGKILL
    #[arg(long, default_value_t = 5000)]
    kill_grace_ms: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let args_log_to_file = args.log_file.is_some();
    if let Err(e) = init_logging(args.log_file.as_deref()) {
        eprintln!("kdd: {e:#}");
        return ExitCode::FAILURE;
    }
    let db = match kd_proto::paths::db_path(args.db.as_deref()) {
        Ok(db) => db,
        Err(e) => {
            eprintln!("kdd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = kdd::Options {
        socket: kd_proto::paths::socket_path(args.socket.as_deref()),
        db,
        limits: Limits {
            max_connections: args.max_connections.max(1),
            max_request_bytes: args.max_request_bytes,
            max_subscriptions_per_connection: args.max_subscriptions,
            ..Limits::default()
        },
        kill_grace: std::time::Duration::from_millis(args.kill_grace_ms),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kdd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(kdd::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if args_log_to_file {
                tracing::error!("{e:#}");
            }
            eprintln!("kdd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(file: Option<&std::path::Path>) -> anyhow::Result<()> {
    use anyhow::Context;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match file {
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open log file {}", path.display()))?;
            builder.with_ansi(false).with_writer(std::sync::Mutex::new(f)).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}
