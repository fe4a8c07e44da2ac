//! Council configuration (F-C1): `.kd/config.json` in the workspace, else
//! `$XDG_CONFIG_HOME/kd/config.json`, else built-in defaults — but for
//! `notify` and `approvals`, which are the user's file's and the
//! workspace's together.
//!
//! Read again on every send, so edits take effect at once. Every error names
//! the file, the key and the bad value. A Kingdom `.kd/config.json` is read
//! as it is (F-B5): its keys are mapped where kd has the meaning and
//! otherwise ignored with a notice; keys in neither schema are refused.
//!
//! - [`raw`]: the file's schema, kd's keys and Kingdom's, as serde types;
//! - [`resolve`]: from the file to a [`Config`]: defaults, validation, the
//!   Kingdom mapping; [`resolver`], what it keeps as it goes, below the
//!   sections it calls ([`coordination`], [`lifecycle`]);
//! - [`programs`]: the agent CLIs on `PATH`;
//! - `codex`: the arguments `codex app-server` takes (others are warned of);
//! - [`view`]: every effective value with where it came from (`config.get`);
//! - [`notify`]: the King's notification sinks, the user's and the
//!   workspace's sections added; [`approvals`], the policy of members'
//!   permissions, the same way; [`web`], where kd web serves (the user's
//!   file only).

pub mod approvals;
mod codex;
pub mod coordination;
pub mod lifecycle;
pub mod notify;
mod programs;
pub mod raw;
mod resolve;
mod resolver;
mod view;
pub mod web;
pub mod work;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use kd_proto::types::Style;

pub use coordination::{COORDINATION_HINT, Coordination, Delivery, MCP_HINT};
pub use lifecycle::Lifecycle;
pub use programs::{detect_members, find_kd, find_program, not_found};
pub use work::Work;

/// Seconds a run may take when neither the member nor the council says.
pub const DEFAULT_TIMEOUT_S: u64 = 600;
/// Longest answer a run keeps (`council.max_answer_bytes`): 16 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 16 * 1024 * 1024;
/// The most `council.max_answer_bytes` may be: 256 MiB.
pub const MAX_ANSWER_BYTES: u64 = 256 * 1024 * 1024;
/// Sequential rounds after the first, by default.
pub const DEFAULT_AUTO_ROUNDS: u32 = 3;

/// The read-only advisory council preamble (the default `council.preamble`).
pub const COUNCIL_PREAMBLE: &str = "You are a member of an advisory council to the King, the human who asks. \
Other AI agents sit on the council and answer the same questions; you see the whole conversation. \
Give your own view, plainly: agree or disagree with the others where it matters, and say why. Be concise. \
This is a read-only consultation: do not modify files, do not run commands that change anything, \
do not commit. Advise only.";

/// The council preamble when Kingdom's `council.writable` is true.
pub const WRITABLE_COUNCIL_PREAMBLE: &str = "You are a member of a council to the King, the human who asks. \
Other AI agents sit on the council and answer the same questions; you see the whole conversation. \
Give your own view, plainly: agree or disagree with the others where it matters, and say why. Be concise. \
You may edit files and run commands when the King asks you to act.";

/// The conversational preamble of `kd chat` threads (the default
/// `council.chat_preamble`).
pub const CHAT_PREAMBLE: &str = "You are in a group chat with the King, the human who leads, and other AI coding agents. \
Talk as an engineer on the team would: conversational, concise, building on or challenging what the others said. \
Answer in your own voice; do not prefix your reply with your name. \
Do not modify files unless the King asks you to.";

/// The chat preamble when Kingdom's `council.writable` is true.
pub const WRITABLE_CHAT_PREAMBLE: &str = "You are in a group chat with the King, the human who leads, and other AI coding agents. \
Talk as an engineer on the team would: conversational, concise, building on or challenging what the others said. \
Answer in your own voice; do not prefix your reply with your name. \
You may edit files and run commands when the King asks you to act.";

/// Which CLI a member runs, which decides its argv and stream format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Claude,
    Codex,
    Cursor,
    Gemini,
    /// Any agent that speaks the Agent Client Protocol on its stdio.
    Acp,
    /// Any argv; the prompt on stdin.
    Command,
}

impl Backend {
    pub const BUILTIN: [Backend; 4] = [Backend::Claude, Backend::Codex, Backend::Cursor, Backend::Gemini];

