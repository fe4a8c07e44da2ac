//! kd's MCP server for a run (issue 22): `<kd> mcp`, named `kd`, offered
//! to the agent for the run as each CLI takes a per-run MCP server without
//! asking anyone (the real traffic is in `shared/captures/mcp`). Its
//! environment names the daemon (`KD_SOCKET`), the capability it acts by
//! (`KD_RUN_TOKEN`, see [`super::grants`]) and, for information, the
//! thread, the member and the run. Per backend:
//!
//! - claude: `--mcp-config` JSON and `--allowedTools mcp__kd` (several
//!   `--allowedTools` add up, so the user's own still apply). claude gives
//!   its servers its own environment, where the run's token is: the token
//!   never goes on a command line, which any local user can read;
//! - codex exec: `-c mcp_servers.kd.…` with `default_tools_approval_mode =
//!   "approve"` (under codex's approval `never` a call is refused without
//!   it); codex gives its servers only `HOME`, `LANG`, `PATH` and what the
//!   config names, so the variables are named in `env_vars` and come from
//!   the run's environment;
//! - codex app-server: `config.mcp_servers.kd` (and the thread's shell
//!   environment, `shell_environment_policy.set`) in `thread/start` and
//!   `thread/resume`, given over stdin;
//! - ACP: `mcpServers` in `session/new` and `session/load`, and
//!   claude-code-acp's `_meta.claudeCode.options.allowedTools`;
//! - gemini: a system-defaults settings file of the run's own
//!   (`GEMINI_CLI_SYSTEM_DEFAULTS_PATH`, the lowest layer: the user's
//!   settings and MCP servers still apply), `trust: true` so that no call
//!   asks.
//!
//! A codex thread or an ACP session outlives a run: its server gets a
//! grant of its own ([`Conversations`]), valid while its member runs on
//! its thread.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use super::grants::{Grant, Grants};
use super::process::{RUN_MARKER, TOKEN_VAR};

/// The server's name, as every CLI is given it (its tools are
/// `mcp__kd__send` to claude, `send` in namespace `mcp__kd` to codex).
pub const NAME: &str = "kd";
/// `--allowedTools` value allowing every tool of the server (claude).
pub const CLAUDE_ALLOWED: &str = "mcp__kd";
/// claude's `--permission-prompt-tool`: kd's `approve`.
pub const CLAUDE_PERMISSION_TOOL: &str = "mcp__kd__approve";
/// Set to 1 in the environment of the server claude asks permissions of
/// (`kd mcp` then lists `approve`).
pub const PERMISSION_VAR: &str = "KD_PERMISSION_TOOL";
/// The prefix of the server's tools as claude names them.
pub const CLAUDE_TOOL_PREFIX: &str = "mcp__kd__";
/// The variable naming the daemon's socket.
pub const SOCKET_VAR: &str = "KD_SOCKET";
pub const THREAD_VAR: &str = "KD_THREAD";
pub const MEMBER_VAR: &str = "KD_MEMBER";
/// gemini's system-defaults settings file.
pub const GEMINI_DEFAULTS_VAR: &str = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH";
/// Where gemini's system defaults are when that variable does not say.
pub const GEMINI_DEFAULTS: &str = "/etc/gemini-cli/system-defaults.json";
/// The most of an existing gemini system-defaults file kd reads.
const MAX_GEMINI_DEFAULTS: u64 = 1024 * 1024;
/// Conversations whose capability one long-lived agent process keeps.
const MAX_CONVERSATIONS: usize = 4096;

/// kd's MCP server as a run's agent is to start it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The `kd` binary (started as `<kd> mcp`).
    pub kd: PathBuf,
    /// Its environment, in order: `KD_SOCKET`, `KD_RUN_TOKEN`, `KD_THREAD`,
    /// `KD_MEMBER`, and `KD_RUN` for a run's own server.
    pub env: Vec<(String, String)>,
}

