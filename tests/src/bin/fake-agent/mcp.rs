//! The fakes' MCP client, as the real CLIs are in `tests/fixtures/mcp` (the
//! captures of claude 2.1.197, codex 0.169.0, codex-acp 0.16.0 and
//! claude-code-acp 0.16.2 given a per-run server named `kd`). Each fake
//! reads the server's configuration where its CLI takes it:
//!
//! | fake | where | the server's environment |
//! |---|---|---|
//! | claude | `--mcp-config` (JSON or a file), `--allowedTools` | the fake's own, plus the config's `env` |
//! | codex exec | `-c mcp_servers.kd.KEY=VALUE` | `HOME`, `LANG`, `PATH`, the config's `env`, and the fake's variables named in `env_vars` |
//! | app-server | `thread/start`/`thread/resume` `params.config.mcp_servers.kd` | as codex exec |
//! | ACP (`FAKE_ACP=codex-acp`) | `session/new`/`session/load` `mcpServers` | as codex exec, from the session's `env` |
//! | ACP (claude-code-acp, the default) | `mcpServers`, `_meta.claudeCode.options.allowedTools` | the fake's own, plus the session's `env` |
//! | gemini | `mcpServers.kd` of the file `GEMINI_CLI_SYSTEM_DEFAULTS_PATH` names | the fake's own, plus the config's `env` |
//!
//! With `FAKE_MCP_CALL=TOOL ARGUMENTS` (e.g. `send {"to":["codex"],"body":"hi"}`;
//! the JSON may be left out for `{}`) the fake starts the server as its CLI
//! does (`command`, `args`, that environment, the workspace as cwd), says
//! `initialize` with its CLI's own `protocolVersion`, `capabilities` and
//! `clientInfo`, then `notifications/initialized`, `tools/list` and
//! `tools/call`, and answers `Tool said: TEXT` with the result's text. It
//! refuses the call as its CLI does when kd did not allow it: claude
//! without `--allowedTools mcp__kd` (the refusal is the tool's result);
//! codex under approval `never` without `default_tools_approval_mode =
//! "approve"` (or the tool's `approval_mode`) and without the tool
//! annotations that need none ("MCP tool call requires approval, but
//! approval policy is never", nothing sent to the server). The claude fake
//! defers the tool behind `ToolSearch` as Claude Code 2.1.332 does unless
//! told not to ([`claude_defers`]): it then first prints the model's
//! `ToolSearch` call and its result, as claude does. `FAKE_RECORD`
//! gets `{"mcp": …}`: what was configured, the tools listed, whether the
//! tool was deferred (claude), the call and its result.
//!
//! `fake-agent mcp` is a stand-in for `kd mcp` (installed as a `kd` beside
//! a test's `kdd`): the tools `send`, `inbox`, `ack`, `claim`, `thread` and
//! `search` without annotations, each answering with JSON of what the server
//! was started with (`env`: its `KD_*` variables, `inherited`: whether the
//! agent's own `FAKE_NAME` reached it, `pid`, `client`: the `clientInfo`
//! name) and what kdd says its token stands for (`whoami`: `member.whoami`
//! over `KD_SOCKET`).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::env;

/// How long the fake waits for the server to answer (a guard, not a clock
/// a test depends on).
const ANSWER: Duration = Duration::from_secs(30);
/// The refusal of a call under codex's approval `never` (app-server.unapproved).
pub const NEEDS_APPROVAL: &str = "MCP tool call requires approval, but approval policy is never";

/// A server as a CLI was given it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Given {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// codex: variables passed on from its own environment.
    pub env_vars: Vec<String>,
    /// codex: `default_tools_approval_mode`.
    pub approval: Option<String>,
    /// codex: `tools.NAME.approval_mode`.
    pub tool_approval: BTreeMap<String, String>,
    /// gemini: `trust`.
    pub trust: bool,
    /// claude: `alwaysLoad` (its tools never deferred behind ToolSearch).
    pub always_load: Option<bool>,
}

impl Given {
    pub fn record(&self) -> Value {
        json!({"command": self.command, "args": self.args, "env": self.env.iter().cloned().collect::<BTreeMap<_, _>>(),
               "env_vars": self.env_vars, "approval": self.approval, "trust": self.trust, "always_load": self.always_load})
    }