    /// Every backend, as a message lists them.
    pub const NAMES: &str = "claude, codex, cursor, gemini, acp or command";

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Claude => "claude",
            Backend::Codex => "codex",
            Backend::Cursor => "cursor",
            Backend::Gemini => "gemini",
            Backend::Acp => "acp",
            Backend::Command => "command",
        }
    }

    /// A backend name as kd writes it, or as Kingdom does (`claude_code`).
    pub fn parse(s: &str) -> Option<Backend> {
        Some(match s {
            "claude" | "claude_code" => Backend::Claude,
            "codex" => Backend::Codex,
            "cursor" => Backend::Cursor,
            "gemini" => Backend::Gemini,
            "acp" => Backend::Acp,
            "command" => Backend::Command,
            _ => return None,
        })
    }

    /// Whether a run can go on in a backend session an earlier run opened
    /// (`--resume`, `exec resume`, `thread/resume`, `session/load`).
    pub fn resumes(self) -> bool {
        !matches!(self, Backend::Command)
    }

    /// Whether kd can give the backend's runs its MCP server (`kd mcp`)
    /// without writing into the workspace or the user's own files: not
    /// cursor (its MCP servers come only from `.cursor/mcp.json` files) nor
    /// a plain command.
    pub fn takes_mcp(self) -> bool {
        !matches!(self, Backend::Cursor | Backend::Command)
    }

    /// The stream format the backend writes.
    pub fn format(self) -> Format {
        match self {
            Backend::Claude => Format::Claude,
            Backend::Codex => Format::Codex,
            Backend::Cursor => Format::Cursor,
            Backend::Gemini => Format::Gemini,
            // ACP is read by its own client (agent::acp), not line by line.
            Backend::Acp | Backend::Command => Format::Text,
        }
    }
}

/// How kd talks to a codex member (`agents.NAME.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// A process per run: the backend's print mode (`codex exec --json`).
    #[default]
    Exec,
    /// One long-lived `codex app-server` shared by runs, which streams
    /// token by token (the codex default).
    AppServer,
}

impl Transport {
    pub fn parse(s: &str) -> Option<Transport> {
        match s {
            "exec" => Some(Transport::Exec),
            "app-server" | "app_server" | "appserver" => Some(Transport::AppServer),
            _ => None,
        }
    }

    /// The default of a backend: app-server for codex, a process per run otherwise.
    pub fn default_for(backend: Backend) -> Transport {
        if backend == Backend::Codex { Transport::AppServer } else { Transport::Exec }
    }
}

/// How an agent's stdout is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Claude,
    Codex,
    Cursor,
    Gemini,
    /// Plain text: every chunk is a delta.
    Text,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "claude" => Format::Claude,
            "codex" => Format::Codex,
            "cursor" => Format::Cursor,
            "gemini" => Format::Gemini,
            "text" => Format::Text,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Claude => "claude",
            Format::Codex => "codex",
            Format::Cursor => "cursor",
            Format::Gemini => "gemini",
            Format::Text => "text",
        }
    }
}

/// Broadcast: a parallel first round, then sequential rounds. Sequential:
/// round-robin from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Broadcast,
    Sequential,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Broadcast => "broadcast",
            Mode::Sequential => "sequential",
        }
    }
}

/// A member's agent, fully resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    pub name: String,
    pub backend: Backend,
    /// The program to run.
    pub command: String,
    /// Extra arguments, placed before the prompt (`args`, then Kingdom's
    /// `extra_flags`, after the flags `effort` maps to).
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub model: Option<String>,
    pub timeout_s: Option<u64>,
    /// Appended after the council preamble: `prompts.council` (the agent's,
    /// else the top-level one), then Kingdom's always-additive `prompt`.
    pub prompt_council: Option<String>,
    /// Appended after the chat preamble: `prompts.chat` when set, else the
    /// council prompt; then `prompt`.
    pub prompt_chat: Option<String>,
    /// How stdout is read (for `command`: `format`, default text).
    pub format: Format,
    /// `color`, as written (validated).
    pub color: Option<String>,
    /// How messages addressed to it are delivered (`delivery`).
    pub delivery: Delivery,
    /// How kd talks to it (`transport`; codex only).
    pub transport: Transport,
    /// What a codex app-server member may do (`sandbox`, `approval`).
    pub policy: CodexPolicy,
    /// How an ACP member's permission requests are answered (`permissions`).
    pub permissions: Permissions,
    /// Whether its runs get kd's MCP server (`mcp`, else `council.mcp`).
    pub mcp: bool,
    /// The `PATH` it is found on and run with: the asking client's (see
    /// [`load_for`]); none: kdd's own. The member's own `env` may still
    /// set another.
    pub path: Option<String>,
}

/// The answer kd gives an ACP agent that asks permission for a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Permissions {
    /// Reads, searches and fetches are allowed; edits, deletes, moves and
    /// commands are rejected (the council advises).
    #[default]
    ReadOnly,
    /// Everything the agent asks is allowed.
    Allow,
    /// Everything is rejected.
    Deny,
}

impl Permissions {
    pub fn parse(s: &str) -> Option<Permissions> {
        match s {
            "read-only" => Some(Permissions::ReadOnly),
            "allow" => Some(Permissions::Allow),
            "deny" => Some(Permissions::Deny),
            _ => None,
        }
    }
}

