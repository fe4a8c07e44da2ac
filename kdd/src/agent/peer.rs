//! A long-lived agent process that speaks JSON-RPC over its stdio (codex
//! app-server, any ACP agent), and the client kd runs on it: a writer task
//! for what kd sends, a reader task that hands each response to the request
//! waiting for it, answers the agent's own requests by its [`Dialect`], and
//! routes notifications to the run that follows their conversation (a codex
//! thread, an ACP session). When the process ends, every request waiting
//! fails and every run following a conversation sees its notifications end.
//! The processes themselves are kept by [`super::pool`].

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use super::asking::{Later, Question};
use super::lines::{Line, LineReader};
use super::process;
use super::process::Invocation;

/// How long the agent has to answer a request (codex loads its
/// configuration and state on `initialize` and `thread/start`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Notifications queued for one run before the reader waits for it (each
/// is one line, at most `lines::MAX_LINE`; a run takes them as they come).
const PER_CONVERSATION: usize = 256;
/// Lines queued for the agent's stdin.
const OUTBOX: usize = 256;
/// Bytes of stderr kept to explain an exit.
const STDERR_TAIL: usize = 4 * 1024;
/// How long output may keep coming after the process exited.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// How long a process has to exit on stdin EOF before its group is killed.
pub const EXIT_GRACE: Duration = Duration::from_secs(2);

/// What differs between the protocols on the same transport.
pub trait Dialect: Send + Sync + 'static {
    /// How the process is named in errors (`the codex app-server`).
    fn name(&self) -> &str;
    /// The conversation a notification concerns.
    fn conversation(&self, method: &str, params: &Value) -> Option<String>;
    /// Whether a notification ends the conversation's turn.
    fn ends_turn(&self, method: &str) -> bool;
    /// Takes note of a notification before it is routed (in the order the
    /// agent sent them, before any later request is answered).
    fn observe(&self, _method: &str, _params: &Value) {}
    /// kd's answer to request `id` from the agent.
    fn answer(&self, id: &Value, method: &str, params: &Value) -> Reply;
}

/// What kd answers a request from the agent.
pub enum Reply {
    /// This reply at once, and what the run following the request's
    /// conversation is to be told of it.
    Now(Value, Option<Note>),
    /// A permission, asked of the run following the request's
    /// conversation off the reading loop (see [`super::asking`]).
    Later(Later),
}

/// A notification for a run, or a permission it is to answer.
#[derive(Debug)]
pub struct Note {
    pub method: String,
    pub params: Value,
    /// A request the run answers ([`Reply::Later`]).
    pub question: Option<Question>,
}

impl Note {
    pub fn new(method: impl Into<String>, params: Value) -> Note {
        Note { method: method.into(), params, question: None }
    }
}

/// One message from the agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The answer to request `id`: its result, or the error's message.
    Response { id: u64, result: Result<Value, String> },
    /// A request from the agent (it has an id and a method).
    Request { id: Value, method: String, params: Value },
    /// A notification.
    Notification { method: String, params: Value },
}

/// Reads one line; `None` for a line that is no JSON-RPC message.
pub fn incoming(line: &str) -> Option<Incoming> {
    let mut v: Value = serde_json::from_str(line).ok()?;
    let method = v.get("method").and_then(Value::as_str).map(str::to_string);
    let params = v.get_mut("params").map(Value::take).unwrap_or(Value::Null);
    match (v.get("id").cloned(), method) {
        (Some(id), Some(method)) => Some(Incoming::Request { id, method, params }),
        (Some(id), None) => {
            let id = id.as_u64()?;
            let result = match v.get_mut("error") {
                Some(e) => Err(e.get("message").and_then(Value::as_str).unwrap_or("an error without a message").into()),
                None => Ok(v.get_mut("result").map(Value::take).unwrap_or(Value::Null)),
            };
            Some(Incoming::Response { id, result })
        }
        (None, Some(method)) => Some(Incoming::Notification { method, params }),
        (None, None) => None,
    }
}

