//! Any agent that speaks the Agent Client Protocol (`backend: "acp"`):
//! Zed's JSON-RPC over stdio, as Claude Code's and Codex's ACP adapters and
//! `gemini --experimental-acp` speak it.
//!
//! - [`protocol`]: the messages (the `agent-client-protocol-schema` types),
//!   and ACP's [`protocol::Acp`] dialect of [`crate::agent::peer`];
//! - [`permission`]: the answer to a permission request by the member's
//!   policy, on the kind the tool call announced;
//! - [`approval`]: such a request asked of the approvals service instead,
//!   that answer its fallback;
//! - `run`: one run as a `session/prompt` turn.
//!
//! [`AcpAgents`] owns the processes: one per member and workspace (and
//! command, arguments and environment), started on the member's first run
//! there after `initialize`, started again after it died, stopped with the
//! daemon. The member's runs reuse it: a new session per run in history
//! mode, the thread's session loaded (`session/load`) in resume mode when
//! the agent can load sessions.

pub mod approval;
pub mod permission;
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

/// One process per member, and per what it is started from.
type Key = (String, Started);

/// A started agent, what it said it can do, and the capabilities of its
/// sessions' MCP servers.
pub struct Agent {
    pub peer: Peer,
    /// `agentCapabilities.loadSession`.
    pub can_load: bool,
    pub sessions: Conversations,
}

impl AsRef<Peer> for Agent {
    fn as_ref(&self) -> &Peer {
        &self.peer
    }
}

#[derive(Default)]
pub struct AcpAgents {
    running: Pool<Key, Agent>,
}

impl AcpAgents {
    /// The process of `agent` in `workspace`, started and initialised when
    /// there is none or the last one died; in `worktree`, the member's,
    /// where alone it may write, when given.
    pub async fn get(
        &self,
        agent: &AgentDef,
        workspace: &Path,
        socket: &Path,
        grants: &Arc<Grants>,
        worktree: Option<&Path>,
    ) -> Result<Arc<Agent>, String> {
        // An agent working in a worktree runs there, confined to it: never
        // the process of the member's advising runs. It serves the workspace.
        let (name, cwd) = match worktree {
            Some(dir) => (format!("{}\0work", agent.name), dir),
            None => (agent.name.clone(), workspace),
        };
        let key = (name, Started::of(agent, cwd));
        self.running
            .get_or_start(key, || async {
                let mut inv = peer::invocation(&agent.command, agent.args.clone(), agent.run_env(), socket);
                inv.env.push((crate::identity::MEMBER_VAR.to_string(), agent.name.clone()));
                // At work: the worktree's own temporary directory.
                if let Some(tmp) = worktree.and_then(|w| super::work::make_tmp_dir_of(w).ok()) {
                    inv.env.push(("TMPDIR".to_string(), tmp.display().to_string()));
                }
                let kd_tools = agent.mcp && agent.backend.takes_mcp();
                let confine = worktree.map(Path::to_path_buf);
                let dialect = Arc::new(protocol::Acp::new(agent.permissions, kd_tools).confined(confine));
                let peer = Peer::start_for(&inv, cwd, workspace, dialect).map_err(|e| spawn_error(&inv, agent, &e))?;
                let answer = peer
                    .request(protocol::initialize)
                    .await
                    .map_err(|e| format!("cannot start {}: initialize failed: {e}", agent.command))?;
                tracing::info!(pid = peer.pid, member = agent.name, "started ACP agent");
                let sessions = Conversations::new(grants.clone());
                Ok(Agent { can_load: protocol::can_load(&answer), peer, sessions })
            })
            .await
    }

    /// Stops every process (at shutdown, after the runs ended).
    pub async fn stop_all(&self) {
        self.running.stop_all().await;
    }
}
