//! Codex through `codex app-server` (the `codex` backend's default
//! transport; `agents.NAME.transport: "exec"` keeps `codex exec --json`).
//!
//! - [`protocol`]: the messages, as pure functions, and codex's [`protocol::Codex`]
//!   dialect of the JSON-RPC process client ([`crate::agent::peer`]);
//! - [`approval`]: codex's approval requests (commands, file changes), asked
//!   of the approvals service;
//! - `run`: one run as a turn of a codex thread.
//!
//! [`AppServers`] owns the processes: one per workspace, command, arguments
//! and environment (so `CODEX_HOME` and other settings are never mixed),
//! started on the first run that needs it, started again on the next run
//! after it died, and stopped with the daemon. Runs of several threads
//! share a process; codex tells their notifications apart by `threadId`.
//! Each thread is opened with kd's MCP server (`config.mcp_servers.kd`),
//! which codex runs as long as the thread stays loaded: its capability is
//! the thread's, kept across the member's runs, revoked when codex closes
//! the thread (`thread/closed`), when kd unsubscribes a thread it will not
//! use again (a run of history mode), or when the process ends.

pub mod approval;
pub mod protocol;
mod run;

use std::path::Path;
use std::sync::Arc;

pub(super) use run::execute;

use super::grants::Grants;
use super::mcp::Conversations;
use super::outcome::spawn_error;
use super::peer::{self, Peer};
use super::pool::{Pool, Started};
use crate::config::AgentDef;

/// The arguments kd starts `codex app-server` with (before the member's own):
/// no analytics or metrics export, and no plugin lookups over the network.
pub const ARGS: [&str; 7] =
    ["app-server", "-c", "analytics.enabled=false", "-c", "otel.metrics_exporter=none", "--disable", "plugins"];

/// A running app-server and the capabilities of its threads' MCP servers
/// (each loaded thread has its own `kd mcp`, see [`crate::agent::mcp`]).
pub struct AppServer {
    pub peer: Peer,
    pub threads: Arc<Conversations>,
}

impl AsRef<Peer> for AppServer {
    fn as_ref(&self) -> &Peer {
        &self.peer
    }
}

/// The app-server processes of the daemon: one a member and workspace.
/// Never shared by two members, though their configurations are the same:
/// a process acts only as its member ([`crate::identity`]), so one member's
/// tools cannot present another's capability.
#[derive(Default)]
pub struct AppServers {
    running: Pool<(String, Started), AppServer>,
}

impl AppServers {
    /// The process of `agent` in `workspace`, started (and initialised)
    /// when there is none or the last one died. Its threads' capabilities
    /// are `grants`' (revoked when the process goes).
    pub async fn get(
        &self,
        agent: &AgentDef,
        workspace: &Path,
        socket: &Path,
        grants: &Arc<Grants>,
    ) -> Result<Arc<AppServer>, String> {
        let key = (agent.name.clone(), Started::of(agent, workspace));
        self.running
            .get_or_start(key, || async {
                let args = ARGS.iter().map(|a| a.to_string()).chain(agent.args.iter().cloned()).collect();
                let mut inv = peer::invocation(&agent.command, args, agent.run_env(), socket);
                inv.env.push((crate::identity::MEMBER_VAR.to_string(), agent.name.clone()));
                let threads = Arc::new(Conversations::new(grants.clone()));
                let dialect = Arc::new(protocol::Codex::new(threads.clone()));
                let server = Peer::start(&inv, workspace, dialect).map_err(|e| spawn_error(&inv, agent, &e))?;
                let failed = |e: String| format!("cannot start {} app-server: {e}", agent.command);
                server.request(protocol::initialize).await.map_err(|e| failed(format!("initialize failed: {e}")))?;
                server.notify(protocol::initialized()).await.map_err(failed)?;
                tracing::info!(pid = server.pid, workspace = %workspace.display(), "started codex app-server");
                Ok(AppServer { peer: server, threads })
            })
            .await
    }

    /// Stops every process (at shutdown, after the runs ended).
    pub async fn stop_all(&self) {
        self.running.stop_all().await;
    }

    /// Stops the app-servers nothing was asked of for an idle period (see
    /// [`Pool::stop_idle`]); codex keeps their threads on disk, so a later
    /// run resumes them in a new one.
    pub async fn stop_idle(&self) -> usize {
        self.running.stop_idle().await
    }
}