impl Server {
    /// The server acting by `token` for `member` on `thread` (`run`: the
    /// run it serves, when it serves one run only).
    pub fn new(kd: &Path, socket: &Path, token: &str, thread: &str, member: &str, run: Option<&str>) -> Server {
        let mut env = vec![
            (SOCKET_VAR.to_string(), socket.display().to_string()),
            (TOKEN_VAR.to_string(), token.to_string()),
            (THREAD_VAR.to_string(), thread.to_string()),
            (MEMBER_VAR.to_string(), member.to_string()),
        ];
        if let Some(run) = run {
            env.push((RUN_MARKER.to_string(), run.to_string()));
        }
        Server { kd: kd.to_path_buf(), env }
    }

    pub fn command(&self) -> String {
        self.kd.display().to_string()
    }

    pub fn args() -> Vec<String> {
        vec!["mcp".to_string()]
    }

    /// The variables (all but the token, which stays off command lines).
    fn env_without_token(&self) -> serde_json::Map<String, Value> {
        self.env.iter().filter(|(k, _)| k != TOKEN_VAR).map(|(k, v)| (k.clone(), json!(v))).collect()
    }

    fn env_map(&self) -> serde_json::Map<String, Value> {
        self.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect()
    }

    /// `claude -p`'s arguments: the server in `--mcp-config` and its tools
    /// allowed. The token comes from claude's environment (the run's).
    pub fn claude_args(&self) -> Vec<String> {
        let mut env = self.env_without_token();
        env.insert(PERMISSION_VAR.into(), json!("1"));
        let config = json!({"mcpServers": {NAME: {
            "type": "stdio", "command": self.command(), "args": Self::args(), "env": env,
        }}});
        // claude asks kd's `approve` whenever its flags do not allow a tool
        // (issue 33): the approvals policy, else the King, decides.
        vec![
            "--mcp-config".into(),
            config.to_string(),
            "--allowedTools".into(),
            CLAUDE_ALLOWED.into(),
            "--permission-prompt-tool".into(),
            CLAUDE_PERMISSION_TOOL.into(),
        ]
    }

    /// `codex exec`'s arguments: `-c mcp_servers.kd.KEY=VALUE`, values in
    /// TOML (a JSON string or list of strings is one). The variables are
    /// named (`env_vars`): codex passes them from its environment.
    pub fn codex_exec_args(&self) -> Vec<String> {
        let names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        [
            ("command", json!(self.command())),
            ("args", json!(Self::args())),
            ("env_vars", json!(names)),
            ("default_tools_approval_mode", json!("approve")),
        ]
        .into_iter()
        .flat_map(|(key, value)| ["-c".to_string(), format!("mcp_servers.{NAME}.{key}={value}")])
        .collect()
    }

    /// `config` of a codex app-server's `thread/start` and `thread/resume`:
    /// the server (env given in full: codex passes it nothing of its own),
    /// and the thread's shell told where kd is and who it is.
    pub fn codex_config(&self) -> Value {
        let shell: serde_json::Map<String, Value> =
            self.env_map().into_iter().filter(|(k, _)| k != SOCKET_VAR && k != RUN_MARKER).collect();
        json!({
            "mcp_servers": {NAME: {
                "command": self.command(), "args": Self::args(), "env": self.env_map(),
                "default_tools_approval_mode": "approve",
            }},
            "shell_environment_policy": {"set": shell},
        })
    }

    /// `mcpServers` of an ACP `session/new` or `session/load`.
    pub fn acp_servers(&self) -> Value {
        let env: Vec<Value> = self.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
        json!([{"name": NAME, "command": self.command(), "args": Self::args(), "env": env}])
    }

    /// `_meta` of an ACP `session/new` or `session/load`: claude-code-acp
    /// then runs kd's tools without asking (others ignore it).
    pub fn acp_meta() -> Value {
        json!({"claudeCode": {"options": {"allowedTools": [CLAUDE_ALLOWED]}}})
    }

    /// gemini's system-defaults settings with the server added to
    /// `defaults`' own (`mcpServers` of every layer add up; a `kd` of the
    /// user's own settings wins over this one).
    pub fn gemini_settings(&self, mut defaults: serde_json::Map<String, Value>) -> Value {
        let server = json!({
            "command": self.command(), "args": Self::args(), "env": self.env_map(), "trust": true,
        });
        match defaults.get_mut("mcpServers").and_then(Value::as_object_mut) {
            Some(servers) => {
                servers.insert(NAME.to_string(), server);
            }
            None => {
                defaults.insert("mcpServers".into(), json!({NAME: server}));
            }
        }
        Value::Object(defaults)
    }
}

