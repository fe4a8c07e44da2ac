//! WAL checkpoints off the writer's path. The writer connection runs with
//! `wal_autocheckpoint=0`; every [`EVERY_JOBS`] committed jobs it nudges
//! this thread, which runs a PASSIVE checkpoint on its own connection. A
//! passive checkpoint never blocks the writer, so the checkpoint's copying
//! and fsync no longer add to the latency of a write.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;

/// Committed jobs between checkpoints.
pub const EVERY_JOBS: usize = 256;

pub(super) struct Checkpointer {
    nudge: Option<mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn spawn(path: &Path) -> rusqlite::Result<Checkpointer> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("kdd-db-checkpoint".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                        tracing::warn!("checkpoint failed: {e}");
                    }
                }
            })
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        Ok(Checkpointer { nudge: Some(tx), thread: Some(thread) })
    }

    /// Asks for a checkpoint; requests coalesce while one is running.
    pub(super) fn nudge(&self) {
        if let Some(tx) = &self.nudge {
            let _ = tx.try_send(());
        }
    }

    /// Stops the thread after its current checkpoint.
    pub(super) fn stop(&mut self) {
        self.nudge = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}
