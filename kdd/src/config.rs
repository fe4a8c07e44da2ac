//! Council configuration (F-C1): `.kd/config.json` in the workspace, else
//! `$XDG_CONFIG_HOME/kd/config.json`, else built-in defaults.
//!
//! Read again on every send, so edits take effect at once. Every error names
//! the file, the key and the bad value.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use kd_proto::names;
use serde::Deserialize;

/// Seconds a run may take when neither the member nor the council says.
pub const DEFAULT_TIMEOUT_S: u64 = 600;
/// Sequential rounds after the first, by default.
pub const DEFAULT_AUTO_ROUNDS: u32 = 3;

/// The read-only advisory council preamble (the default `council.preamble`).
pub const COUNCIL_PREAMBLE: &str = "You are a member of an advisory council to the King, the human who asks. \
Other AI agents sit on the council and answer the same questions; you see the whole conversation. \
Give your own view, plainly: agree or disagree with the others where it matters, and say why. Be concise. \
This is a read-only consultation: do not modify files, do not run commands that change anything, \
do not commit. Advise only.";

/// The conversational preamble of `kd chat` threads.
pub const CHAT_PREAMBLE: &str = "You are in a group chat with the King, the human who leads, and other AI coding agents. \
Talk as an engineer on the team would: conversational, concise, building on or challenging what the others said. \
Answer in your own voice; do not prefix your reply with your name. \
Do not modify files unless the King asks you to.";

/// Which CLI a member runs, which decides its argv and stream format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Claude,
    Codex,
    Cursor,
    Gemini,
    /// Any argv; the prompt on stdin.
    Command,
}

impl Backend {
    pub const BUILTIN: [Backend; 4] = [Backend::Claude, Backend::Codex, Backend::Cursor, Backend::Gemini];

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Claude => "claude",
            Backend::Codex => "codex",
            Backend::Cursor => "cursor",
            Backend::Gemini => "gemini",
            Backend::Command => "command",
        }
    }

    pub fn parse(s: &str) -> Option<Backend> {
        Some(match s {
            "claude" => Backend::Claude,
            "codex" => Backend::Codex,
            "cursor" => Backend::Cursor,
            "gemini" => Backend::Gemini,
            "command" => Backend::Command,
            _ => return None,
        })
    }

    /// Binaries to look for, in order.
    fn binaries(self) -> &'static [&'static str] {
        match self {
            Backend::Claude => &["claude"],
            Backend::Codex => &["codex"],
            Backend::Cursor => &["agent", "cursor-agent"],
            Backend::Gemini => &["gemini"],
            Backend::Command => &[],
        }
    }

    /// The stream format the backend writes.
    pub fn format(self) -> Format {
        match self {
            Backend::Claude => Format::Claude,
            Backend::Codex => Format::Codex,
            Backend::Cursor => Format::Cursor,
            Backend::Gemini => Format::Gemini,
            Backend::Command => Format::Text,
        }
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
}

/// Broadcast: a parallel first round, then sequential rounds. Sequential:
/// round-robin from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Broadcast,
    Sequential,
}

/// A member's agent, fully resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    pub name: String,
    pub backend: Backend,
    /// The program to run.
    pub command: String,
    /// Extra arguments, placed before the prompt.
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub model: Option<String>,
    pub timeout_s: Option<u64>,
    /// Appended after the council preamble (`prompts.council`).
    pub prompt_council: Option<String>,
    /// Appended after the chat preamble (`prompts.chat`).
    pub prompt_chat: Option<String>,
    /// How stdout is read (for `command`: `format`, default text).
    pub format: Format,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Council {
    pub members: Vec<String>,
    /// True when the members were found on PATH because none are configured.
    pub members_detected: bool,
    pub timeout_s: u64,
    pub auto_rounds: u32,
    pub mode: Mode,
    pub preamble: String,
}

/// The effective configuration of a workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from, if any.
    pub file: Option<PathBuf>,
    pub council: Council,
    pub agents: BTreeMap<String, AgentDef>,
    /// The dotted keys the file sets (the rest are defaults).
    pub set_keys: std::collections::BTreeSet<String>,
}

impl Config {
    pub fn agent(&self, member: &str) -> Option<&AgentDef> {
        self.agents.get(member)
    }