#[derive(Default)]
struct Shared {
    pending: HashMap<u64, oneshot::Sender<Result<Value, String>>>,
    conversations: HashMap<String, mpsc::Sender<Note>>,
    /// Conversations with a turn kd started that the agent has not ended.
    busy: HashSet<String>,
    /// Why the process is gone, once it is.
    gone: Option<String>,
}

pub struct Peer {
    pub pid: u32,
    /// The process's start time (see [`process::start_time`]).
    pub started: Option<u64>,
    name: String,
    outbox: mpsc::Sender<String>,
    shared: Arc<Mutex<Shared>>,
    next_id: AtomicU64,
    /// Closes stdin when notified.
    close: Arc<tokio::sync::Notify>,
    /// True once the process has ended.
    ended: tokio::sync::watch::Receiver<bool>,
}

/// Stops following a conversation when dropped.
pub struct Following {
    pub notes: mpsc::Receiver<Note>,
    conversation: String,
    shared: Arc<Mutex<Shared>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        if let Ok(mut s) = self.shared.lock() {
            s.conversations.remove(&self.conversation);
        }
    }
}

impl Peer {
    /// Starts the process in `cwd` (the handshake is the caller's).
    pub fn start(inv: &Invocation, cwd: &Path, dialect: Arc<dyn Dialect>) -> std::io::Result<Peer> {
        Peer::start_for(inv, cwd, cwd, dialect)
    }

