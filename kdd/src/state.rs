//! What every RPC handler shares: the registry, the event hub, the shutdown
//! signal and a few facts about this daemon.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::agent::registry::Registry;
use crate::council::exchange::Exchanges;
use crate::db::Db;
use crate::hub::Hub;

pub struct Daemon {
    pub db: Db,
    pub hub: Arc<Hub>,
    /// Cancelled once to stop the daemon (signal or `daemon.shutdown`).
    pub shutdown: CancellationToken,
    pub started: Instant,
    pub socket: PathBuf,
    /// One permit per open connection; see [`crate::server`].
    pub connections: Arc<Semaphore>,
    pub max_connections: usize,
    /// Source of [`ClientId`]s.
    pub next_client_id: AtomicU64,
    /// Runs in flight.
    pub runs: Registry,
    /// The council exchange of each thread.
    pub exchanges: Exchanges,
    /// How long a signalled agent has before SIGKILL.
    pub kill_grace: Duration,
}

/// Identifies the connection a call arrived on (a request extension):
/// "the runs started by the calling client" are the runs of this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId(pub u64);

impl Daemon {
    pub fn new(db: Db, hub: Arc<Hub>, socket: PathBuf, max_connections: usize) -> Daemon {
        Daemon {
            db,
            hub,
            shutdown: CancellationToken::new(),
            started: Instant::now(),
            socket,
            connections: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            next_client_id: AtomicU64::new(1),
            runs: Registry::default(),
            exchanges: Exchanges::default(),
            kill_grace: Duration::from_secs(5),
        }
    }

    pub fn open_connections(&self) -> u64 {
        self.max_connections.saturating_sub(self.connections.available_permits()) as u64
    }
}
