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
    /// The run works (F-W1): writable in the member's own worktree and
    /// nowhere else; none: it advises, read-only, in the King's tree.
    pub work: Option<WorkRun>,
    /// `work.*`: claude's tools allowed, what a new worktree is given and
    /// the command run in it.
    pub work_settings: crate::config::Work,
    /// The run asks again for an answer a restart cut (F-J2): in the
    /// backend's session it was given, when known, with what it had
    /// written (the message the run replaces) given back.
    pub resume_from: Option<ResumeFrom>,
}

/// Where a run cut by a restart had got to.
#[derive(Debug, Clone, Default)]
pub struct ResumeFrom {
    /// The backend's own session id the cut run had, if it reported one.
    pub backend_session: Option<String>,
}

impl Spec {
    /// Where the agent runs: the member's worktree for a work run, else
    /// the thread's workspace.
    pub fn cwd(&self) -> &std::path::Path {
        self.work.as_ref().map_or(&self.workspace, |w| &w.dir)
    }
}

/// A run of a member in its worktree of a work thread (F-W1..W6).
#[derive(Debug, Clone)]
pub struct WorkRun {
    /// The worktree: the run's working directory, the only place it may
    /// write.
    pub dir: PathBuf,
    /// The repository's top-level directory (the King's tree), which the
    /// run must not write; git's lock is taken by it.
    pub repo: PathBuf,
    /// `kd/<thread>/<member>`, and the commit it started at.
    pub branch: String,
    pub base: String,
    /// The task: the message of the commits kd makes of the run's changes.
    pub task: String,
    /// The worktree was just made: copy `work.copy` into it and run
    /// `work.setup` before the agent starts.
    pub fresh: bool,
}

impl WorkRun {
    /// A run in the worktree kd recorded, made before (no setup).
    pub fn of(w: &kd_proto::work::Worktree) -> WorkRun {
        WorkRun {
            dir: PathBuf::from(&w.path),
            repo: PathBuf::from(&w.repo),
            branch: w.branch.clone(),
            base: w.base.clone(),
            task: w.task.clone(),
            fresh: false,
        }
    }
}