    /// The timeout of a member's runs.
    pub fn timeout_s(&self, member: &str) -> u64 {
        self.agent(member).and_then(|a| a.timeout_s).unwrap_or(self.council.timeout_s)
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
    fn path_dirs(&self) -> Vec<PathBuf> {
        (self.var)("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default()
    }

    fn user_config_file(&self) -> Option<PathBuf> {
        let base = (self.var)("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| (self.var)("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("kd").join("config.json"))
    }
}

/// Loads the configuration for `workspace` with the process environment.
pub fn load(workspace: &Path) -> Result<Config, ConfigError> {
    load_with(workspace, &Env { var: &|k| std::env::var_os(k) })
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
        Some(f) => read(f)?,
        None => RawConfig::default(),
    };
    resolve(raw, file, env)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    council: Option<RawCouncil>,
    agents: Option<BTreeMap<String, RawAgent>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCouncil {
    members: Option<Vec<String>>,
    timeout: Option<u64>,
    auto_rounds: Option<i64>,
    mode: Option<String>,
    preamble: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    backend: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    model: Option<String>,
    timeout: Option<u64>,
    prompts: Option<RawPrompts>,
    format: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrompts {
    council: Option<String>,
    chat: Option<String>,
}

fn read(file: &Path) -> Result<RawConfig, ConfigError> {
    let err =
        |key: &str, message: String| ConfigError { file: Some(file.to_path_buf()), key: key.to_string(), message };
    let text = std::fs::read_to_string(file).map_err(|e| err("(file)", format!("cannot read: {e}")))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." { "(top level)".to_string() } else { path };
        err(&key, e.into_inner().to_string())
    })
}

fn resolve(raw: RawConfig, file: Option<PathBuf>, env: &Env<'_>) -> Result<Config, ConfigError> {
    let err = |key: String, message: String| ConfigError { file: file.clone(), key, message };
    let council = raw.council.unwrap_or_default();
    let mut set_keys = std::collections::BTreeSet::new();
    for (key, set) in [
        ("members", council.members.is_some()),
        ("timeout", council.timeout.is_some()),
        ("auto_rounds", council.auto_rounds.is_some()),
        ("mode", council.mode.is_some()),
        ("preamble", council.preamble.is_some()),
    ] {
        if set {
            set_keys.insert(format!("council.{key}"));
        }
    }

    let mut agents = BTreeMap::new();
    for backend in Backend::BUILTIN {
        agents.insert(backend.as_str().to_string(), builtin(backend, env));
    }
    for (name, a) in raw.agents.unwrap_or_default() {
        let key = |field: &str| format!("agents.{name}.{field}");
        names::check_member_name(&name).map_err(|e| err(format!("agents.{name}"), e.to_string()))?;
        for (field, set) in [
            ("backend", a.backend.is_some()),
            ("command", a.command.is_some()),
            ("args", a.args.is_some()),
            ("env", a.env.is_some()),
            ("model", a.model.is_some()),
            ("timeout", a.timeout.is_some()),
            ("format", a.format.is_some()),
            ("prompts.council", a.prompts.as_ref().is_some_and(|p| p.council.is_some())),
            ("prompts.chat", a.prompts.as_ref().is_some_and(|p| p.chat.is_some())),
        ] {
            if set {
                set_keys.insert(format!("agents.{name}.{field}"));
            }
        }
        let backend = match a.backend.as_deref() {
            Some(b) => Backend::parse(b).ok_or_else(|| {
                err(key("backend"), format!("unknown backend {b:?}; use claude, codex, cursor, gemini or command"))
            })?,
            None => Backend::parse(&name).filter(|b| *b != Backend::Command).ok_or_else(|| {
                err(
                    key("backend"),
                    "missing: say which backend runs this agent (claude, codex, cursor, gemini or command)".into(),
                )
            })?,
        };
        let base = if backend == Backend::Command { None } else { Some(builtin(backend, env)) };
        let command = match (a.command, &base) {
            (Some(c), _) if c.trim().is_empty() => return Err(err(key("command"), "is empty".into())),
            (Some(c), _) => c,
            (None, Some(b)) => b.command.clone(),
            (None, None) => {
                return Err(err(key("command"), "missing: a command backend needs the program to run".into()));
            }
        };
        let format = match (backend, a.format.as_deref()) {
            (Backend::Command, Some(f)) => Format::parse(f).ok_or_else(|| {
                err(key("format"), format!("unknown format {f:?}; use text, claude, codex, cursor or gemini"))
            })?,
            (Backend::Command, None) => Format::Text,
            (_, Some(_)) => {
                return Err(err(key("format"), "only a command backend takes a format".into()));
            }
            (b, None) => b.format(),
        };
        if a.timeout == Some(0) {
            return Err(err(key("timeout"), "must be a positive number of seconds, got 0".into()));
        }
        let prompts = a.prompts.unwrap_or_default();
        agents.insert(
            name.clone(),
            AgentDef {
                name: name.clone(),
                backend,
                command,
                args: a.args.unwrap_or_default(),
                env: a.env.unwrap_or_default(),
                model: a.model.filter(|m| !m.is_empty()),
                timeout_s: a.timeout,
                prompt_council: prompts.council.filter(|p| !p.trim().is_empty()),
                prompt_chat: prompts.chat.filter(|p| !p.trim().is_empty()),
                format,
            },
        );
    }

    let timeout_s = match council.timeout {
        Some(0) => return Err(err("council.timeout".into(), "must be a positive number of seconds, got 0".into())),
        Some(t) => t,
        None => DEFAULT_TIMEOUT_S,
    };
    let auto_rounds = match council.auto_rounds {
        Some(n) if n <= 0 => {
            return Err(err("council.auto_rounds".into(), format!("must be a positive integer, got {n}")));
        }
        Some(n) => u32::try_from(n).map_err(|_| err("council.auto_rounds".into(), format!("{n} is too large")))?,
        None => DEFAULT_AUTO_ROUNDS,
    };
    let mode = match council.mode.as_deref() {
        None | Some("broadcast") => Mode::Broadcast,
        Some("sequential") => Mode::Sequential,
        Some(other) => {
            return Err(err("council.mode".into(), format!("must be \"broadcast\" or \"sequential\", got {other:?}")));
        }
    };
    let preamble = match council.preamble {
        Some(p) if p.trim().is_empty() => {
            return Err(err("council.preamble".into(), "must be a non-empty string".into()));
        }
        Some(p) => p,
        None => COUNCIL_PREAMBLE.to_string(),
    };
    let (members, members_detected) = match council.members {
        Some(m) if m.is_empty() => {
            return Err(err("council.members".into(), "is empty: name at least one member".into()));
        }
        Some(m) => (m, false),
        None => (detect_members(env), true),
    };
    for (i, m) in members.iter().enumerate() {
        names::check_member_name(m).map_err(|e| err("council.members".into(), e.to_string()))?;
        if m == names::KING || m == names::ALL {
            return Err(err("council.members".into(), format!("{m:?} is reserved and cannot be a member")));
        }
        if members[..i].contains(m) {
            return Err(err("council.members".into(), format!("{m:?} is listed twice")));
        }
        if !agents.contains_key(m) {
            return Err(err(
                "council.members".into(),
                format!(
                    "member {m:?} has no agent: add agents.{m} with a backend (claude, codex, cursor, gemini or command)"
                ),
            ));
        }
    }
    Ok(Config {
        file,
        council: Council { members, members_detected, timeout_s, auto_rounds, mode, preamble },
        agents,
        set_keys,
    })
}

impl Config {
    /// Every effective value with where it came from (`kd config show`).
    pub fn view(&self, workspace: &str, env: &Env<'_>) -> kd_proto::types::ConfigView {
        use kd_proto::types::{ConfigEntry, ConfigView};
        use serde_json::{Value, json};
        let file = self.file.as_ref().map(|f| f.display().to_string());
        let source = |key: &str, default: &str| match (&file, self.set_keys.contains(key)) {
            (Some(f), true) => f.clone(),
            _ => default.to_string(),
        };
        let mut entries = Vec::new();
        let mut add = |key: String, value: Value, default: &str| {
            let source = source(&key, default);
            entries.push(ConfigEntry { key, value, source });
        };
        let c = &self.council;
        add("council.members".into(), json!(c.members), if c.members_detected { "found on PATH" } else { "default" });
        add("council.timeout".into(), json!(c.timeout_s), "default");
        add("council.auto_rounds".into(), json!(c.auto_rounds), "default");
        add(
            "council.mode".into(),
            json!(match c.mode {
                Mode::Broadcast => "broadcast",
                Mode::Sequential => "sequential",
            }),
            "default",
        );
        add("council.preamble".into(), json!(c.preamble), "default");
        for (name, a) in self.agents.iter().filter(|(n, _)| {
            c.members.contains(n) || self.set_keys.iter().any(|k| k.starts_with(&format!("agents.{n}.")))
        }) {
            let k = |f: &str| format!("agents.{name}.{f}");
            add(k("backend"), json!(a.backend.as_str()), "default");
            let found = match find_program(&a.command, env) {
                Some(p) => format!("default (found: {})", p.display()),
                None => "default (not found on PATH)".to_string(),
            };
            add(k("command"), json!(a.command), &found);
            add(k("args"), json!(a.args), "default");
            add(k("env"), json!(a.env), "default");
            add(k("model"), json!(a.model), "default");
            add(k("timeout"), json!(a.timeout_s.unwrap_or(c.timeout_s)), "default (council.timeout)");
            add(k("prompts.council"), json!(a.prompt_council), "default");
            add(k("prompts.chat"), json!(a.prompt_chat), "default");
            if a.backend == Backend::Command {
                let f = match a.format {
                    Format::Claude => "claude",
                    Format::Codex => "codex",
                    Format::Cursor => "cursor",
                    Format::Gemini => "gemini",
                    Format::Text => "text",
                };
                add(k("format"), json!(f), "default");
            }
        }
        let notice = if c.members.is_empty() {
            Some("no council members: install claude, codex, cursor (agent) or gemini, or list members in .kd/config.json".into())
        } else if c.members_detected {
            Some(format!(
                "no council is configured, so the agent CLIs found on PATH are the members: {}",
                c.members.join(", ")
            ))
        } else {
            None
        };
        ConfigView { workspace: workspace.to_string(), file, entries, notice }
    }
}

/// The built-in agent of a backend: its binary as found on PATH (the first
/// candidate when none is).
fn builtin(backend: Backend, env: &Env<'_>) -> AgentDef {
    let dirs = env.path_dirs();
    let candidates = backend.binaries();
    let command = candidates
        .iter()
        .find(|b| find_in(&dirs, b).is_some())
        .or(candidates.first())
        .map(|b| b.to_string())
        .unwrap_or_default();
    AgentDef {
        name: backend.as_str().to_string(),
        backend,
        command,
        args: Vec::new(),
        env: BTreeMap::new(),
        model: None,
        timeout_s: None,
        prompt_council: None,
        prompt_chat: None,
        format: backend.format(),
    }
}

/// The built-in backends whose CLI is on PATH, in the usual order.
pub fn detect_members(env: &Env<'_>) -> Vec<String> {
    let dirs = env.path_dirs();
    Backend::BUILTIN
        .iter()
        .filter(|b| b.binaries().iter().any(|bin| find_in(&dirs, bin).is_some()))
        .map(|b| b.as_str().to_string())
        .collect()
}

/// `program` resolved like a shell would: a path as is, a bare name on PATH.
pub fn find_program(program: &str, env: &Env<'_>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    find_in(&env.path_dirs(), program)
}

fn find_in(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("ws/.kd")).unwrap();
            std::fs::create_dir_all(dir.path().join("bin")).unwrap();
            std::fs::create_dir_all(dir.path().join("home/.config/kd")).unwrap();
            Fixture { dir }
        }
        fn ws(&self) -> PathBuf {
            self.dir.path().join("ws")
        }
        fn write(&self, json: &str) -> PathBuf {
            let f = self.ws().join(".kd/config.json");
            std::fs::write(&f, json).unwrap();
            f
        }
        fn install(&self, bin: &str) {
            let p = self.dir.path().join("bin").join(bin);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        fn load(&self) -> Result<Config, ConfigError> {
            let bin = self.dir.path().join("bin");
            let home = self.dir.path().join("home");
            let var = move |k: &str| match k {
                "PATH" => Some(bin.clone().into_os_string()),
                "HOME" => Some(home.clone().into_os_string()),
                _ => None,
            };
            load_with(&self.ws(), &Env { var: &var })
        }
        fn error(&self, json: &str) -> String {
            let f = self.write(json);
            let e = self.load().unwrap_err();
            assert_eq!(e.file.as_deref(), Some(f.as_path()));
            e.to_string()
        }
    }

    #[test]
    fn without_a_file_members_are_the_clis_found_on_path() {
        let f = Fixture::new();
        f.install("codex");
        f.install("cursor-agent");
        let c = f.load().unwrap();
        assert_eq!(c.file, None);
        assert_eq!(c.council.members, vec!["codex", "cursor"]);
        assert!(c.council.members_detected);
        assert_eq!(c.agent("cursor").unwrap().command, "cursor-agent");
        assert_eq!((c.council.timeout_s, c.council.auto_rounds, c.council.mode), (600, 3, Mode::Broadcast));
        assert_eq!(c.council.preamble, COUNCIL_PREAMBLE);
        let none = Fixture::new().load().unwrap();
        assert!(none.council.members.is_empty());
    }

    #[test]
    fn a_full_file_is_read() {
        let f = Fixture::new();
        f.write(
            r#"{"council": {"members": ["claude", "bot"], "timeout": 30, "auto_rounds": 2, "mode": "sequential", "preamble": "Be brief."},
                "agents": {"claude": {"model": "opus", "args": ["--x"], "timeout": 5, "prompts": {"council": "You review."}},
                           "bot": {"backend": "command", "command": "/bin/echo", "format": "claude", "env": {"A": "1"}}}}"#,
        );
        let c = f.load().unwrap();
        assert_eq!(c.council.members, vec!["claude", "bot"]);
        assert_eq!((c.council.timeout_s, c.council.auto_rounds, c.council.mode), (30, 2, Mode::Sequential));
        let claude = c.agent("claude").unwrap();
        assert_eq!(
            (claude.model.as_deref(), claude.timeout_s, claude.command.as_str()),
            (Some("opus"), Some(5), "claude")
        );
        assert_eq!(claude.prompt_council.as_deref(), Some("You review."));
        let bot = c.agent("bot").unwrap();
        assert_eq!((bot.backend, bot.format, bot.command.as_str()), (Backend::Command, Format::Claude, "/bin/echo"));
        assert_eq!(c.timeout_s("claude"), 5);
        assert_eq!(c.timeout_s("bot"), 30);
    }

    #[test]
    fn the_workspace_file_wins_over_the_user_file() {
        let f = Fixture::new();
        let user = f.dir.path().join("home/.config/kd/config.json");
        std::fs::write(&user, r#"{"council": {"members": ["codex"]}}"#).unwrap();
        assert_eq!(f.load().unwrap().file, Some(user));
        let own = f.write(r#"{"council": {"members": ["claude"]}}"#);
        let c = f.load().unwrap();
        assert_eq!((c.file, c.council.members), (Some(own), vec!["claude".to_string()]));
    }

    #[test]
    fn every_bad_value_names_file_key_and_value() {
        let f = Fixture::new();
        let cases: &[(&str, &[&str])] = &[
            (r#"{"council": {"auto_rounds": 0}}"#, &["council.auto_rounds", "positive", "0"]),
            (r#"{"council": {"auto_rounds": -2}}"#, &["council.auto_rounds", "-2"]),
            (r#"{"council": {"mode": "parallel"}}"#, &["council.mode", "\"parallel\""]),
            (r#"{"council": {"preamble": "  "}}"#, &["council.preamble", "non-empty"]),
            (r#"{"council": {"colour": 1}}"#, &["council", "unknown field `colour`"]),
            (r#"{"councel": {}}"#, &["unknown field `councel`"]),
            (r#"{"council": {"members": ["ghost"]}}"#, &["council.members", "\"ghost\"", "agents.ghost"]),
            (r#"{"council": {"members": []}}"#, &["council.members", "empty"]),
            (r#"{"council": {"members": ["claude", "claude"]}}"#, &["council.members", "twice"]),
            (r#"{"council": {"timeout": "long"}}"#, &["council.timeout", "invalid type"]),
            (r#"{"agents": {"x": {"backend": "gpt"}}}"#, &["agents.x.backend", "\"gpt\""]),
            (r#"{"agents": {"x": {"command": "x"}}}"#, &["agents.x.backend", "missing"]),
            (r#"{"agents": {"x": {"backend": "command"}}}"#, &["agents.x.command", "missing"]),
            (r#"{"agents": {"claude": {"format": "text"}}}"#, &["agents.claude.format"]),
            (r#"{"agents": {"claude": {"timeout": 0}}}"#, &["agents.claude.timeout"]),
            (r#"{"agents": {"Bad Name": {"backend": "claude"}}}"#, &["agents.Bad Name", "member name"]),
            (r#"{"agents": {"claude": {"wat": true}}}"#, &["agents.claude", "unknown field `wat`"]),
            ("{not json", &["key must be a string"]),
        ];
        for (json, expect) in cases {
            let e = f.error(json);
            assert!(e.contains(".kd/config.json: "), "{e}");
            for part in *expect {
                assert!(e.contains(part), "{json}: {e:?} lacks {part:?}");
            }
        }
    }

    #[test]
    fn programs_are_found_on_path_or_by_path() {
        let f = Fixture::new();
        f.install("gemini");
        let bin = f.dir.path().join("bin");
        let var = move |k: &str| (k == "PATH").then(|| bin.clone().into_os_string());
        let env = Env { var: &var };
        assert_eq!(find_program("gemini", &env), Some(f.dir.path().join("bin/gemini")));
        assert_eq!(find_program("claude", &env), None);
        assert_eq!(find_program("/bin/sh", &env), Some(PathBuf::from("/bin/sh")));
    }
}