/// The sandbox and approval policy of a codex member's threads. Council
/// members read: `read-only`, and codex never stops to ask (a request it
/// still sends is declined).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CodexPolicy {
    pub sandbox: String,
    pub approval: String,
}

impl Default for CodexPolicy {
    fn default() -> CodexPolicy {
        CodexPolicy { sandbox: "read-only".into(), approval: "never".into() }
    }
}

impl AgentDef {
    /// The environment the agent runs with besides kdd's own: the `PATH`
    /// it was found on, then its `env` (which wins).
    pub fn run_env(&self) -> Vec<(String, String)> {
        let path = self.path.iter().map(|p| ("PATH".to_string(), p.clone()));
        path.chain(self.env.iter().map(|(k, v)| (k.clone(), v.clone()))).collect()
    }

    /// The agent's own prompt for a style of conversation.
    pub fn prompt(&self, style: Style) -> Option<&str> {
        match style {
            Style::Council => self.prompt_council.as_deref(),
            Style::Chat => self.prompt_chat.as_deref(),
        }
    }
}

/// How an exchange proceeds: its mode and the rounds after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rounds {
    pub mode: Mode,
    pub auto_rounds: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Council {
    pub members: Vec<String>,
    /// True when the members were found on PATH because none are configured.
    pub members_detected: bool,
    pub timeout_s: u64,
    /// Longest answer a run keeps; past it the run ends as an error.
    pub max_answer_bytes: u64,
    /// Rounds of `kd ask` (council style).
    pub ask: Rounds,
    /// Rounds of `kd chat` (chat style).
    pub chat: Rounds,
    pub preamble: String,
    pub chat_preamble: String,
    /// The preamble of a run in a member's worktree (`{dir}`, `{branch}`).
    pub work_preamble: String,
    /// What one exchange may cost (US dollars, as the agents report it)
    /// before its pending auto-turns stop.
    pub budget_usd: Option<f64>,
    /// Whether members get kd's MCP server by default (`council.mcp`).
    pub mcp: bool,
    /// How old an exchange cut by a restart may be and still be resumed
    /// (`council.resume_within`; zero: never).
    pub resume_within: std::time::Duration,
    /// Runs a step may have cut by restarts before it is left failed
    /// (`council.resume_attempts`).
    pub resume_attempts: u32,
}

/// `council.resume_within` by default: a day.
pub const DEFAULT_RESUME_WITHIN: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// `council.resume_attempts` by default.
pub const DEFAULT_RESUME_ATTEMPTS: u32 = 2;

/// The effective configuration of a workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from, if any.
    pub file: Option<PathBuf>,
    pub council: Council,
    /// `council.max_hops` and `council.coordination_hint`.
    pub coordination: Coordination,
    /// `lifecycle.idle_after` and `lifecycle.archive_after`.
    pub lifecycle: Lifecycle,
    /// `work.*`: members' work in their worktrees.
    pub work: Work,
    /// `approvals.*`: what members' CLIs may do without asking the King.
    pub approvals: approvals::Approvals,
    pub agents: BTreeMap<String, AgentDef>,
    /// The dotted keys the file sets (the rest are defaults).
    pub set_keys: BTreeSet<String>,
    /// kd keys whose value came from another key of the file (Kingdom's),
    /// and that key, e.g. `council.auto_rounds` ← `council.ask.auto_messages`.
    pub mapped_from: BTreeMap<String, String>,
    /// One line for each key of the file kd reads but does not use.
    pub notices: Vec<String>,
    /// Values kd takes that will not work, e.g. an argument `codex
    /// app-server` refuses (the member cannot start).
    pub warnings: Vec<String>,
    /// The `PATH` its agents were found on and run with: the asking
    /// client's; none: kdd's own ([`load_for`]).
    pub path: Option<String>,
}

impl Config {
    pub fn agent(&self, member: &str) -> Option<&AgentDef> {
        self.agents.get(member)
    }

    /// The timeout of a member's runs.
    pub fn timeout_s(&self, member: &str) -> u64 {
        self.agent(member).and_then(|a| a.timeout_s).unwrap_or(self.council.timeout_s)
    }

    /// The preamble of a style, followed by the coordination hint unless
    /// `council.coordination_hint` is false: the one naming kd's MCP tools
    /// for a member whose run has them (`tools`), else the shell commands.
    pub fn preamble(&self, style: Style, tools: bool) -> String {
        let p = match style {
            Style::Council => &self.council.preamble,
            Style::Chat => &self.council.chat_preamble,
        };
        let hint = if tools { MCP_HINT } else { COORDINATION_HINT };
        if self.coordination.hint { format!("{p}\n\n{hint}") } else { p.clone() }
    }

