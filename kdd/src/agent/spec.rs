//! What a run is asked to do: the member, the prompt's parts, the
//! workspace, the clocks and bounds. The council builds it; the supervisor
//! and every transport read it.

use std::path::PathBuf;
use std::time::Duration;

use kd_proto::types::{ContextMode, Style};

use crate::config::AgentDef;

/// What a run needs besides the run itself.
#[derive(Debug, Clone)]
pub struct Spec {
    pub agent: AgentDef,
    pub preamble: String,
    pub style: Style,
    pub context: ContextMode,
    pub workspace: PathBuf,
    pub timeout: Duration,
    /// Longest answer kept (`council.max_answer_bytes`).
    pub max_answer_bytes: u64,
    /// The thread's members: an answer naming them at the start of a line
    /// is addressed to them (a hand-off).
    pub members: Vec<String>,
    /// Given instead of the thread's history (see [`crate::council::Launch`]).
    pub prompt: Option<String>,
    /// The `kd` that serves the run's MCP server (`kd mcp`, see
    /// [`super::mcp`]); none: the run goes without kd's tools.
    pub kd: Option<PathBuf>,
}