    /// [`Peer::start`] in `cwd`, serving `workspace` (see [`process::spawn_for`]).
    pub fn start_for(
        inv: &Invocation,
        cwd: &Path,
        workspace: &Path,
        dialect: Arc<dyn Dialect>,
    ) -> std::io::Result<Peer> {
        let mut child = process::spawn_for(inv, cwd, workspace)?;
        let pid = child.id().ok_or_else(|| std::io::Error::other("it exited at once"))?;
        let started = process::start_time(pid);
        // What it and all it starts carry (see `invocation`).
        let marker = inv
            .env
            .iter()
            .rfind(|(k, _)| k == process::PEER_MARKER)
            .map(|(k, v)| process::marker(k, v))
            .unwrap_or_default();
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(std::io::Error::other("its stdio could not be opened"));
        };
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (outbox, mut lines) = mpsc::channel::<String>(OUTBOX);
        let close = Arc::new(tokio::sync::Notify::new());
        let closing = close.clone();
        tokio::spawn(async move {
            loop {
                let mut line = tokio::select! {
                    line = lines.recv() => match line {
                        Some(line) => line,
                        None => break,
                    },
                    _ = closing.notified() => break,
                };
                line.push('\n');
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
            // Dropping stdin: EOF ends the process.
        });
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        let tail = super::lines::tail(stderr, STDERR_TAIL);
        let reader_shared = shared.clone();
        let replies = outbox.clone();
        let name = dialect.name().to_string();
        tokio::spawn(async move {
            let mut reader = LineReader::new(stdout);
            let mut exited = None;
            let drain = tokio::time::sleep(Duration::from_secs(365 * 24 * 3600));
            tokio::pin!(drain);
            loop {
                tokio::select! {
                    line = reader.next() => match line {
                        Ok(Some(Line::Text(line))) => route(&reader_shared, dialect.as_ref(), &replies, &line).await,
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => break,
                    },
                    status = child.wait(), if exited.is_none() => {
                        exited = Some(status.ok());
                        // What it wrote last is read; something it started
                        // may hold stdout open, so not for long.
                        drain.as_mut().reset(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                    }
                    _ = &mut drain => break,
                }
            }
            let status = match exited {
                Some(status) => status,
                None => child.wait().await.ok(),
            };
            // Nothing it started outlives it: its group (reaped, its pid
            // still names the group while members remain), and what left
            // the group, even for a session of its own, by its marker.
            process::signal_group(pid, rustix::process::Signal::KILL);
            if !marker.is_empty() {
                let killed =
                    tokio::task::spawn_blocking(move || process::kill_tree(pid, started, &marker)).await.unwrap_or(0);
                if killed > 0 {
                    tracing::debug!(pid, "killed {killed} process(es) the agent left running");
                }
            }
            let stderr = tokio::time::timeout(Duration::from_secs(1), tail).await.ok().and_then(Result::ok);
            let name = dialect.name();
            let how = match status.and_then(|s| s.code()) {
                Some(code) => format!("{name} exited (status {code})"),
                None => format!("{name} was killed"),
            };
            // Its own words: the `error:` line first, then its last lines.
            let why = match stderr.as_deref().and_then(super::outcome::explain) {
                Some(said) => format!("{how}: {said}"),
                None => how,
            };
            tracing::info!(pid, "{why}");
            if let Ok(mut s) = reader_shared.lock() {
                s.gone = Some(why);
                // Dropping the senders ends every wait and every run's notes.
                s.pending.clear();
                s.conversations.clear();
                s.busy.clear();
            }
            let _ = ended_tx.send(true);
        });
        Ok(Peer { pid, started, name, outbox, shared, next_id: AtomicU64::new(1), close, ended })
    }

    /// Whether the process has ended.
    pub fn is_gone(&self) -> bool {
        self.shared.lock().map(|s| s.gone.is_some()).unwrap_or(true)
    }

    /// Whether nothing is asked of the process: no request waits for an
    /// answer, no conversation is followed, no turn is in flight.
    pub fn is_idle(&self) -> bool {
        self.shared
            .lock()
            .map(|s| s.pending.is_empty() && s.conversations.is_empty() && s.busy.is_empty())
            .unwrap_or(false)
    }

    /// Why the process ended (or a general reason).
    pub fn gone_reason(&self) -> String {
        self.shared
            .lock()
            .ok()
            .and_then(|s| s.gone.clone())
            .unwrap_or_else(|| format!("{} stopped answering", self.name))
    }

    /// Sends the request `build(id)` and waits for its answer, for at most
    /// `timeout` (`None`: as long as it takes, e.g. a whole ACP turn).
    pub async fn request_within(
        &self,
        timeout: Option<Duration>,
        build: impl FnOnce(u64) -> Value,
    ) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.shared.lock().map_err(|_| "state lock poisoned".to_string())?;
            if let Some(why) = &s.gone {
                return Err(why.clone());
            }
            s.pending.insert(id, tx);
        }
        // However the wait ends — answered, timed out, or abandoned by a
        // run that stopped waiting — nothing is left waiting for the answer.
        let _forget = Forget { shared: &self.shared, id };
        self.notify(build(id)).await?;
        let answer = match timeout {
            Some(t) => tokio::time::timeout(t, rx).await.ok(),
            None => Some(rx.await),
        };
        match answer {
            Some(Ok(answer)) => answer,
            Some(Err(_)) => Err(self.gone_reason()),
            None => Err(format!("{} did not answer in {} s", self.name, timeout.unwrap_or_default().as_secs())),
        }
    }

    /// [`Peer::request_within`] the usual [`REQUEST_TIMEOUT`].
    pub async fn request(&self, build: impl FnOnce(u64) -> Value) -> Result<Value, String> {
        self.request_within(Some(REQUEST_TIMEOUT), build).await
    }

    /// Sends a message that has no answer.
    pub async fn notify(&self, message: Value) -> Result<(), String> {
        self.outbox.send(message.to_string()).await.map_err(|_| self.gone_reason())
    }

    /// Queues a message that has no answer now, before whatever is sent
    /// after (sent when there is room if the queue is full).
    pub fn notify_now(&self, message: Value) {
        if let Err(mpsc::error::TrySendError::Full(line)) = self.outbox.try_send(message.to_string()) {
            let outbox = self.outbox.clone();
            tokio::spawn(async move {
                let _ = outbox.send(line).await;
            });
        }
    }

    /// Follows the notifications of `conversation`.
    pub fn follow(&self, conversation: &str) -> Result<Following, String> {
        let (tx, notes) = mpsc::channel(PER_CONVERSATION);
        let mut s = self.shared.lock().map_err(|_| "state lock poisoned".to_string())?;
        if let Some(why) = &s.gone {
            return Err(why.clone());
        }
        s.conversations.insert(conversation.to_string(), tx);
        Ok(Following { notes, conversation: conversation.to_string(), shared: self.shared.clone() })
    }

    /// Marks a turn of `conversation` started, unless one kd started there
    /// has not ended yet (codex would take the prompt into it).
    pub fn begin_turn(&self, conversation: &str) -> Result<(), String> {
        let mut s = self.shared.lock().map_err(|_| "state lock poisoned".to_string())?;
        if !s.busy.insert(conversation.to_string()) {
            return Err(format!("{} has not ended this conversation's previous turn yet", self.name));
        }
        Ok(())
    }

    /// The turn of `conversation` ended (or never started).
    pub fn end_turn(&self, conversation: &str) {
        if let Ok(mut s) = self.shared.lock() {
            s.busy.remove(conversation);
        }
    }

    /// Ends the process: stdin is closed (EOF ends a well-behaved agent;
    /// the reader then kills its group), or after `grace` its group is
    /// killed.
    pub async fn stop(&self, grace: Duration) {
        self.close.notify_one();
        let mut ended = self.ended.clone();
        if tokio::time::timeout(grace, ended.wait_for(|e| *e)).await.is_err() {
            tracing::warn!(pid = self.pid, "{} did not exit on stdin EOF; killing its process group", self.name);
            process::signal_group(self.pid, rustix::process::Signal::KILL);
            let _ = tokio::time::timeout(grace, ended.wait_for(|e| *e)).await;
        }
    }
}

