//! This node among the others on a shared registry (PostgreSQL): at start,
//! what this node's previous life left open is resumed ([`crate::resume`]);
//! then, for as long as it serves, it
//!
//! - takes the questions other nodes routed to it (a King's message sent
//!   there to a thread whose workspace is here), woken by the registry the
//!   moment one is written, and by polling every `--cluster-poll-ms` when a
//!   wake-up is lost;
//! - records the runs of a node dead past the lease (`--cluster-lease-ms`)
//!   interrupted, and takes over that node's exchanges whose workspace it
//!   has, resuming them as a restart would.
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

/// Resumes what this node left open, then serves the cluster until
/// `shutdown`.
pub fn spawn(co: Arc<Coord>, settings: Settings, shutdown: CancellationToken) {
    tokio::spawn(async move {
        crate::resume::all(&co).await;
        let db = co.council.agents.db.clone();
        if !db.is_shared() {
            return;
        }
        loop {
            if db.lost() {
                tracing::error!("the other nodes declared this one dead: it stops");
                shutdown.cancel();
                return;
            }
            pass(&co).await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = db.work_routed() => {}
                () = tokio::time::sleep(settings.poll) => {}
            }
        }
    });
}

/// One look: dead nodes reaped, then the exchanges routed here or left by
/// them taken and driven.
async fn pass(co: &Arc<Coord>) {
    let db = &co.council.agents.db;
    if co.council.agents.is_closed() {
        return;
    }
    match db.reap_dead_nodes().await {
        Ok(reaped) => {
            for (node, runs) in reaped {
                tracing::warn!(
                    node,
                    runs,
                    "node {node} stopped answering: its runs in flight are recorded interrupted"
                );
            }
        }
        Err(e) => tracing::warn!("cannot look for dead nodes: {e}"),
    }
    let adopt = match db.orphan_exchanges().await {
        // Another node's workspace path that exists here is the same
        // workspace (one checkout, or a shared file system).
        Ok(orphans) => orphans.into_iter().filter(|(_, ws)| Path::new(ws).is_dir()).map(|(id, _)| id).collect(),
        Err(e) => {
            tracing::warn!("cannot look for exchanges left by dead nodes: {e}");
            Vec::new()
        }
    };
    let taken = match db.claim_exchanges(adopt).await {
        Ok(taken) => taken,
        Err(e) => {
            tracing::warn!("cannot take the exchanges routed to this node: {e}");
            return;
        }
    };
    for x in taken {
        crate::resume::taken(co, &x).await;
    }
}
