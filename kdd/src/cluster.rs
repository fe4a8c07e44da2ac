//! This node among the others on a shared registry (PostgreSQL): at start,
//! what this node's previous life left open is resumed ([`crate::resume`]);
//! then, for as long as it serves, it
//!
//! - takes the questions other nodes routed to it (a King's message sent
//!   there to a thread whose workspace is here), woken by the registry the
//!   moment one is written, and by polling every `--cluster-poll-ms` when a
//!   wake-up is lost;
//! - records the runs of a node dead past the lease (`--cluster-lease-ms`)
//!   interrupted and its pending approvals cancelled, and takes over that
//!   node's exchanges whose workspace it has, resuming them as a restart
//!   would.
//!
//! It also stops the runs other nodes ask it to stop (`kd cancel`, Ctrl+C
//! of a `kd ask` there, on a thread whose members run here).
//!
//! A node the others declared dead (its heartbeat stalled past the lease:
//! a suspended laptop) stops: what it drove is driven elsewhere now.
//! On SQLite (one node) only the resume at start runs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::coord::Coord;

/// How the nodes of a shared registry keep track of each other.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a node stays live after its heartbeat, and holds the
    /// exchanges it drives (`cluster.lease`).
    pub lease: Duration,
    /// How often a node looks for work routed to it and for dead nodes,
    /// whatever it was told.
    pub poll: Duration,
}

/// The default lease.
pub const LEASE: Duration = crate::db::pg::nodes::LEASE;
/// The default poll.
pub const POLL: Duration = Duration::from_secs(2);

impl Default for Settings {
    fn default() -> Self {
        Settings { lease: LEASE, poll: POLL }
    }
}

/// Resumes what this node `left` open ([`crate::resume::left`]), then
/// serves the cluster until `shutdown`.
pub fn spawn(co: Arc<Coord>, left: Vec<crate::resume::Left>, settings: Settings, shutdown: CancellationToken) {
    tokio::spawn(async move {
        crate::resume::all(&co, left).await;
        let db = co.council.agents.db.clone();
        let Some(mut cancels) = db.cancels() else { return };
        // Said once per outage of the registry, not at every look.
        let mut failing = false;
        loop {
            if db.lost() {
                tracing::error!("the other nodes declared this one dead: it stops");
                shutdown.cancel();
                return;
            }
            match (pass(&co).await, failing) {
                (Ok(()), true) => {
                    tracing::info!("the registry answers again");
                    failing = false;
                }
                (Err(e), false) => {
                    tracing::warn!("cannot look for work routed here or for dead nodes: {e}; kdd keeps trying");
                    failing = true;
                }
                _ => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = db.work_routed() => {}
                Some(c) = cancels.recv() => cancel(&co, &c),
                () = tokio::time::sleep(settings.poll) => {}
            }
        }
    });
}

/// Stops what another node asked this one to stop on one of its threads.
fn cancel(co: &Arc<Coord>, c: &crate::db::runs::Cancel) {
    if c.turns {
        co.council.exchanges.stop(&c.thread);
    }
    let runs = co.council.agents.runs.list(Some(&c.thread));
    for r in runs
        .iter()
        .filter(|r| c.member.as_ref().is_none_or(|m| &r.member == m) && c.run.as_ref().is_none_or(|id| &r.id == id))
    {
        r.stop(crate::agent::registry::StopReason::Cancelled);
    }
}

/// One look: dead nodes reaped, then the exchanges routed here or left by
/// them taken and driven.
async fn pass(co: &Arc<Coord>) -> Result<(), crate::db::DbError> {
    let db = &co.council.agents.db;
    if co.council.agents.is_closed() {
        return Ok(());
    }
    for (node, runs) in db.reap_dead_nodes().await? {
        tracing::warn!(node, runs, "node {node} stopped answering: its runs in flight are recorded interrupted");
    }
    // Another node's workspace path that exists here is the same workspace
    // (one checkout, or a shared file system).
    let adopt =
        db.orphan_exchanges().await?.into_iter().filter(|(_, ws)| Path::new(ws).is_dir()).map(|(id, _)| id).collect();
    for x in db.claim_exchanges(adopt).await? {
        crate::resume::taken(co, &x).await;
    }
    Ok(())
}