/// Forgets request `id` when dropped.
struct Forget<'a> {
    shared: &'a Mutex<Shared>,
    id: u64,
}

impl AsRef<Peer> for Peer {
    fn as_ref(&self) -> &Peer {
        self
    }
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.shared.lock() {
            s.pending.remove(&self.id);
        }
    }
}

impl Drop for Peer {
    /// Nobody can speak to the process any more (a start abandoned
    /// mid-handshake, a failed one, the daemon's end): it is ended, not left
    /// running until the daemon exits.
    fn drop(&mut self) {
        self.close.notify_one();
        if !*self.ended.borrow() {
            tracing::debug!(pid = self.pid, "{} dropped while running; killing its process group", self.name);
            process::signal_group(self.pid, rustix::process::Signal::KILL);
        }
    }
}

/// How a long-lived agent is started: `program ARGS` with stdin piped (kd
/// writes its requests there), the member's environment (`env`: its
/// `PATH`, then its own variables, see [`crate::config::AgentDef::run_env`]),
/// `KD_SOCKET`, and the marker every process it starts inherits (`KD_PEER`,
/// see [`process::PEER_MARKER`]).
pub fn invocation(program: &str, args: Vec<String>, env: Vec<(String, String)>, socket: &Path) -> Invocation {
    static STARTED: AtomicU64 = AtomicU64::new(1);
    let mut env = env;
    let socket = socket.display().to_string();
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    env.push((process::PEER_MARKER.to_string(), format!("{}.{n}@{socket}", std::process::id())));
    env.push(("KD_SOCKET".to_string(), socket));
    Invocation { program: program.to_string(), args, stdin: Some(String::new()), env }
}

