//! A fake agent CLI for the end-to-end tests and benches. It speaks the
//! stream format of the backend whose command line it is given (or
//! `FAKE_FORMAT`), and is steered by environment variables:
//!
//! | variable | effect |
//! |---|---|
//! | `FAKE_FORMAT` | claude, codex, cursor, gemini or text (default: from the argv) |
//! | `FAKE_NAME` | its name (default `fake`) |
//! | `FAKE_TEXT` | the answer (default `Answer from NAME.`); `{pid}` in it becomes the process id, `{turn}` something unique to the turn (the pid; under app-server the turn id), `{umask}` its file-creation mask (e.g. `0022`), `{child}` the pid of its `FAKE_CHILD` |
//! | `FAKE_CHILD` | first start a long-lived child (`sleep`, stdio closed) that outlives this process: `group` in its process group, `group-stdout` the same holding its stdout open, `own-group` in a group of its own, as tool commands may be, `own-session` in a session of its own (`setsid`); under `app-server` and `acp` its pid is recorded as `child` |
//! | `FAKE_DELTAS` | how many pieces the answer streams in (default 3) |
//! | `FAKE_INTERVAL_MS` | pause before each piece (default 0) |
//! | `FAKE_RATE` | pieces per second, on a steady schedule (instead of `FAKE_INTERVAL_MS`) |
//! | `FAKE_PIECE` | every piece is this text (for throughput runs) |
//! | `FAKE_STAMP` | each piece is `[t=MICROS]`, its write time in µs since the epoch |
//! | `FAKE_SESSION_ID` | the session id it reports (default: the one it is told to resume, as the real CLIs keep it, else `fake-session-PID`) |
//! | `FAKE_FORK` | report a new session id even when resuming (as `claude --resume --fork-session` does) |
//! | `FAKE_ERROR` | fail with this message, in the backend's own error form |
//! | `FAKE_API_ERROR` | (claude) fail as Claude Code does on an API error: a synthetic assistant message with the text, then an `is_error` result |
//! | `FAKE_EXIT` | exit status at the end |
//! | `FAKE_HANG` | after the pieces, never finish |
//! | `FAKE_HOLD` | after the first piece, wait while this file exists |
//! | `FAKE_HOLD_WHEN` | hold only when the prompt contains this text (e.g. a later round's) |
//! | `FAKE_IGNORE_TERM` | ignore SIGINT and SIGTERM (only SIGKILL stops it), appending `{"ignored": "TERM"}` to `FAKE_RECORD` for each |
//! | `FAKE_GARBAGE` | this many garbage lines first |
//! | `FAKE_NON_UTF8` | a line of invalid UTF-8 first |
//! | `FAKE_HUGE_LINE` | a line of this many bytes first |
//! | `FAKE_ECHO_LABEL` | start the answer with `NAME: ` as agents sometimes do |
//! | `FAKE_NO_OUTPUT` | print nothing |
//! | `FAKE_STDERR` | write this to stderr |
//! | `FAKE_RECORD` | append `{argv, stdin, cwd, pid}` as a JSON line to this file |
//! | `FAKE_RULES` | a JSON list of `[needle, answer]`: the answer of the first needle found in the prompt (stdin and argv) replaces `FAKE_TEXT` |
//! | `FAKE_DENIALS` | (claude) `[[TOOL, PATH], …]`: the result's `permission_denials`, as Claude Code reports writes it refused silently |
//! | `FAKE_RUN` | a shell command run first (as an agent runs tools); `{run}` in the answer becomes its output |
//! | `FAKE_MCP_CALL` | `TOOL ARGUMENTS`: start kd's MCP server as the CLI was given it, call the tool, answer `Tool said: TEXT` (see `mcp.rs`; claude first searches for a tool it defers, as 2.1.332 does unless `ENABLE_TOOL_SEARCH=false`, `alwaysLoad` or the tool's `_meta` say not to) |
//! | `FAKE_MCP_START` | start kd's MCP server as the CLI does (`initialize`, `tools/list`) without calling a tool |
//! | `FAKE_ACP` | `codex-acp` to play codex-acp's MCP client and permission requests (default: claude-code-acp's) |
//! | `FAKE_STEPS` | (app-server) `C:CMD ;; E:CMD ;; P:PATH`: commands, escalated commands and patches the turn makes first, asked for approval as the thread's policy says (see `approvals.rs`) |
//! | `FAKE_COMMAND` | (acp) a command the turn asks permission to run, as the adapter `FAKE_ACP` names asks it, run in the session's cwd when allowed (see `acp.rs`) |
//!
//! `FAKE_RECORD` lines also carry `mcp` (kd's MCP server as the fake was
//! given it, or null), `allowed` (claude's `--allowedTools`), `env` (its
//! `KD_*` variables) and `build` (`debug` or `release`: the benches say
//! which played the agents); a call adds a line `{"mcp": …}`.
//!
//! In any answer, `{label:TEXT}` becomes the label heading the part of the
//! prompt where TEXT appears (the nearest `Response X:` line before it), so
//! a fake votes for an anonymised answer by its content, as a model would.
//!
//! `fake-agent --version` prints its version, as the real CLIs do.
//! `fake-agent app-server …` plays `codex app-server` (see `appserver.rs`;
//! like codex it refuses, at start, a flag it does not take, such as
//! `codex exec`'s `--skip-git-repo-check`),
//! `fake-agent acp` an Agent Client Protocol agent (see `acp.rs`),
//! `fake-agent mcp` a stand-in for `kd mcp` (see `mcp.rs`).
//!
//! On SIGINT a claude-format fake reports its partial answer in a result
//! line and exits 130, as Claude Code does; otherwise SIGINT/SIGTERM end it.

