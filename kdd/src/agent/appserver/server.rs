//! One `codex app-server` process and the JSON-RPC client on its stdio: a
//! writer task for what kd sends, a reader task that hands each response to
//! the request waiting for it, declines requests from codex, and routes
//! notifications to the run that follows their codex thread. When the
//! process ends, every request waiting fails and every run following a
//! thread sees its notifications end.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::protocol::{self, Incoming};
use crate::agent::argv::Invocation;
use crate::agent::lines::{Line, LineReader};
use crate::agent::process;

/// How long codex has to answer a request (it loads its configuration and
/// state on `initialize` and `thread/start`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Notifications queued for one run before the reader waits for it.
const PER_THREAD: usize = 1024;
/// Lines queued for codex's stdin.
const OUTBOX: usize = 256;
/// Bytes of stderr kept to explain an exit.
const STDERR_TAIL: usize = 4 * 1024;

/// The arguments kd starts `codex app-server` with (before the member's own):
/// no analytics or metrics export, and no plugin lookups over the network.
pub const ARGS: [&str; 7] =
    ["app-server", "-c", "analytics.enabled=false", "-c", "otel.metrics_exporter=none", "--disable", "plugins"];

/// A notification for a run.
#[derive(Debug)]
pub struct Note {
    pub method: String,
    pub params: Value,
}

#[derive(Default)]
struct Shared {
    pending: HashMap<u64, oneshot::Sender<Result<Value, String>>>,
    threads: HashMap<String, mpsc::Sender<Note>>,
    /// Codex threads with a turn kd started that codex has not ended: a
    /// `turn/start` there would steer that turn instead of starting one.
    busy: HashSet<String>,
    /// Why the process is gone, once it is.
    gone: Option<String>,
}

pub struct AppServer {
    pub pid: u32,
    /// The process's start time (see [`process::start_time`]).
    pub started: Option<u64>,
    outbox: mpsc::Sender<String>,
    shared: Arc<Mutex<Shared>>,
    next_id: AtomicU64,
}

/// Stops following a thread when dropped.
pub struct Following {
    pub notes: mpsc::Receiver<Note>,
    thread: String,
    shared: Arc<Mutex<Shared>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        if let Ok(mut s) = self.shared.lock() {
            s.threads.remove(&self.thread);
        }
    }
}

