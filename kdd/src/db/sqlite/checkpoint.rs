//! WAL checkpoints off the writer's path. The writer connection runs with
//! `wal_autocheckpoint=0`; every [`EVERY_JOBS`] committed jobs, or as soon
//! as the WAL holds [`NUDGE_PAGES`] pages (a few large writes, such as a
//! long answer being saved), it nudges this thread, which runs a PASSIVE
//! checkpoint on its own connection. A passive checkpoint never blocks the
//! writer, so the checkpoint's copying and fsync no longer add to the
//! latency of a write. `journal_size_limit` then truncates the WAL when it
//! restarts, so one large answer does not leave a large file behind.

use std::cell::Cell;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;

/// Committed jobs between checkpoints.
pub const EVERY_JOBS: usize = 256;
/// WAL pages (4 KiB each by default: 8 MiB) that call for a checkpoint.
pub const NUDGE_PAGES: i32 = 2048;
/// What the WAL is truncated to when it restarts after a checkpoint.
pub const JOURNAL_SIZE_LIMIT: i64 = 16 * 1024 * 1024;

thread_local! {
    /// Pages in the WAL after the last commit on this thread's connection.
    static WAL_PAGES: Cell<i32> = const { Cell::new(0) };
}

/// Has SQLite report the WAL's size after every commit on `conn` (the
/// writer's), for [`wal_pages`] on the same thread.
pub(super) fn watch_wal(conn: &Connection) {
    fn note(_: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
        WAL_PAGES.with(|p| p.set(pages));
        Ok(())
    }
    conn.wal_hook(Some(note));
}

/// Pages in the WAL after the last commit on this thread.
pub(super) fn wal_pages() -> i32 {
    WAL_PAGES.with(Cell::get)
}

pub(super) struct Checkpointer {
    nudge: Option<mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    pub(super) fn spawn(path: &Path) -> rusqlite::Result<Checkpointer> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
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
