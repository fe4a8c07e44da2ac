//! Starting `kdd` when no one answers on the socket (F-D5), like gpg-agent.
//!
//! Race-free: starters serialise on an exclusive lock of
//! `<socket>.start.lock`; whoever gets it first checks the socket again
//! (someone may have started the daemon meanwhile) and otherwise spawns
//! `kdd`, waits for its `kdd ready` line, and releases the lock. The daemon
//! itself also refuses to run twice on one socket, so even a starter that
//! bypasses this lock cannot create a second daemon.

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kd_proto::paths;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::UnixStream;

use crate::error::{ClientError, one_line};

/// Environment variable naming the `kdd` binary to start.
pub const ENV_KDD: &str = "KD_KDD";

/// How long a starting daemon may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether `KD_NO_AUTOSTART` forbids starting the daemon.
pub fn disabled() -> bool {
    std::env::var_os(paths::ENV_NO_AUTOSTART).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The `kdd` to run: `$KD_KDD`, else the one next to this executable, else
/// `kdd` from `PATH`.
pub fn kdd_binary() -> PathBuf {
    if let Some(p) = std::env::var_os(ENV_KDD).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("kdd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("kdd"))
}

/// Where an auto-started daemon logs: next to the database, or next to the
/// socket when no data directory can be found.
pub fn log_file(socket: &Path) -> PathBuf {
    match paths::db_location(None).and_then(|db| paths::log_file_of(&db)) {
        Ok(log) => log,
        Err(_) => socket.with_file_name("kdd.log"),
    }
}

/// Whether kd would start kdd on a shared registry itself: `KD_DB` names a
/// PostgreSQL database (the daemon started inherits it, and `KD_NODE`).
pub fn starts_a_node() -> bool {
    std::env::var(paths::ENV_DB).is_ok_and(|db| paths::is_db_url(&db))
}

/// What a daemon that served `socket` on a shared registry said it was
/// (`node a of postgres://…`), if one did — unless kd would start a node
/// on a shared registry itself ([`starts_a_node`]).
pub fn stopped_node(socket: &Path) -> Option<String> {
    if starts_a_node() {
        return None;
    }
    let said = std::fs::read_to_string(paths::node_marker(socket)).ok()?;
    let line = said.lines().next()?.trim();
    let line: String = line.chars().filter(|c| !c.is_control()).take(300).collect();
    (!line.is_empty()).then_some(line)
}

/// Starts the daemon for `socket` unless one answers by the time we hold the
/// start lock. Returns once the daemon accepts connections.
pub async fn start(socket: &Path) -> Result<(), ClientError> {
    let dir = paths::socket_dir(socket);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| ClientError::Start(format!("cannot create {}: {e}", dir.display())))?;
    // Nothing is written into a directory someone else controls.
    paths::check_private_dir(dir, rustix::process::getuid().as_raw())
        .map_err(|e| ClientError::Untrusted { socket: socket.to_path_buf(), reason: e.to_string() })?;
    let mut lock_path = OsString::from(socket.as_os_str());
    lock_path.push(".start.lock");
    let lock = paths::open_lock_file(Path::new(&lock_path))
        .map_err(|e| ClientError::Start(format!("cannot open {}: {e}", Path::new(&lock_path).display())))?;
    let lock = tokio::time::timeout(READY_TIMEOUT * 2, tokio::task::spawn_blocking(move || lock.lock().map(|()| lock)))
        .await
        .map_err(|_| ClientError::Start("another kd has been starting kdd for too long".into()))?
        .map_err(|e| ClientError::Start(e.to_string()))?
        .map_err(|e| ClientError::Start(format!("cannot lock {}: {e}", Path::new(&lock_path).display())))?;

    let result = if UnixStream::connect(socket).await.is_ok() { Ok(()) } else { spawn_and_wait(socket).await };
    drop(lock);
    result
}

async fn spawn_and_wait(socket: &Path) -> Result<(), ClientError> {
    let kdd = kdd_binary();
    let log = log_file(socket);
    let mut child = tokio::process::Command::new(&kdd)
        .arg("--socket")
        .arg(socket)
        .arg("--log-file")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a Ctrl+C meant for this kd does not reach it.
        .process_group(0)
        .spawn()
        .map_err(|e| ClientError::Start(format!("cannot run {}: {e} (install kdd or set {ENV_KDD})", kdd.display())))?;
    let stdout = child.stdout.take().ok_or_else(|| ClientError::Start("no stdout from kdd".into()))?;
    let mut lines = BufReader::new(stdout).lines();
    match tokio::time::timeout(READY_TIMEOUT, lines.next_line()).await {
        Ok(Ok(Some(line))) if line.starts_with("kdd ready") => Ok(()),
        Ok(_) => {
            let mut err = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = tokio::time::timeout(Duration::from_secs(2), stderr.read_to_string(&mut err)).await;
            }
            let err = one_line(err.trim().trim_start_matches("kdd: "));
            if err.contains("already running") {
                // Another daemon won a race that bypassed our lock: use it.
                return Ok(());
            }
            Err(ClientError::Start(if err.is_empty() { format!("kdd exited; see {}", log.display()) } else { err }))
        }
        Err(_) => {
            let _ = child.start_kill();
            Err(ClientError::Start(format!(
                "kdd did not become ready within {} s; see {}",
                READY_TIMEOUT.as_secs(),
                log.display()
            )))
        }
    }
}
