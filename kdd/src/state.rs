//! What every RPC handler shares: the registry, the event hub, the runner
//! of agents, the council, the shutdown signal and a few facts about this
//! daemon. The top of the layering: it knows every subsystem, none of them
//! knows it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::agent::Runner;
use crate::connections::Connections;
use crate::coord::Coord;
use crate::council::Council;
use crate::db::Db;
use crate::hub::Hub;
use crate::lifecycle::Archived;
use crate::limits::Limits;
use crate::notify::Notifier;

pub struct Daemon {
    pub db: Arc<Db>,
    pub hub: Arc<Hub>,
    /// Cancelled once to stop the daemon (signal or `daemon.shutdown`).
    pub shutdown: CancellationToken,
    /// Set by `daemon.shutdown` with `resume: false` (`kd daemon stop
    /// --no-resume`): the open exchanges are stopped for good at shutdown
    /// instead of resumed at the next start.
    pub no_resume: AtomicBool,
    /// Cancelled once the runs are stopped and recorded at shutdown:
    /// subscriptions deliver what is left and end, connections close.
    pub close: CancellationToken,
    /// The open connections, which can be cut.
    pub open: Arc<Connections>,
    /// How long a send may wait on a client before it is disconnected.
    pub client_timeout: Duration,
    pub started: Instant,
    pub socket: PathBuf,
    /// One permit per open connection; see [`crate::server`].
    pub connections: Arc<Semaphore>,
    /// Permits of the connections kept for plain HTTP calls.
    pub reserved: Arc<Semaphore>,
    pub reserved_connections: usize,
    pub max_connections: usize,
    /// Largest request read, in bytes (said in `daemon.hello`).
    pub max_request_bytes: u32,
    /// Bytes of messages one page of `thread.messages` holds at most: a
    /// quarter of the response limit, which leaves room for JSON escapes.
    pub page_bytes: usize,
    /// Source of [`crate::client::ClientId`]s.
    pub next_client_id: AtomicU64,
    /// Runs agents; holds the runs in flight.
    pub agents: Arc<Runner>,
    /// Council exchanges.
    pub council: Arc<Council>,
    /// The coordination layer: routing, completions, emergencies, races.
    pub coord: Arc<Coord>,
    /// Tells the King when kd needs them (started by [`crate::run`]).
    pub notify: Arc<Notifier>,
    /// The checks in members' worktrees.
    pub checks: Arc<crate::work::check::Checks>,
    /// kd web, installed by [`crate::run`] once the method table exists.
    pub web: std::sync::OnceLock<Arc<dyn WebControl>>,
}

/// What `web.serve` asks.
#[derive(Debug, Clone, Default)]
pub struct WebServe {
    pub listen: Option<String>,
    pub insecure_http: bool,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    /// More names the page is reached by (a DNS name, a reverse proxy's).
    pub names: Vec<String>,
}

/// kd web as the `web.*` methods drive it: served by `crate::web`, above
/// the rpc layer, hence behind this trait.
#[jsonrpsee::core::async_trait]
pub trait WebControl: Send + Sync {
    /// Serves (started if it is not) and makes a new pairing token.
    async fn serve(&self, req: WebServe) -> Result<kd_proto::web::WebServing, jsonrpsee::types::ErrorObjectOwned>;
    /// Stops serving; whether it served.
    async fn stop(&self) -> bool;
    fn sessions(&self) -> Vec<kd_proto::web::WebSession>;
    /// Ends the session `id` (every one with `None`): how many ended.
    fn revoke(&self, id: Option<&str>) -> usize;
}

impl Daemon {
    pub fn new(
        db: Db,
        hub: Arc<Hub>,
        socket: PathBuf,
        limits: &Limits,
        kill_grace: Duration,
        archived: Archived,
    ) -> Daemon {
        let db = Arc::new(db);
        let agents = Arc::new(Runner::new(db.clone(), hub.clone(), kill_grace, socket.clone()));
        let max_connections = limits.max_connections;
        let council = Arc::new(Council::new(agents.clone(), archived));
        let notify = Arc::new(Notifier::new(db.clone()));
        let checks = crate::work::check::Checks::new(&council);
        crate::work::after::install(&council, checks.clone());
        Daemon {
            db,
            hub,
            shutdown: CancellationToken::new(),
            no_resume: AtomicBool::new(false),
            close: CancellationToken::new(),
            open: Arc::new(Connections::default()),
            client_timeout: limits.client_timeout,
            started: Instant::now(),
            socket,
            connections: Arc::new(Semaphore::new(max_connections)),
            reserved: Arc::new(Semaphore::new(limits.reserved_connections)),
            reserved_connections: limits.reserved_connections,
            max_connections,
            max_request_bytes: limits.max_request_bytes,
            page_bytes: limits.max_response_bytes as usize / 4,
            next_client_id: AtomicU64::new(1),
            council: council.clone(),
            coord: Arc::new(Coord::new(council)),
            notify,
            checks,
            agents,
            web: std::sync::OnceLock::new(),
        }
    }

    pub fn open_connections(&self) -> u64 {
        let ordinary = self.max_connections.saturating_sub(self.connections.available_permits());
        let kept = self.reserved_connections.saturating_sub(self.reserved.available_permits());
        (ordinary + kept) as u64
    }
}