/// The gemini system-defaults file the user's gemini reads (`env`: the
/// member's configured environment, then kdd's), read as JSON: `None`
/// when there is none, an error when it cannot be read (kd does not drop
/// the user's defaults to add its server).
pub fn gemini_defaults(agent_env: &BTreeMap<String, String>) -> Result<serde_json::Map<String, Value>, String> {
    let path = agent_env
        .get(GEMINI_DEFAULTS_VAR)
        .cloned()
        .or_else(|| std::env::var(GEMINI_DEFAULTS_VAR).ok())
        .unwrap_or_else(|| GEMINI_DEFAULTS.to_string());
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(format!("cannot read {path}: {e}")),
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_GEMINI_DEFAULTS + 1), &mut text)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    if text.len() as u64 > MAX_GEMINI_DEFAULTS {
        return Err(format!("{path} is over {MAX_GEMINI_DEFAULTS} bytes"));
    }
    if text.trim().is_empty() {
        return Ok(Default::default());
    }
    match serde_json::from_str(&text) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(format!("{path} is not a JSON object")),
        Err(e) => Err(format!("{path} is not JSON kd can read ({e})")),
    }
}

/// A run's gemini system-defaults file (`GEMINI_CLI_SYSTEM_DEFAULTS_PATH`),
/// in the daemon's own directory (never the workspace), the user's alone,
/// removed when dropped (the run ended).
pub struct SettingsFile {
    pub path: PathBuf,
}

impl SettingsFile {
    /// Writes `settings` to a new file `name` in `dir` (mode 0600; a file
    /// already there, or a symlink, is refused rather than followed).
    pub fn create(dir: &Path, name: &str, settings: &Value) -> std::io::Result<SettingsFile> {
        use std::io::Write;
        let path = dir.join(name);
        let mut f = kd_proto::paths::create_private(&path)?;
        let file = SettingsFile { path };
        f.write_all(settings.to_string().as_bytes())?;
        Ok(file)
    }
}

impl Drop for SettingsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The capabilities of the conversations (codex threads, ACP sessions) of
/// one long-lived agent process: each conversation's MCP server lives as
/// long as the conversation stays loaded, across its member's runs, so it
/// gets a grant of its own (`run: None`) the first time kd opens it in the
/// process, kept for every later run, and revoked when the conversation is
/// closed, forgotten, or the process ends (dropped). Bounded: past
/// [`MAX_CONVERSATIONS`] the oldest is revoked.
pub struct Conversations {
    grants: Arc<Grants>,
    tokens: Mutex<VecDeque<(String, String)>>,
}

impl Conversations {
    pub fn new(grants: Arc<Grants>) -> Conversations {
        Conversations { grants, tokens: Mutex::new(VecDeque::new()) }
    }

    fn tokens(&self) -> MutexGuard<'_, VecDeque<(String, String)>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The token of `conversation`'s server: the one it was given, or a
    /// fresh one for `grant`.
    pub fn token(&self, conversation: &str, grant: Grant) -> Option<String> {
        if let Some((_, t)) = self.tokens().iter().find(|(c, _)| c == conversation) {
            return Some(t.clone());
        }
        let token = self.grants.issue(grant)?;
        self.keep(conversation, token.clone());
        Some(token)
    }

    /// Keeps `token` as `conversation`'s (a conversation whose id the agent
    /// gave only once it was opened with the token).
    pub fn keep(&self, conversation: &str, token: String) {
        let mut tokens = self.tokens();
        if let Some(at) = tokens.iter().position(|(c, _)| c == conversation)
            && let Some((_, old)) = tokens.remove(at)
            && old != token
        {
            self.grants.revoke(&old);
        }
        if tokens.len() >= MAX_CONVERSATIONS
            && let Some((_, oldest)) = tokens.pop_front()
        {
            self.grants.revoke(&oldest);
        }
        tokens.push_back((conversation.to_string(), token));
    }

