//! Running agent CLIs (F-A1..F-A3).
//!
//! - [`argv`]: each backend's command line;
//! - [`process`]: spawning in a process group that dies with the daemon, signals;
//! - [`lines`]: bounded line reading of stdout;
//! - [`parse`]: per-backend `parse_line` and the [`parse::Transcript`] that folds lines;
//! - [`registry`]: the runs in flight, in memory;
//! - [`supervisor`]: one run from spawn to message.

pub mod argv;
pub mod lines;
pub mod parse;
pub mod process;
pub mod registry;
pub mod supervisor;

use std::sync::Arc;
use std::time::Duration;

use registry::StopReason;

use crate::db::{Db, DbResult};
use crate::state::Daemon;

/// At start: makes sure no agent of runs left in flight by a daemon that
/// died is still running (a pid is only killed if it still names the same
/// process), then records those runs as interrupted. Returns how many.
pub async fn recover(db: &Db) -> DbResult<usize> {
    for orphan in db.orphan_runs().await? {
        if let Some(pid) = orphan.pid
            && process::kill_if_same(pid, orphan.pid_start)
        {
            tracing::warn!(run = orphan.id, pid, "killed an agent left by the previous daemon");
        }
    }
    db.recover_runs().await
}

/// Stops every run (recorded as interrupted) and waits until their messages
/// are written, for at most the kill grace period plus a margin.
pub async fn stop_all(d: &Arc<Daemon>) -> usize {
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
    runs.len()
}
