//! `kd mcp` driven as an agent CLI drives it: the real binary spawned with
//! the environment kd gives it, JSON-RPC lines written to its stdin and
//! read from its stdout, each wait bounded by [`DEADLINE`]. Its stdio are
//! pipes (as codex gives them) or Unix sockets (as node, hence claude,
//! gives them).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use serde_json::Value;

use crate::{DEADLINE, bin};

/// How the server's stdin and stdout are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plumbing {
    Pipes,
    Sockets,
}

/// A running `kd mcp`.
pub struct KdMcp {
    child: Child,
    stdin: Option<Box<dyn Write + Send>>,
    lines: mpsc::Receiver<Option<String>>,
    stderr: mpsc::Receiver<String>,
    /// When it was spawned.
    pub spawned: Instant,
}

impl KdMcp {
    /// `kd mcp` over pipes with exactly `env` (and `PATH`): the codex CLIs
    /// give their servers no more.
    pub fn spawn(env: &[(&str, &str)]) -> KdMcp {
        KdMcp::spawn_with(env, Plumbing::Pipes)
    }

    pub fn spawn_with(env: &[(&str, &str)], plumbing: Plumbing) -> KdMcp {
        let mut cmd = Command::new(bin("kd"));
        cmd.arg("mcp").env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
        cmd.envs(env.iter().copied()).stderr(Stdio::piped());
        let (stdin, stdout): (Box<dyn Write + Send>, Box<dyn Read + Send>);
        let spawned;
        let mut child = match plumbing {
            Plumbing::Pipes => {
                cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
                spawned = Instant::now();
                let mut child = cmd.spawn().expect("spawn kd mcp");
                stdin = Box::new(child.stdin.take().expect("stdin"));
                stdout = Box::new(child.stdout.take().expect("stdout"));
                child
            }
            Plumbing::Sockets => {
                let (ours_in, theirs_in) = UnixStream::pair().expect("socketpair");
                let (ours_out, theirs_out) = UnixStream::pair().expect("socketpair");
                cmd.stdin(Stdio::from(OwnedFd::from(theirs_in))).stdout(Stdio::from(OwnedFd::from(theirs_out)));
                spawned = Instant::now();
                let child = cmd.spawn().expect("spawn kd mcp");
                // The child's ends are closed here with the Command.
                drop(cmd);
                stdin = Box::new(ours_in);
                stdout = Box::new(ours_out);
                child
            }
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(Some(l)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(None);
        });
        let (etx, stderr) = mpsc::channel();
        let mut err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        KdMcp { child, stdin: Some(stdin), lines, stderr, spawned }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one line (a newline is added).
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(format!("{line}\n").as_bytes()).expect("write to kd mcp");
        stdin.flush().expect("flush");
    }

    /// The next line it writes, as JSON.
    pub fn answer(&self) -> Value {
        match self.lines.recv_timeout(DEADLINE) {
            Ok(Some(line)) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")),
            Ok(None) => panic!("kd mcp closed its stdout"),
            Err(_) => panic!("no answer from kd mcp within {DEADLINE:?}"),
        }
    }

    /// Sends a request and returns its answer, which must carry its id.
    pub fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        let req = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&req.to_string());
        let answer = self.answer();
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// Claude's `initialize` and `notifications/initialized`, as recorded;
    /// the `initialize` answer.
    pub fn handshake(&mut self) -> Value {
        self.send(CLAUDE_INITIALIZE);
        let init = self.answer();
        self.send(r#"{"method":"notifications/initialized","jsonrpc":"2.0"}"#);
        init
    }

    /// `tools/call` of `name`; the result (a tool's failure is a result).
    pub fn call(&mut self, id: u64, name: &str, arguments: Value) -> Value {
        let answer = self.request(id, "tools/call", serde_json::json!({"name": name, "arguments": arguments}));
        assert!(answer.get("error").is_none(), "a tool's failure is a result, not a JSON-RPC error: {answer}");
        answer["result"].clone()
    }

    /// Closes its stdin, as a CLI does to end it.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, signal).expect("kill");
    }

    /// Waits (up to [`DEADLINE`]) for it to end: its exit status and what it
    /// wrote on stderr.
    pub fn wait(mut self) -> (ExitStatus, String) {
        loop {
            match self.lines.recv_timeout(DEADLINE) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("kd mcp did not end within {DEADLINE:?}");
                }
            }
        }
        let status = self.child.wait().expect("wait");
        let stderr = self.stderr.recv_timeout(DEADLINE).unwrap_or_default();
        (status, stderr)
    }
}

impl Drop for KdMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Claude Code 2.1.197's `initialize` (shared/captures/mcp/claude.mcp.jsonl).
pub const CLAUDE_INITIALIZE: &str = r#"{"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{},"elicitation":{}},"clientInfo":{"name":"claude-code","title":"Claude Code","version":"2.1.197","description":"Anthropic's agentic coding tool","websiteUrl":"https://claude.com/claude-code"}},"jsonrpc":"2.0","id":0}"#;

/// Codex 0.169.0's `tools/list` (codex-exec.mcp.jsonl).
pub const CODEX_TOOLS_LIST: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":0}}}"#;