    /// The preamble of a run in `member`'s worktree `dir` on `branch`,
    /// followed by the coordination hint as [`Config::preamble`] does.
    pub fn work_preamble(&self, dir: &Path, branch: &str, tools: bool) -> String {
        let p = work::work_preamble(&self.council.work_preamble, dir, branch);
        let hint = if tools { MCP_HINT } else { COORDINATION_HINT };
        if self.coordination.hint { format!("{p}\n\n{hint}") } else { p }
    }

    /// How `member`'s messages are delivered (defaults for a non-member).
    pub fn delivery(&self, member: &str) -> Delivery {
        self.agent(member).map(|a| a.delivery.clone()).unwrap_or_default()
    }

    pub fn rounds(&self, style: Style) -> Rounds {
        match style {
            Style::Council => self.council.ask,
            Style::Chat => self.council.chat,
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{key}: {message}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
pub struct ConfigError {
    pub file: Option<PathBuf>,
    /// The dotted key, e.g. `council.auto_rounds`.
    pub key: String,
    pub message: String,
}

/// What the loader reads from the environment.
pub struct Env<'a> {
    pub var: &'a dyn Fn(&str) -> Option<OsString>,
}

impl Env<'_> {
    /// The process environment.
    pub fn process() -> Env<'static> {
        Env { var: &|k| std::env::var_os(k) }
    }

    /// The `PATH` the environment has, as a string (a `PATH` that is not
    /// UTF-8 is read as none).
    pub fn path(&self) -> Option<String> {
        (self.var)("PATH").and_then(|p| p.into_string().ok())
    }

    fn path_dirs(&self) -> Vec<PathBuf> {
        (self.var)("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default()
    }

    pub(crate) fn user_config_file(&self) -> Option<PathBuf> {
        let base = (self.var)("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| (self.var)("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("kd").join("config.json"))
    }
}

/// Loads the configuration for `workspace` with the process environment.
pub fn load(workspace: &Path) -> Result<Config, ConfigError> {
    load_with(workspace, &Env::process())
}

/// Loads the configuration for `workspace` as the client whose shell's
/// `PATH` is `path` would run it: its agents found on that `PATH` and run
/// with it (and kdd's own environment otherwise); with none, kdd's own
/// `PATH`.
pub fn load_for(workspace: &Path, path: Option<&str>) -> Result<Config, ConfigError> {
    let Some(path) = path else { return load(workspace) };
    let var = |k: &str| if k == "PATH" { Some(OsString::from(path)) } else { std::env::var_os(k) };
    let mut config = load_with(workspace, &Env { var: &var })?;
    config.path = Some(path.to_string());
    for a in config.agents.values_mut() {
        a.path = Some(path.to_string());
    }
    Ok(config)
}

/// Which file applies to `workspace`: its own, else the user's.
pub fn file_for(workspace: &Path, env: &Env<'_>) -> Option<PathBuf> {
    let own = workspace.join(".kd").join("config.json");
    if own.is_file() {
        return Some(own);
    }
    env.user_config_file().filter(|f| f.is_file())
}

pub fn load_with(workspace: &Path, env: &Env<'_>) -> Result<Config, ConfigError> {
    let file = file_for(workspace, env);
    let raw = match &file {
        Some(f) => raw::read(f)?,
        None => raw::RawConfig::default(),
    };
    let mut config = resolve::resolve(raw, file, env)?;
    // `approvals` is the user's and the workspace's together.
    let user = env.user_config_file().filter(|f| f.is_file());
    let own = std::mem::take(&mut config.approvals);
    config.approvals = approvals::with_users(own, config.file.as_deref(), user.as_deref(), &config.agents)?;
    log_once(&config);
    Ok(config)
}

/// Says each notice and warning of a configuration in the log, once while
/// the daemon runs (the file is read on every question): a key ignored, a
/// codex member run through `codex exec` or given fewer arguments than
/// written. At most [`LOGGED`] lines are remembered; past them, no more
/// are logged.
fn log_once(config: &Config) {
    use std::sync::{LazyLock, Mutex};
    static SAID: LazyLock<Mutex<BTreeSet<String>>> = LazyLock::new(Default::default);
    let file =
        config.file.as_ref().map_or_else(|| "the default configuration".to_string(), |f| f.display().to_string());
    let Ok(mut said) = SAID.lock() else { return };
    for (line, warn) in config.notices.iter().map(|n| (n, false)).chain(config.warnings.iter().map(|w| (w, true))) {
        let line = format!("{file}: {line}");
        if said.len() >= LOGGED || said.contains(&line) {
            continue;
        }
        if warn {
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
        said.insert(line);
    }
}

/// The most configuration lines [`log_once`] remembers.
const LOGGED: usize = 1024;