mod acp;
mod approvals;
mod appserver;
mod mcp;
mod permission;

use std::io::{Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Claude,
    Codex,
    Cursor,
    Gemini,
    Text,
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn env_num(k: &str, default: u64) -> u64 {
    env(k).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn format_of(args: &[String]) -> Format {
    if let Some(f) = env("FAKE_FORMAT") {
        return match f.as_str() {
            "claude" => Format::Claude,
            "codex" => Format::Codex,
            "cursor" => Format::Cursor,
            "gemini" => Format::Gemini,
            _ => Format::Text,
        };
    }
    let has = |a: &str| args.iter().any(|x| x == a);
    if has("exec") && has("--json") {
        Format::Codex
    } else if has("--stream-partial-output") {
        Format::Cursor
    } else if has("--include-partial-messages") {
        Format::Claude
    } else if has("--output-format") {
        Format::Gemini
    } else {
        Format::Text
    }
}

/// stdin's lines, read on a thread of its own (the JSON-RPC modes); the
/// channel ends at EOF.
fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use std::io::BufRead;
    let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The answer to `prompt`: of the first `FAKE_RULES` needle found in it,
/// else `FAKE_TEXT`, else `Answer from NAME.`; its `{label:TEXT}`s filled.
fn answer_for(prompt: &str, name: &str) -> String {
    let ruled = env("FAKE_RULES")
        .and_then(|r| serde_json::from_str::<Vec<(String, String)>>(&r).ok())
        .and_then(|rules| rules.into_iter().find(|(needle, _)| prompt.contains(needle.as_str())))
        .map(|(_, answer)| answer);
    let text = ruled.or_else(|| env("FAKE_TEXT")).unwrap_or_else(|| format!("Answer from {name}."));
    labels_of(&text, prompt)
}

/// Replaces each `{label:TEXT}` in `answer` by the `Response X` label
/// under which TEXT appears in `prompt` (`?` when it does not).
fn labels_of(answer: &str, prompt: &str) -> String {
    let mut out = String::new();
    let mut rest = answer;
    while let Some(at) = rest.find("{label:") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "{label:".len()..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[at..]);
            return out;
        };
        let label = prompt.find(&after[..end]).and_then(|i| {
            prompt[..i]
                .lines()
                .rev()
                .find(|l| l.starts_with("Response ") && l.ends_with(':'))
                .map(|l| l.trim_end_matches(':'))
        });
        out.push_str(label.unwrap_or("?"));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Waits while the `FAKE_HOLD` file exists: a test holds a run mid-stream
/// for as long as it needs, then lets it go by removing the file. With
/// `FAKE_HOLD_WHEN`, only a run whose prompt contains that text holds.
async fn hold(prompt: &str) {
    let Some(path) = env("FAKE_HOLD") else { return };
    if env("FAKE_HOLD_WHEN").is_some_and(|needle| !prompt.contains(&needle)) {
        return;
    }
    while std::path::Path::new(&path).exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn now_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0)
}

struct Out {
    format: Format,
    session: String,
    streamed: std::cell::RefCell<String>,
}