impl AppServer {
    /// Starts the process in `cwd` and does the handshake.
    pub async fn start(inv: &Invocation, cwd: &Path) -> Result<AppServer, String> {
        let mut child = process::spawn(inv, cwd).map_err(|e| e.to_string())?;
        let pid = child.id().ok_or("it exited at once")?;
        let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("its stdio could not be opened".into());
        };
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (outbox, mut lines) = mpsc::channel::<String>(OUTBOX);
        tokio::spawn(async move {
            while let Some(mut line) = lines.recv().await {
                line.push('\n');
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
            // Dropping stdin: EOF ends the process.
        });
        let tail = tokio::spawn(async move {
            let mut tail = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&chunk[..n]);
                if tail.len() > STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
            String::from_utf8_lossy(&tail).into_owned()
        });
        let reader_shared = shared.clone();
        let replies = outbox.clone();
        tokio::spawn(async move {
            let mut reader = LineReader::new(stdout);
            while let Ok(Some(line)) = reader.next().await {
                let Line::Text(line) = line else { continue };
                route(&reader_shared, &replies, &line).await;
            }
            let status = child.wait().await.ok();
            let stderr = tokio::time::timeout(Duration::from_secs(1), tail).await.ok().and_then(Result::ok);
            let last = stderr.as_deref().and_then(|s| s.lines().map(str::trim).rfind(|l| !l.is_empty()));
            let how = match status.and_then(|s| s.code()) {
                Some(code) => format!("the codex app-server exited (status {code})"),
                None => "the codex app-server was killed".to_string(),
            };
            let why = match last {
                Some(l) => format!("{how}: {}", l.chars().take(300).collect::<String>()),
                None => how,
            };
            tracing::info!(pid, "{why}");
            if let Ok(mut s) = reader_shared.lock() {
                s.gone = Some(why);
                // Dropping the senders ends every wait and every run's notes.
                s.pending.clear();
                s.threads.clear();
                s.busy.clear();
            }
        });
        let server = AppServer { pid, started: process::start_time(pid), outbox, shared, next_id: AtomicU64::new(1) };
        server.request(protocol::initialize).await.map_err(|e| format!("initialize failed: {e}"))?;
        server.notify(protocol::initialized()).await?;
        Ok(server)
    }

    /// Whether the process has ended.
    pub fn is_gone(&self) -> bool {
        self.shared.lock().map(|s| s.gone.is_some()).unwrap_or(true)
    }

    /// Why the process ended (or a general reason).
    pub fn gone_reason(&self) -> String {
        self.shared
            .lock()
            .ok()
            .and_then(|s| s.gone.clone())
            .unwrap_or_else(|| "the codex app-server stopped answering".into())
    }

    /// Sends the request `build(id)` and waits for its answer.
    pub async fn request(&self, build: impl FnOnce(u64) -> Value) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.shared.lock().map_err(|_| "state lock poisoned".to_string())?;
            if let Some(why) = &s.gone {
                return Err(why.clone());
            }
            s.pending.insert(id, tx);
        }
        self.notify(build(id)).await?;
        match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(self.gone_reason()),
            Err(_) => {
                if let Ok(mut s) = self.shared.lock() {
                    s.pending.remove(&id);
                }
                Err(format!("the codex app-server did not answer in {} s", REQUEST_TIMEOUT.as_secs()))
            }
        }
    }

    /// Sends a message that has no answer.
    pub async fn notify(&self, message: Value) -> Result<(), String> {
        self.outbox.send(message.to_string()).await.map_err(|_| self.gone_reason())
    }

    /// Follows the notifications of codex thread `thread`.
    pub fn follow(&self, thread: &str) -> Result<Following, String> {
        let (tx, notes) = mpsc::channel(PER_THREAD);
        let mut s = self.shared.lock().map_err(|_| "state lock poisoned".to_string())?;
        if let Some(why) = &s.gone {
            return Err(why.clone());
        }
        s.threads.insert(thread.to_string(), tx);
        Ok(Following { notes, thread: thread.to_string(), shared: self.shared.clone() })
    }

    /// Starts the turn `build(id)` on `thread`, unless a turn kd started
    /// there has not ended yet (codex would take the prompt into it).
    pub async fn start_turn(&self, thread: &str, build: impl FnOnce(u64) -> Value) -> Result<Value, String> {
        {
            let mut s = self.shared.lock().map_err(|_| "state lock poisoned".to_string())?;
            if !s.busy.insert(thread.to_string()) {
                return Err("codex has not ended this thread's previous turn yet".into());
            }
        }
        let answer = self.request(build).await;
        if answer.is_err()
            && let Ok(mut s) = self.shared.lock()
        {
            s.busy.remove(thread);
        }
        answer
    }

    /// Ends the process: stdin closed, then its group signalled.
    pub fn stop(&self) {
        process::signal_group(self.pid, rustix::process::Signal::TERM);
    }
}

/// Hands one line from codex to whoever waits for it.
async fn route(shared: &Mutex<Shared>, replies: &mpsc::Sender<String>, line: &str) {
    match protocol::incoming(line) {
        Some(Incoming::Response { id, result }) => {
            let waiting = shared.lock().ok().and_then(|mut s| s.pending.remove(&id));
            if let Some(tx) = waiting {
                let _ = tx.send(result);
            }
        }
        Some(Incoming::Request { id, method }) => {
            tracing::debug!(method, "declined a request from codex");
            let _ = replies.send(protocol::decline(&id, &method).to_string()).await;
        }
        Some(Incoming::Notification { method, thread: Some(thread), params }) => {
            let tx = shared.lock().ok().and_then(|mut s| {
                if method == "turn/completed" {
                    s.busy.remove(&thread);
                }
                s.threads.get(&thread).cloned()
            });
            if let Some(tx) = tx {
                // A run that stopped following drops its receiver: nothing to do.
                let _ = tx.send(Note { method, params }).await;
            }
        }
        Some(Incoming::Notification { .. }) => {}
        None => tracing::debug!("skipped a line from codex app-server that is no JSON-RPC message"),
    }
}
