//! Signals and the shutdown order.
//!
//! SIGTERM, SIGINT and `daemon.shutdown` cancel one token. Then, in order:
//! the server stops accepting and open connections finish
//! ([`crate::server::serve`]); the registry finishes queued writes and
//! checkpoints ([`crate::db::Db::close`]); the socket file is removed and the
//! lock released (dropping [`crate::server::SocketClaim`]). SIGHUP is ignored
//! so that closing the terminal that started the daemon does not stop it.

use std::io::Write;
use std::path::Path;

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancels `token` on SIGTERM or SIGINT; ignores SIGHUP.
pub fn on_signals(token: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM"); break; }
                _ = int.recv() => { tracing::info!("SIGINT"); break; }
                _ = hup.recv() => { tracing::info!("SIGHUP ignored"); continue; }
            }
        }
        token.cancel();
    });
    Ok(())
}

/// The readiness line clients and tests wait for. Written once; a closed
/// stdout (the starter went away) is not an error.
pub fn announce_ready(socket: &Path) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "kdd ready on {} (pid {})", socket.display(), std::process::id());
    let _ = out.flush();
}