impl Out {
    fn line(&self, v: serde_json::Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }

    fn raw(&self, bytes: &[u8]) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(bytes);
        let _ = out.flush();
    }

    fn start(&self) {
        let s = &self.session;
        match self.format {
            Format::Claude => self.line(json!({"type":"system","subtype":"init","cwd":cwd(),"session_id":s,"tools":[],"model":"fake","permissionMode":"default"})),
            Format::Codex => {
                self.line(json!({"type":"thread.started","thread_id":s}));
                self.line(json!({"type":"turn.started"}));
                self.line(json!({"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Thinking**"}}));
            }
            Format::Cursor => {
                self.line(json!({"type":"system","subtype":"init","apiKeySource":"login","cwd":cwd(),"session_id":s,"model":"fake","permissionMode":"default"}));
                self.line(json!({"type":"user","message":{"role":"user","content":[{"type":"text","text":"(prompt)"}]},"session_id":s}));
            }
            Format::Gemini => {
                self.line(json!({"type":"init","timestamp":"2026-01-01T00:00:00.000Z","session_id":s,"model":"fake"}));
                self.line(json!({"type":"message","timestamp":"2026-01-01T00:00:00.000Z","role":"user","content":"(prompt)"}));
            }
            Format::Text => {}
        }
    }

    /// The bytes of one streamed piece in this format.
    fn delta_bytes(&self, piece: &str) -> Vec<u8> {
        let s = &self.session;
        let line = match self.format {
            Format::Claude => {
                json!({"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":piece}},"session_id":s})
            }
            // codex exec --json has no token deltas: the message comes whole at the end.
            Format::Codex => return Vec::new(),
            Format::Cursor => {
                json!({"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":piece}]},"session_id":s,"timestamp_ms":now_us() / 1000})
            }
            Format::Gemini => {
                json!({"type":"message","timestamp":"2026-01-01T00:00:01.000Z","role":"assistant","content":piece,"delta":true})
            }
            Format::Text => return piece.as_bytes().to_vec(),
        };
        format!("{line}\n").into_bytes()
    }

    fn delta(&self, piece: &str) {
        self.streamed.borrow_mut().push_str(piece);
        let bytes = self.delta_bytes(piece);
        if !bytes.is_empty() {
            self.raw(&bytes);
        }
    }

    fn finish(&self, text: &str) {
        let s = &self.session;
        match self.format {
            Format::Claude => {
                self.line(json!({"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":text}]},"session_id":s}));
                // What Claude Code refused without asking (`FAKE_DENIALS`, `[[TOOL, PATH], …]`).
                let denials: Vec<serde_json::Value> = env("FAKE_DENIALS")
                    .and_then(|d| serde_json::from_str::<Vec<(String, String)>>(&d).ok())
                    .unwrap_or_default()
                    .into_iter()
                    .enumerate()
                    .map(|(i, (tool, path))| json!({"tool_name": tool, "tool_use_id": format!("toolu_d{i}"), "tool_input": {"file_path": path, "content": "x"}}))
                    .collect();
                self.line(json!({"type":"result","subtype":"success","is_error":false,"duration_ms":5,"num_turns":1,"result":text,"session_id":s,"total_cost_usd":0.0012,"usage":{"input_tokens":10,"output_tokens":5},"permission_denials":denials}));
            }
            Format::Codex => {
                self.line(json!({"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":text}}));
                self.line(json!({"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":5}}));
            }
            Format::Cursor => {
                self.line(json!({"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":text}]},"session_id":s,"model_call_id":"mc-1","timestamp_ms":now_us() / 1000}));
                self.line(json!({"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":text}]},"session_id":s}));
                self.line(json!({"type":"result","subtype":"success","duration_ms":5,"duration_api_ms":5,"is_error":false,"result":text,"session_id":s,"request_id":"req-1"}));
            }
            Format::Gemini => self.line(json!({"type":"result","timestamp":"2026-01-01T00:00:02.000Z","status":"success","stats":{"total_tokens":15,"input_tokens":10,"output_tokens":5,"cached":0,"input":10,"duration_ms":5,"tool_calls":0}})),
            Format::Text => self.raw(b"\n"),
        }
    }

    /// Claude Code's model loading a deferred tool (claude-332.deferral-default):
    /// its `ToolSearch` call, and the result naming the tool.
    fn tool_search(&self, name: &str) {
        let s = &self.session;
        let query = format!("select:{name}");
        self.line(json!({"type":"assistant","message":{"id":"msg_search","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_search","name":"ToolSearch","input":{"query":query,"max_results":5}}]},"parent_tool_use_id":null,"session_id":s}));
        self.line(json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_search","content":[{"type":"tool_reference","tool_name":name}]}]},"parent_tool_use_id":null,"session_id":s,"tool_use_result":{"matches":[name],"query":query,"total_deferred_tools":12}}));
    }

    /// Claude Code on an API error: the error as a synthetic assistant
    /// message (model `<synthetic>`, `isApiErrorMessage`), then a result
    /// with `is_error` and the same text; exit 1.
    fn api_error(&self, message: &str) -> i32 {
        let s = &self.session;
        self.line(json!({"type":"assistant","message":{"id":"msg_synthetic","type":"message","role":"assistant","model":"<synthetic>","content":[{"type":"text","text":message}],"stop_reason":"stop_sequence","usage":{"input_tokens":0,"output_tokens":0}},"parent_tool_use_id":null,"session_id":s,"uuid":"7e1c","error":"invalid_request","isApiErrorMessage":true}));
        self.line(json!({"type":"result","subtype":"success","is_error":true,"duration_ms":5,"num_turns":1,"result":message,"session_id":s,"total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}));
        1
    }

    /// Fails in the backend's own way; returns the exit status to use.
    fn fail(&self, message: &str) -> i32 {
        let s = &self.session;
        match self.format {
            // An API error: subtype success, is_error true, exit 1.
            Format::Claude => self.line(json!({"type":"result","subtype":"success","is_error":true,"duration_ms":5,"result":message,"session_id":s,"total_cost_usd":0})),
            Format::Codex => self.line(json!({"type":"turn.failed","error":{"message":message}})),
            // A failed cursor run ends without a result line.
            Format::Cursor => eprintln!("{message}"),
            Format::Gemini => {
                self.line(json!({"type":"error","timestamp":"2026-01-01T00:00:02.000Z","severity":"error","message":message}));
                self.line(json!({"type":"result","timestamp":"2026-01-01T00:00:02.000Z","status":"error","error":{"type":"Error","message":message}}));
            }
            Format::Text => eprintln!("{message}"),
        }
        1
    }
}

fn cwd() -> String {
    std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default()
}

/// Splits `text` into `n` pieces on character boundaries (fewer when the
/// text has fewer characters).
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = n.clamp(1, chars.len().max(1));
    (0..n).map(|i| chars[i * chars.len() / n..(i + 1) * chars.len() / n].iter().collect()).collect()
}

/// The session id of `--resume ID` (claude, cursor, gemini) or
/// `exec resume ID` (codex).
fn resumed(args: &[String]) -> Option<String> {
    args.windows(2).find(|w| w[0] == "--resume" || w[0] == "resume").map(|w| w[1].clone())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args == ["--version"] {
        println!("fake-agent {} ({})", env!("CARGO_PKG_VERSION"), env("FAKE_NAME").unwrap_or_else(|| "fake".into()));
        return;
    }
    if args.first().map(String::as_str) == Some("app-server") {
        // An argument `codex app-server` does not take: refused as codex's
        // clap does, on stderr, exit 2.
        if let Some(refused) = appserver::refused_argument(&args) {
            eprint!("{refused}");
            std::process::exit(2);
        }
        // A process that fails at start, as a broken install would.
        if let Some(e) = env("FAKE_STDERR") {
            eprintln!("{e}");
        }
        if env("FAKE_NO_OUTPUT").is_some() {
            std::process::exit(env_num("FAKE_EXIT", 0) as i32);
        }
        for _ in 0..env_num("FAKE_GARBAGE", 0) {
            println!("garbage: not {{ json at all");
        }
        if let Some(how) = env("FAKE_CHILD")
            && let Some(path) = env("FAKE_RECORD")
            && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
        {
            let _ = f.write_all(format!("{}\n", json!({"child": long_lived_child(&how)})).as_bytes());
        }
        std::process::exit(appserver::serve(args).await);
    }
    if args.first().map(String::as_str) == Some("mcp") {
        std::process::exit(mcp::stand_in().await);
    }
    if args.first().map(String::as_str) == Some("acp") {
        // An agent that fails at start (a missing package, a bad flag).
        if let Some(e) = env("FAKE_STDERR") {
            eprintln!("{e}");
        }
        if env("FAKE_NO_OUTPUT").is_some() {
            std::process::exit(env_num("FAKE_EXIT", 0) as i32);
        }
        std::process::exit(acp::serve(args).await);
    }
    let mut stdin = String::new();
    let _ = std::io::stdin().read_to_string(&mut stdin);
    let format = format_of(&args);
    // kd's MCP server, where each CLI takes it.
    let (given, allowed, cli) = match format {
        Format::Claude => {
            let (given, allowed) = mcp::from_claude_args(&args);
            (given, allowed, mcp::Cli::Claude)
        }
        Format::Codex => (mcp::from_codex_args(&args), vec![], mcp::Cli::Codex),
        Format::Gemini => (mcp::from_gemini(), vec![], mcp::Cli::Gemini),
        Format::Cursor | Format::Text => (None, vec![], mcp::Cli::Claude),
    };
    // gemini's settings file as it was when the run started.
    let gemini = std::env::var("GEMINI_CLI_SYSTEM_DEFAULTS_PATH").ok().map(|path| {
        let settings =
            std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
        json!({"path": path, "settings": settings})
    });
    record_line(json!({"argv": args, "stdin": stdin, "cwd": cwd(), "pid": std::process::id(),
                       "mcp": given.as_ref().map(mcp::Given::record), "allowed": allowed, "env": mcp::kd_env(),
                       "gemini_defaults": gemini, "build": if cfg!(debug_assertions) { "debug" } else { "release" }}));
    if let Some(e) = env("FAKE_STDERR") {
        eprintln!("{e}");
    }
    let name = env("FAKE_NAME").unwrap_or_else(|| "fake".into());
    let out = Out {
        format,
        session: env("FAKE_SESSION_ID")
            .or_else(|| resumed(&args).filter(|_| env("FAKE_FORK").is_none()))
            .unwrap_or_else(|| format!("fake-session-{}", std::process::id())),
        streamed: std::cell::RefCell::new(String::new()),
    };
    let exit_code = env_num("FAKE_EXIT", 0) as i32;
    if env("FAKE_NO_OUTPUT").is_some() {
        std::process::exit(exit_code);
    }
    let ignore = env("FAKE_IGNORE_TERM").is_some();
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        std::process::exit(70);
    };
    let work = async {
        out.start();
        // The API refused the request: nothing was streamed.
        if let Some(msg) = env("FAKE_API_ERROR") {
            return out.api_error(&msg);
        }
        for _ in 0..env_num("FAKE_GARBAGE", 0) {
            out.raw(b"garbage: not { json at all\n");
        }
        if env("FAKE_NON_UTF8").is_some() {
            out.raw(b"\xff\xfe\xfd invalid utf-8\n");
        }
        if let Some(n) = env("FAKE_HUGE_LINE").and_then(|v| v.parse::<usize>().ok()) {
            let chunk = vec![b'x'; 1024 * 1024];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                out.raw(&chunk[..k]);
                left -= k;
            }
            out.raw(b"\n");
        }
        let interval = Duration::from_millis(env_num("FAKE_INTERVAL_MS", 0));
        let n = env_num("FAKE_DELTAS", 3) as usize;
        let child = env("FAKE_CHILD").map(|how| long_lived_child(&how)).unwrap_or_default();
        let prompt = format!("{stdin}\n{}", args.join("\n"));
        let ran = env("FAKE_RUN")
            .and_then(|cmd| {
                std::process::Command::new("sh").arg("-c").arg(cmd).stdin(std::process::Stdio::null()).output().ok()
            })
            .map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
            .unwrap_or_default();
        // The server starts with the CLI (kept until it exits: its stdin
        // closes with this process).
        let _server = match (&given, mcp::wanted()) {
            (Some(given), None) if mcp::starts() => mcp::start_noted(given, cli).await.ok(),
            _ => None,
        };
        let permission = match (env("FAKE_PERMISSION"), &given) {
            (Some(asked), _) if format == Format::Claude => Some(permission(&args, given.as_ref(), &out, &asked).await),
            _ => None,
        };
        let tool_said = match (mcp::wanted(), &given) {
            _ if permission.is_some() => permission,
            (Some((tool, arguments)), Some(given)) => {
                let deferred = std::cell::Cell::new(None);
                let refused = |s: &mcp::Session| match cli {
                    mcp::Cli::Claude if !mcp::claude_allows(&allowed, &tool) => Some(format!(
                        "Claude requested permissions to use mcp__kd__{tool}, but you haven't granted it yet."
                    )),
                    mcp::Cli::Codex if !s.tool(&tool).is_some_and(|t| mcp::codex_approves(given, t)) => {
                        Some(mcp::NEEDS_APPROVAL.to_string())
                    }
                    mcp::Cli::Gemini if !given.trust => Some(format!(
                        "Tool \"{tool}\" of server kd needs confirmation, which headless gemini cannot ask"
                    )),
                    _ => None,
                };
                let refusal = |s: &mcp::Session| {
                    if cli == mcp::Cli::Claude {
                        // The model must search for a deferred tool first.
                        let defers = s.tool(&tool).is_some_and(|t| mcp::claude_defers(given, t));
                        if defers {
                            out.tool_search(&format!("mcp__kd__{tool}"));
                        }
                        deferred.set(Some(defers));
                    }
                    refused(s)
                };
                let mut called = mcp::call_once(given, cli, &tool, &arguments, refusal).await;
                if let Some(d) = deferred.get() {
                    called.record["deferred"] = json!(d);
                }
                mcp::record(called.record);
                Some(called.text)
            }
            (Some(_), None) => {
                mcp::record(json!({"error": "no MCP server kd was configured"}));
                Some("(no MCP server kd was configured)".to_string())
            }
            _ => None,
        };
        let answer = match tool_said {
            Some(said) => format!("Tool said: {said}"),
            None => answer_for(&prompt, &name),
        };
        let mut text = answer
            .replace("{run}", ran.trim())
            .replace("{pid}", &std::process::id().to_string())
            .replace("{turn}", &std::process::id().to_string())
            .replace("{child}", &child.to_string())
            .replace("{umask}", &umask());
        if env("FAKE_ECHO_LABEL").is_some() {
            text = format!("{name}: {text}");
        }
        let stamped = env("FAKE_STAMP").is_some();
        let fixed = env("FAKE_PIECE");
        let pieces = if stamped || fixed.is_some() || n == 0 { vec![String::new(); n] } else { pieces(&text, n) };
        let rate = env_num("FAKE_RATE", 0);
        // A fixed piece is rendered once: the fake must not be the bottleneck.
        let fixed_bytes = fixed.as_ref().map(|f| out.delta_bytes(f));
        let start = tokio::time::Instant::now();
        for (i, p) in pieces.iter().enumerate() {
            if let Some(step) = (i as u64 * 1_000_000).checked_div(rate) {
                tokio::time::sleep_until(start + Duration::from_micros(step)).await;
            } else if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
            match (&fixed, &fixed_bytes, stamped) {
                (_, _, true) => out.delta(&format!("[t={}]", now_us())),
                (Some(f), Some(bytes), false) => {
                    out.streamed.borrow_mut().push_str(f);
                    out.raw(bytes);
                }
                _ => out.delta(p),
            }
            if i == 0 {
                hold(&prompt).await;
            }
        }
        let text = if fixed.is_some() { out.streamed.borrow().clone() } else { text };
        if env("FAKE_HANG").is_some() {
            std::future::pending::<()>().await;
        }
        let final_text = if stamped { out.streamed.borrow().clone() } else { text };
        match env("FAKE_ERROR") {
            Some(msg) => out.fail(&msg).max(exit_code),
            None => {
                out.finish(&final_text);
                exit_code
            }
        }
    };
    tokio::pin!(work);
    loop {
        tokio::select! {
            code = &mut work => std::process::exit(code),
            _ = int.recv() => {
                if ignore {
                    record_ignored("INT");
                    continue;
                }
                if format == Format::Claude {
                    // Claude Code reports what it had, then stops.
                    let partial = out.streamed.borrow().clone();
                    out.line(json!({"type":"result","subtype":"success","is_error":false,"result":partial,"session_id":out.session}));
                }
                std::process::exit(130);
            }
            _ = term.recv() => {
                if ignore {
                    record_ignored("TERM");
                    continue;
                }
                std::process::exit(143);
            }
        }
    }
}