    /// The conversation is closed (or will never be used again): its token
    /// is revoked.
    pub fn forget(&self, conversation: &str) {
        let mut tokens = self.tokens();
        if let Some(at) = tokens.iter().position(|(c, _)| c == conversation)
            && let Some((_, token)) = tokens.remove(at)
        {
            self.grants.revoke(&token);
        }
    }

    pub fn len(&self) -> usize {
        self.tokens().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Conversations {
    /// The process is gone: so are its conversations' servers.
    fn drop(&mut self) {
        for (_, token) in self.tokens().drain(..) {
            self.grants.revoke(&token);
        }
    }
}

/// Who a conversation's server acts for.
pub fn conversation_grant(thread: &str, member: &str, workspace: &Path) -> Grant {
    Grant { thread: thread.into(), member: member.into(), run: None, workspace: workspace.display().to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(run: Option<&str>) -> Server {
        Server::new(Path::new("/opt/kd/bin/kd"), Path::new("/run/kd/kdd.sock"), "kdcap_t0k", "t1", "claude", run)
    }

    fn env_of(v: &Value) -> Vec<(String, String)> {
        v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).collect()
    }

    /// As in `shared/captures/mcp/claude.jsonl` (the token aside).
    #[test]
    fn claude_gets_the_server_in_mcp_config_and_its_tools_allowed_without_the_token() {
        let args = server(Some("r-1")).claude_args();
        assert_eq!(
            (args[0].as_str(), args[2].as_str(), args[3].as_str()),
            ("--mcp-config", "--allowedTools", "mcp__kd")
        );
        let config: Value = serde_json::from_str(&args[1]).unwrap();
        let kd = &config["mcpServers"]["kd"];
        assert_eq!((kd["type"].as_str(), kd["command"].as_str()), (Some("stdio"), Some("/opt/kd/bin/kd")));
        assert_eq!(kd["args"], json!(["mcp"]));
        let mut env = env_of(&kd["env"]);
        env.sort();
        assert_eq!(
            env,
            [
                ("KD_MEMBER", "claude"),
                ("KD_PERMISSION_TOOL", "1"),
                ("KD_RUN", "r-1"),
                ("KD_SOCKET", "/run/kd/kdd.sock"),
                ("KD_THREAD", "t1")
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        // claude asks kd's approve what its flags do not allow (issue 33).
        assert_eq!(&args[4..], ["--permission-prompt-tool", "mcp__kd__approve"]);
        assert!(!args.iter().any(|a| a.contains("kdcap_")), "no token on a command line: {args:?}");
    }

    /// As in `shared/captures/mcp/codex-exec.jsonl`.
    #[test]
    fn codex_exec_gets_dotted_overrides_approving_kds_tools_and_naming_the_variables() {
        let args = server(Some("r-1")).codex_exec_args();
        assert_eq!(
            args,
            [
                "-c",
                "mcp_servers.kd.command=\"/opt/kd/bin/kd\"",
                "-c",
                "mcp_servers.kd.args=[\"mcp\"]",
                "-c",
                "mcp_servers.kd.env_vars=[\"KD_SOCKET\",\"KD_RUN_TOKEN\",\"KD_THREAD\",\"KD_MEMBER\",\"KD_RUN\"]",
                "-c",
                "mcp_servers.kd.default_tools_approval_mode=\"approve\"",
            ]
        );
        let odd = Server::new(Path::new("/a \"b\"\\c/kd"), Path::new("/s"), "t", "t1", "m", None);
        assert_eq!(odd.codex_exec_args()[1], r#"mcp_servers.kd.command="/a \"b\"\\c/kd""#, "a TOML basic string");
    }

    /// As in `shared/captures/mcp/app-server.jsonl`.
    #[test]
    fn the_app_server_gets_the_server_with_its_whole_environment_and_the_shell_its_identity() {
        let config = server(None).codex_config();
        let kd = &config["mcp_servers"]["kd"];
        assert_eq!(kd["default_tools_approval_mode"], "approve");
        assert_eq!((kd["command"].as_str(), &kd["args"]), (Some("/opt/kd/bin/kd"), &json!(["mcp"])));
        assert_eq!(kd["env"]["KD_RUN_TOKEN"], "kdcap_t0k");
        assert_eq!(kd["env"]["KD_SOCKET"], "/run/kd/kdd.sock");
        assert_eq!(kd["env"].get("KD_RUN"), None, "a thread outlives a run");
        assert_eq!(
            config["shell_environment_policy"]["set"],
            json!({"KD_RUN_TOKEN": "kdcap_t0k", "KD_THREAD": "t1", "KD_MEMBER": "claude"})
        );
    }

    /// As in `shared/captures/mcp/codex-acp.jsonl` and `claude-code-acp.jsonl`.
    #[test]
    fn acp_sessions_get_mcp_servers_with_name_value_pairs() {
        let servers = server(None).acp_servers();
        assert_eq!(servers[0]["name"], "kd");
        assert_eq!(servers[0]["command"], "/opt/kd/bin/kd");
        assert_eq!(servers[0]["env"][1], json!({"name": "KD_RUN_TOKEN", "value": "kdcap_t0k"}));
        assert_eq!(Server::acp_meta(), json!({"claudeCode": {"options": {"allowedTools": ["mcp__kd"]}}}));
    }

    #[test]
    fn gemini_settings_keep_the_users_defaults_and_servers() {
        let mut defaults = serde_json::Map::new();
        defaults.insert("ui".into(), json!({"theme": "x"}));
        defaults.insert("mcpServers".into(), json!({"theirs": {"command": "t"}}));
        let s = server(Some("r-1")).gemini_settings(defaults);
        assert_eq!(s["ui"]["theme"], "x");
        assert_eq!(s["mcpServers"]["theirs"]["command"], "t");
        assert_eq!(s["mcpServers"]["kd"]["trust"], true);
        assert_eq!(s["mcpServers"]["kd"]["env"]["KD_RUN_TOKEN"], "kdcap_t0k");
        let fresh = server(None).gemini_settings(Default::default());
        assert_eq!(fresh["mcpServers"]["kd"]["args"], json!(["mcp"]));
    }

    #[test]
    fn a_settings_file_is_private_new_and_gone_with_its_run() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = SettingsFile::create(dir.path(), "g.json", &json!({"a": 1})).unwrap();
        let path = f.path.clone();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), r#"{"a":1}"#);
        assert!(SettingsFile::create(dir.path(), "g.json", &json!({})).is_err(), "never over a file already there");
        drop(f);
        assert!(!path.exists());
        std::os::unix::fs::symlink("/tmp/elsewhere", dir.path().join("l.json")).unwrap();
        assert!(SettingsFile::create(dir.path(), "l.json", &json!({})).is_err(), "never through a symlink");
    }

    #[test]
    fn a_conversations_token_is_kept_across_runs_and_revoked_with_it() {
        let grants = Arc::new(Grants::default());
        let convs = Conversations::new(grants.clone());
        let g = || conversation_grant("t1", "codex", Path::new("/w"));
        let a = convs.token("thread-a", g()).unwrap();
        assert_eq!(convs.token("thread-a", g()), Some(a.clone()), "the same conversation, the same server");
        let b = convs.token("thread-b", g()).unwrap();
        assert_ne!(a, b);
        assert_eq!(grants.len(), 2);
        convs.forget("thread-a");
        assert_eq!(grants.len(), 1);
        convs.keep("thread-c", grants.issue(g()).unwrap());
        assert_eq!((convs.len(), grants.len()), (2, 2));
        drop(convs);
        assert!(grants.is_empty(), "the process is gone: every token with it");
    }

    #[test]
    fn conversations_are_bounded() {
        let grants = Arc::new(Grants::default());
        let convs = Conversations::new(grants.clone());
        for i in 0..MAX_CONVERSATIONS + 3 {
            convs.token(&format!("c{i}"), conversation_grant("t", "m", Path::new("/w")));
        }
        assert_eq!((convs.len(), grants.len()), (MAX_CONVERSATIONS, MAX_CONVERSATIONS));
    }
}
