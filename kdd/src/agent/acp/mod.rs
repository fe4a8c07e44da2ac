//! Any agent that speaks the Agent Client Protocol (`backend: "acp"`):
//! Zed's JSON-RPC over stdio, as Claude Code's and Codex's ACP adapters and
//! `gemini --experimental-acp` speak it.
//!
//! - [`protocol`]: the messages (the `agent-client-protocol-schema` types),
//!   and ACP's [`protocol::Acp`] dialect of [`crate::agent::peer`];
//! - `run`: one run as a `session/prompt` turn.
//!
//! [`AcpAgents`] owns the processes: one per member and workspace (and
//! command, arguments and environment), started on the member's first run
//! there after `initialize`, started again after it died, stopped with the
//! daemon. The member's runs reuse it: a new session per run in history
//! mode, the thread's session loaded (`session/load`) in resume mode when
//! the agent can load sessions.

pub mod protocol;
mod run;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(super) use run::execute;

use super::argv::Invocation;
use super::peer::Peer;
use crate::config::AgentDef;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    member: String,
    workspace: PathBuf,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
}

/// A started agent and what it said it can do.
pub struct Agent {
    pub peer: Peer,
    /// `agentCapabilities.loadSession`.
    pub can_load: bool,
}

#[derive(Default)]
pub struct AcpAgents {
    running: tokio::sync::Mutex<HashMap<Key, Arc<Agent>>>,
}

impl AcpAgents {
    /// The process of `agent` in `workspace`, started and initialised when
    /// there is none or the last one died.
    pub async fn get(&self, agent: &AgentDef, workspace: &Path, socket: &Path) -> Result<Arc<Agent>, String> {
        let key = Key {
            member: agent.name.clone(),
            workspace: workspace.to_path_buf(),
            command: agent.command.clone(),
            args: agent.args.clone(),
            env: agent.env.clone(),
        };
        let mut running = self.running.lock().await;
        if let Some(a) = running.get(&key).filter(|a| !a.peer.is_gone()) {
            return Ok(a.clone());
        }
        let mut inv = Invocation {
            program: agent.command.clone(),
            args: agent.args.clone(),
            // Piped: kd writes the requests there.
            stdin: Some(String::new()),
            env: agent.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        inv.env.push(("KD_SOCKET".to_string(), socket.display().to_string()));
        inv.env.push(("KD_MEMBER".to_string(), agent.name.clone()));
        let dialect = Arc::new(protocol::Acp { permissions: agent.permissions });
        let peer = Peer::start(&inv, workspace, dialect)?;
        let answer = peer.request(protocol::initialize).await.map_err(|e| format!("initialize failed: {e}"))?;
        let started = Arc::new(Agent { can_load: protocol::can_load(&answer), peer });
        tracing::info!(pid = started.peer.pid, member = agent.name, "started ACP agent");
        running.insert(key, started.clone());
        Ok(started)
    }

    /// Stops every process (at shutdown, after the runs ended).
    pub async fn stop_all(&self) {
        let stopping: Vec<_> = self.running.lock().await.drain().map(|(_, a)| a).collect();
        futures_util::future::join_all(stopping.iter().map(|a| a.peer.stop(super::peer::EXIT_GRACE))).await;
    }
}