/// Appends `line` to `FAKE_RECORD`, in one write: concurrent fakes append
/// to one file.
fn record_line(line: serde_json::Value) {
    if let Some(path) = env("FAKE_RECORD")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// Notes in `FAKE_RECORD` a signal this fake ignored.
fn record_ignored(signal: &str) {
    if let Some(path) = env("FAKE_RECORD")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = f.write_all(format!("{}\n", json!({"ignored": signal})).as_bytes());
    }
}

/// This process's umask as `/proc/self/status` shows it (e.g. `0022`).
fn umask() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Umask:")).map(|m| m.trim().to_string()).unwrap_or_default()
}

/// Starts `sleep 3600` detached from this process's stdio, in this process
/// group or (`own-group`) in one of its own, or (`own-session`) in a
/// session of its own (`setsid`, as a daemonising tool does); returns its
/// pid. It is not waited for: it outlives this process unless someone kills
/// it. `group-stdout` keeps this process's stdout open in the child, as a
/// tool left running in the background does.
fn long_lived_child(how: &str) -> u32 {
    use std::os::unix::process::CommandExt;
    // setsid(1) calls setsid() and execs sleep: one process, one pid (the
    // child is no group leader, so setsid need not fork).
    let mut cmd = if how == "own-session" {
        let mut c = std::process::Command::new("setsid");
        c.arg("sleep");
        c
    } else {
        std::process::Command::new("sleep")
    };
    let stdout = if how == "group-stdout" { std::process::Stdio::inherit() } else { std::process::Stdio::null() };
    cmd.arg("3600").stdin(std::process::Stdio::null()).stdout(stdout).stderr(std::process::Stdio::null());
    if how == "own-group" {
        cmd.process_group(0);
    }
    cmd.spawn().map(|c| c.id()).unwrap_or(0)
}