    fn from_json(kd: &Value) -> Option<Given> {
        let strings = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        let env = match kd.get("env") {
            // ACP: [{name, value}]
            Some(Value::Array(pairs)) => pairs
                .iter()
                .filter_map(|p| Some((p.get("name")?.as_str()?.to_string(), p.get("value")?.as_str()?.to_string())))
                .collect(),
            Some(Value::Object(map)) => {
                map.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect()
            }
            _ => Vec::new(),
        };
        let tool_approval = kd
            .get("tools")
            .and_then(Value::as_object)
            .map(|t| {
                t.iter()
                    .filter_map(|(name, v)| Some((name.clone(), v.get("approval_mode")?.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Some(Given {
            command: kd.get("command")?.as_str()?.to_string(),
            args: strings(kd.get("args")),
            env,
            env_vars: strings(kd.get("env_vars")),
            approval: kd.get("default_tools_approval_mode").and_then(Value::as_str).map(str::to_string),
            tool_approval,
            trust: kd.get("trust").and_then(Value::as_bool).unwrap_or(false),
            always_load: kd.get("alwaysLoad").and_then(Value::as_bool),
        })
    }
}

/// claude: `--mcp-config JSON|FILE` (its `mcpServers.kd`) and every
/// `--allowedTools` value (comma- or space-separated lists, repeatable).
pub fn from_claude_args(args: &[String]) -> (Option<Given>, Vec<String>) {
    let mut given = None;
    let mut allowed = Vec::new();
    for w in args.windows(2) {
        match w[0].as_str() {
            "--mcp-config" => {
                let text = if w[1].trim_start().starts_with('{') {
                    w[1].clone()
                } else {
                    std::fs::read_to_string(&w[1]).unwrap_or_default()
                };
                let config: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                given = config.pointer("/mcpServers/kd").and_then(Given::from_json).or(given);
            }
            "--allowedTools" | "--allowed-tools" => {
                allowed.extend(split_tools(&w[1]));
            }
            _ => {}
        }
    }
    (given, allowed)
}

/// A list of claude tools as `--allowedTools` takes it: split at commas
/// and spaces outside parentheses (`Bash(cargo test:*)` is one).
fn split_tools(list: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | ' ' if depth <= 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// codex exec: the `-c mcp_servers.kd.KEY=VALUE` overrides, each VALUE
/// read as codex reads it: TOML (here, the JSON subset kd writes), else a
/// string.
pub fn from_codex_args(args: &[String]) -> Option<Given> {
    let mut kd = serde_json::Map::new();
    for w in args.windows(2) {
        if w[0] != "-c" && w[0] != "--config" {
            continue;
        }
        let Some((key, value)) = w[1].split_once('=') else { continue };
        let Some(path) = key.trim().strip_prefix("mcp_servers.kd.") else { continue };
        let value = serde_json::from_str(value.trim()).unwrap_or_else(|_| json!(value.trim()));
        // `env.NAME`, `tools.NAME.approval_mode`: nested tables.
        let parts: Vec<&str> = path.split('.').collect();
        set_path(&mut kd, &parts, value);
    }
    Given::from_json(&Value::Object(kd))
}

fn set_path(map: &mut serde_json::Map<String, Value>, parts: &[&str], value: Value) {
    match parts {
        [] => {}
        [last] => {
            map.insert(last.to_string(), value);
        }
        [first, rest @ ..] => {
            let next = map.entry(first.to_string()).or_insert_with(|| json!({}));
            if !next.is_object() {
                *next = json!({});
            }
            if let Some(obj) = next.as_object_mut() {
                set_path(obj, rest, value);
            }
        }
    }
}

/// codex app-server: `params.config.mcp_servers.kd` of `thread/start` or
/// `thread/resume` (a dotted key `mcp_servers.kd` too, as codex takes it).
pub fn from_codex_config(config: &Value) -> Option<Given> {
    config.pointer("/mcp_servers/kd").or_else(|| config.get("mcp_servers.kd")).and_then(Given::from_json)
}

/// ACP: the `kd` entry of `params.mcpServers`.
pub fn from_acp(params: &Value) -> Option<Given> {
    params.get("mcpServers")?.as_array()?.iter().find(|s| s["name"] == "kd").and_then(Given::from_json)
}

/// gemini: `mcpServers.kd` of its system-defaults file.
pub fn from_gemini() -> Option<Given> {
    let path = std::env::var("GEMINI_CLI_SYSTEM_DEFAULTS_PATH").ok()?;
    let settings: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    settings.pointer("/mcpServers/kd").and_then(Given::from_json)
}

/// The CLI a fake plays, for what it sends and how it starts servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    Claude,
    /// codex 0.169.0: exec and app-server.
    Codex,
    /// codex-acp 0.16.0 (codex 0.137.0 inside).
    CodexAcp,
    /// claude-code-acp 0.16.2 (Claude Code 2.1.197 inside).
    ClaudeCodeAcp,
    Gemini,
}

impl Cli {
    fn initialize(self) -> Value {
        match self {
            Cli::Claude | Cli::ClaudeCodeAcp => json!({
                "protocolVersion": "2025-11-25", "capabilities": {"roots": {}, "elicitation": {}},
                "clientInfo": {"name": "claude-code", "title": "Claude Code", "version": "2.1.197",
                               "description": "Anthropic's agentic coding tool", "websiteUrl": "https://claude.com/claude-code"}}),
            Cli::Codex => json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"experimental": {"codex/auth-change": {}}, "elicitation": {"form": {}, "url": {}}},
                "clientInfo": {"name": "codex-mcp-client", "title": "Codex", "version": "0.169.0"}}),
            Cli::CodexAcp => json!({
                "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "codex-mcp-client", "title": "Codex", "version": "0.137.0"}}),
            // Not captured: the MCP SDK's client as gemini-cli names it.
            Cli::Gemini => json!({
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "gemini-cli-mcp-client-kd", "version": "0.0.1"}}),
        }
    }

    /// Whether the server gets only `HOME`, `LANG`, `PATH` of the CLI's
    /// environment (codex), or all of it.
    fn clears_env(self) -> bool {
        matches!(self, Cli::Codex | Cli::CodexAcp)
    }

    fn call_meta(self, n: u64) -> Value {
        match self {
            Cli::Claude | Cli::ClaudeCodeAcp => json!({"claudecode/toolUseId": "toolu_fake0001", "progressToken": n}),
            _ => json!({"progressToken": n - 1, "threadId": "fake-thread"}),
        }
    }
}

/// `FAKE_MCP_CALL`: the tool and its arguments.
pub fn wanted() -> Option<(String, Value)> {
    let call = env("FAKE_MCP_CALL")?;
    let (tool, args) = call.trim().split_once(' ').unwrap_or((call.trim(), "{}"));
    Some((tool.to_string(), serde_json::from_str(args).unwrap_or(json!({}))))
}

/// Whether the server is to be started: for a call (`FAKE_MCP_CALL`), or,
/// with `FAKE_MCP_START`, as the real CLIs start it whether or not a tool
/// is called (the benches' start time).
pub fn starts() -> bool {
    wanted().is_some() || env("FAKE_MCP_START").is_some()
}

/// [`start`], noted in `FAKE_RECORD` under `FAKE_MCP_START`:
/// `{"mcp": {"started": [tools]}}` or `{"mcp": {"error": …}}`.
pub async fn start_noted(given: &Given, cli: Cli) -> Result<Session, String> {
    let started = start(given, cli).await;
    if env("FAKE_MCP_START").is_some() {
        record(match &started {
            Ok(s) => json!({"started": s.tools.iter().filter_map(|t| t["name"].as_str()).collect::<Vec<_>>()}),
            Err(e) => json!({"error": e}),
        });
    }
    started
}

/// A started server, after `initialize` and `tools/list`.
pub struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    cli: Cli,
    next: u64,
    pub server_info: Value,
    pub tools: Vec<Value>,
}

/// Starts the server as `cli` does and lists its tools.
pub async fn start(given: &Given, cli: Cli) -> Result<Session, String> {
    let mut cmd = tokio::process::Command::new(&given.command);
    cmd.args(&given.args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
    if cli.clears_env() {
        cmd.env_clear();
        for k in ["HOME", "LANG", "PATH"].iter().map(|s| s.to_string()).chain(given.env_vars.iter().cloned()) {
            if let Ok(v) = std::env::var(&k) {
                cmd.env(&k, v);
            }
        }
    }
    cmd.envs(given.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if cli.clears_env() {
        // Its own group, as codex starts it.
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start {}: {e}", given.command))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("no stdio".into());
    };
    let mut s = Session {
        child,
        stdin,
        lines: BufReader::new(stdout).lines(),
        cli,
        next: 0,
        server_info: Value::Null,
        tools: vec![],
    };
    let init = s.request("initialize", Some(cli.initialize())).await?;
    s.server_info = init;
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await?;
    let params = (cli != Cli::Claude && cli != Cli::ClaudeCodeAcp).then(|| json!({"_meta": {"progressToken": 0}}));
    let listed = s.request("tools/list", params).await?;
    s.tools = listed.get("tools").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(s)
}

impl Session {
    async fn send(&mut self, msg: Value) -> Result<(), String> {
        let line = format!("{msg}\n");
        self.stdin.write_all(line.as_bytes()).await.map_err(|e| format!("the server's stdin: {e}"))
    }

    async fn request(&mut self, method: &str, params: Option<Value>) -> Result<Value, String> {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(p) = params {
            msg["params"] = p;
        }
        self.send(msg).await?;
        let answer = tokio::time::timeout(ANSWER, async {
            loop {
                match self.lines.next_line().await {
                    Ok(Some(line)) => {
                        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                        if v.get("id") == Some(&json!(id)) && v.get("method").is_none() {
                            return Ok(v);
                        }
                    }
                    Ok(None) => return Err(format!("the server ended before it answered {method}")),
                    Err(e) => return Err(format!("reading the server: {e}")),
                }
            }
        })
        .await
        .map_err(|_| format!("the server did not answer {method}"))??;
        match answer.get("error") {
            Some(e) => Err(format!("{method}: {}", e.get("message").and_then(Value::as_str).unwrap_or("error"))),
            None => Ok(answer.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    pub fn tool(&self, name: &str) -> Option<&Value> {
        self.tools.iter().find(|t| t["name"] == name)
    }

    /// `tools/call`: the result's text and whether it is an error.
    pub async fn call(&mut self, name: &str, arguments: &Value) -> Result<(String, bool), String> {
        let meta = self.cli.call_meta(self.next);
        let result =
            self.request("tools/call", Some(json!({"name": name, "arguments": arguments, "_meta": meta}))).await?;
        let text = result
            .get("content")
            .and_then(Value::as_array)
            .map(|c| c.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default();
        Ok((text, result.get("isError").and_then(Value::as_bool).unwrap_or(false)))
    }

    /// Ends the server as the CLIs do: stdin closed, then a signal.
    pub async fn close(mut self) {
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

/// Whether codex runs `tool` without asking (approval `never`): approved by
/// the server's or the tool's approval mode, or annotated as needing none.
pub fn codex_approves(given: &Given, tool: &Value) -> bool {
    let name = tool["name"].as_str().unwrap_or_default();
    let mode = given.tool_approval.get(name).or(given.approval.as_ref());
    let hint = |k: &str| tool.pointer(&format!("/annotations/{k}")).and_then(Value::as_bool);
    mode.is_some_and(|m| m == "approve")
        || hint("readOnlyHint") == Some(true)
        || (hint("readOnlyHint") == Some(false)
            && hint("destructiveHint") == Some(false)
            && hint("openWorldHint") == Some(false))
}

/// Whether claude defers `tool` of kd's server behind `ToolSearch`, as
/// Claude Code 2.1.332 does by default (shared/captures/approvals,
/// `claude-332.deferral-*`): not when tool search is off
/// (`ENABLE_TOOL_SEARCH=false`), nor when the server's entry says
/// `alwaysLoad: true` (unless the tool's `_meta` says
/// `anthropic/alwaysLoad: false`), nor when the tool's `_meta` says
/// `anthropic/alwaysLoad: true`. The model then first calls `ToolSearch`
/// (`select:mcp__kd__TOOL`) to load it.
pub fn claude_defers(given: &Given, tool: &Value) -> bool {
    let search = env("ENABLE_TOOL_SEARCH").map(|v| v.to_ascii_lowercase());
    // `auto:100`: a threshold no tool list reaches.
    if matches!(search.as_deref(), Some("false" | "auto:100")) {
        return false;
    }
    let meta = tool.pointer("/_meta/anthropic~1alwaysLoad").and_then(Value::as_bool);
    match given.always_load {
        Some(true) => meta == Some(false),
        Some(false) => true,
        None => meta != Some(true),
    }
}

/// Whether claude runs a tool of kd's server without asking in `-p`.
pub fn claude_allows(allowed: &[String], tool: &str) -> bool {
    allowed.iter().any(|a| a == "mcp__kd" || a == "mcp__kd__*" || *a == format!("mcp__kd__{tool}"))
}

/// What a call came to, for the answer and the record.
pub struct Outcome {
    pub text: String,
    pub record: Value,
}

/// Starts the server, calls `tool` with `arguments` unless `refusal` (what
/// the CLI says instead: nothing reaches the server's `tools/call`), closes
/// it. `refusal` is asked once the tools are listed.
pub async fn call_once(
    given: &Given,
    cli: Cli,
    tool: &str,
    arguments: &Value,
    refusal: impl FnOnce(&Session) -> Option<String>,
) -> Outcome {
    match start_noted(given, cli).await {
        Ok(mut s) => {
            let out = call_on(&mut s, tool, arguments, refusal).await;
            s.close().await;
            out
        }
        Err(e) => Outcome {
            text: format!("(kd's MCP server failed: {e})"),
            record: json!({"given": given.record(), "error": e}),
        },
    }
}

/// [`call_once`] on a server already started (kept by a codex thread).
pub async fn call_on(
    s: &mut Session,
    tool: &str,
    arguments: &Value,
    refusal: impl FnOnce(&Session) -> Option<String>,
) -> Outcome {
    let tools: Vec<&str> = s.tools.iter().filter_map(|t| t["name"].as_str()).collect();
    let base = json!({"server": s.server_info.get("serverInfo"), "instructions": s.server_info.get("instructions"),
                      "tools": tools, "call": {"tool": tool, "arguments": arguments}});
    if s.tool(tool).is_none() {
        let text = format!("(no tool {tool} in server kd)");
        return Outcome { record: with(base, json!({"error": text})), text };
    }
    if let Some(refused) = refusal(s) {
        return Outcome { record: with(base, json!({"refused": refused})), text: refused };
    }
    match s.call(tool, arguments).await {
        Ok((text, is_error)) => Outcome { record: with(base, json!({"result": text, "is_error": is_error})), text },
        Err(e) => Outcome { record: with(base, json!({"error": e})), text: format!("(the call failed: {e})") },
    }
}

fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    base
}

/// `fake-agent mcp`: the stand-in for `kd mcp` (see the module's doc).
pub async fn stand_in() -> i32 {
    let mut lines = super::stdin_lines();
    let out = |v: Value| {
        use std::io::Write;
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{v}");
        let _ = o.flush();
    };
    let mut client = Value::Null;
    while let Some(line) = lines.recv().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = msg.get("id").cloned() else { continue };
        let result = match msg["method"].as_str().unwrap_or_default() {
            "initialize" => {
                client = msg.pointer("/params/clientInfo/name").cloned().unwrap_or_default();
                json!({
                "protocolVersion": msg.pointer("/params/protocolVersion").cloned().unwrap_or(json!("2025-06-18")),
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "kd", "version": "stand-in"},
                "instructions": "kd (stand-in): talk to the other council members."})
            }
            "tools/list" => {
                let tools: Vec<Value> = ["send", "inbox", "ack", "claim", "thread", "search"]
                    .iter()
                    .map(|t| json!({"name": t, "description": format!("kd's {t} (stand-in)"), "inputSchema": {"type": "object"}}))
                    .collect();
                json!({"tools": tools})
            }
            "tools/call" => {
                let said = json!({"tool": msg.pointer("/params/name"), "arguments": msg.pointer("/params/arguments"),
                                  "env": kd_env(), "inherited": std::env::var("FAKE_NAME").is_ok(), "whoami": whoami(),
                                  "pid": std::process::id(), "client": client});
                json!({"content": [{"type": "text", "text": said.to_string()}], "isError": false})
            }
            other => {
                out(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no {other}")}}));
                continue;
            }
        };
        out(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
    0
}

/// This process's `KD_*` variables.
pub fn kd_env() -> BTreeMap<String, String> {
    std::env::vars().filter(|(k, _)| k.starts_with("KD_")).collect()
}

/// What kdd says the token in `KD_RUN_TOKEN` stands for (`member.whoami`
/// over `KD_SOCKET`): its result, or its error.
fn whoami() -> Value {
    let (Ok(socket), Ok(token)) = (std::env::var("KD_SOCKET"), std::env::var("KD_RUN_TOKEN")) else {
        return json!({"error": "no KD_SOCKET or KD_RUN_TOKEN"});
    };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "member.whoami", "params": {"token": token}});
    match kd_tests::http_post(std::path::Path::new(&socket), &body.to_string()) {
        Ok((_, text)) => {
            let v: Value = serde_json::from_str(&text).unwrap_or(json!({"error": text}));
            v.get("result").cloned().unwrap_or_else(|| json!({"error": v.get("error")}))
        }
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// Appends `{"mcp": record}` and what the fake was given to `FAKE_RECORD`.
pub fn record(record: Value) {
    super::record_line(json!({"mcp": record}));
}