/// Hands one line from the agent to whoever waits for it.
async fn route(shared: &Mutex<Shared>, dialect: &dyn Dialect, replies: &mpsc::Sender<String>, line: &str) {
    match incoming(line) {
        Some(Incoming::Response { id, result }) => {
            let waiting = shared.lock().ok().and_then(|mut s| s.pending.remove(&id));
            if let Some(tx) = waiting {
                let _ = tx.send(result);
            }
        }
        Some(Incoming::Request { id, method, params }) => match dialect.answer(&id, &method, &params) {
            Reply::Now(reply, note) => {
                let _ = replies.send(reply.to_string()).await;
                if let (Some(note), Some(conversation)) = (note, dialect.conversation(&method, &params)) {
                    deliver(shared, &conversation, note).await;
                }
            }
            Reply::Later(later) => ask(shared, dialect, replies, method, params, later).await,
        },
        Some(Incoming::Notification { method, params }) => {
            dialect.observe(&method, &params);
            let Some(conversation) = dialect.conversation(&method, &params) else { return };
            if dialect.ends_turn(&method)
                && let Ok(mut s) = shared.lock()
            {
                s.busy.remove(&conversation);
            }
            deliver(shared, &conversation, Note::new(method, params)).await;
        }
        None => tracing::debug!("skipped a line from {} that is no JSON-RPC message", dialect.name()),
    }
}

/// Hands a permission to the run following its conversation, which
/// replies when it is decided (see [`super::asking`]): the reading goes on
/// meanwhile. Nobody following the conversation: today's answer, at once.
async fn ask(
    shared: &Mutex<Shared>,
    dialect: &dyn Dialect,
    replies: &mpsc::Sender<String>,
    method: String,
    params: Value,
    later: Later,
) {
    let conversation = dialect.conversation(&method, &params);
    let note = Note { method, params, question: Some(later.question(replies.clone())) };
    let undelivered = match conversation {
        Some(c) => deliver(shared, &c, note).await,
        None => Some(note),
    };
    if let Some(question) = undelivered.and_then(|mut n| n.question.take()) {
        tracing::debug!("a permission nobody follows: answered as before approvals");
        let today = question.today.clone();
        question.answer(&today);
    }
}

/// Hands `note` to the run following `conversation`, if one does; gives
/// it back if none does.
async fn deliver(shared: &Mutex<Shared>, conversation: &str, note: Note) -> Option<Note> {
    let tx = shared.lock().ok().and_then(|s| s.conversations.get(conversation).cloned());
    match tx {
        // A run that stopped following dropped its receiver.
        Some(tx) => tx.send(note).await.err().map(|e| e.0),
        None => Some(note),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Silent;

    impl Dialect for Silent {
        fn name(&self) -> &str {
            "the silent agent"
        }
        fn conversation(&self, _method: &str, _params: &Value) -> Option<String> {
            None
        }
        fn ends_turn(&self, _method: &str) -> bool {
            false
        }
        fn answer(&self, id: &Value, _method: &str, _params: &Value) -> Reply {
            Reply::Now(serde_json::json!({"id": id, "result": null}), None)
        }
    }

    #[tokio::test]
    async fn an_abandoned_request_is_forgotten_and_a_dropped_peer_is_killed() {
        // Reads every request, answers none, and outlives its stdin.
        let inv = Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), "cat > /dev/null; exec sleep 600".into()],
            stdin: Some(String::new()),
            env: vec![],
        };
        let peer = Peer::start(&inv, Path::new("/"), Arc::new(Silent)).unwrap();
        let pid = peer.pid;
        let waited = tokio::time::timeout(Duration::from_millis(50), peer.request(|id| serde_json::json!({"id": id})));
        assert!(waited.await.is_err(), "never answered");
        assert!(peer.shared.lock().unwrap().pending.is_empty(), "the abandoned request is forgotten");
        let mut ended = peer.ended.clone();
        drop(peer);
        tokio::time::timeout(Duration::from_secs(30), ended.wait_for(|e| *e)).await.unwrap().unwrap();
        assert_eq!(process::start_time(pid), None, "killed and reaped");
    }
}