/// claude -p asking its permission prompt tool (`FAKE_PERMISSION`: the
/// tool's name and input as JSON, `{"tool_name": "Bash", "input":
/// {"command": …}}`), as shared/captures/approvals shows it: the assistant's
/// `tool_use` printed, then (nothing on stdout) a `tools/call` of the
/// `--permission-prompt-tool` `mcp__S__T` with `{tool_name, input,
/// tool_use_id}`; an allow runs the tool with `updatedInput` (a Bash
/// command by `sh -c`), a denial's message is the tool's result. Without
/// the flag, the tool is denied as claude's flags deny it. Returns what the
/// tool said.
async fn permission(args: &[String], given: Option<&mcp::Given>, out: &Out, asked: &str) -> String {
    let asked: serde_json::Value = serde_json::from_str(asked).unwrap_or_default();
    let tool_name = asked["tool_name"].as_str().unwrap_or("Bash").to_string();
    let input = asked.get("input").cloned().unwrap_or_else(|| json!({}));
    let id = "toolu_fake0001";
    let s = &out.session;
    out.line(json!({"type":"assistant","message":{"id":"msg_perm","type":"message","role":"assistant","content":[{"type":"tool_use","id":id,"name":tool_name,"input":input}]},"parent_tool_use_id":null,"session_id":s}));
    let prompt_tool = args.iter().position(|a| a == "--permission-prompt-tool").and_then(|i| args.get(i + 1));
    let said = match (prompt_tool, given) {
        (Some(t), Some(given)) => {
            let tool = t.rsplit("__").next().unwrap_or_default().to_string();
            let arguments = json!({"tool_name": tool_name, "input": input, "tool_use_id": id});
            let called = mcp::call_once(given, mcp::Cli::Claude, &tool, &arguments, |_| None).await;
            mcp::record(json!({"permission": called.record}));
            let answer: serde_json::Value = serde_json::from_str(&called.text).unwrap_or_default();
            match answer["behavior"].as_str() {
                Some("allow") if answer["updatedInput"].is_object() => {
                    let command = answer["updatedInput"]["command"].as_str().unwrap_or_default().to_string();
                    let ran = std::process::Command::new("sh")
                        .arg("-c")
                        .arg(&command)
                        .stdin(std::process::Stdio::null())
                        .status()
                        .map(|st| st.success())
                        .unwrap_or(false);
                    format!("allowed, ran {command} ({})", if ran { "ok" } else { "failed" })
                }
                Some("deny") => format!("denied: {}", answer["message"].as_str().unwrap_or_default()),
                _ => format!("<tool_use_error>Error calling tool ({tool_name}): {}</tool_use_error>", called.text),
            }
        }
        _ => format!("denied: Claude requested permissions to use {tool_name}, but you haven't granted it yet."),
    };
    out.line(json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":id,"content":said,"is_error":!said.starts_with("allowed")}]},"parent_tool_use_id":null,"session_id":s}));
    said
}
