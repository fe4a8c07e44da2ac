//! The OpenRPC description of every method ([`crate::api`]), served by
//! `rpc.discover`, rendered into docs/api.md's method reference, and used by the
//! daemon to refuse parameters a method does not take.
//!
//! Schemas come from the wire types themselves (schemars), so the document
//! cannot drift from the types; method and parameter names are listed here
//! once and checked against the server's method table by a test in `kdd`.

mod approval;
mod comment;
mod coordination;
mod member;
mod notify;
mod ship;
mod web;
mod work;

use std::sync::OnceLock;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Value, json};

use crate::error::ErrorCode;
use crate::types::*;

/// One parameter of a method.
#[derive(Debug, Clone)]
pub struct ParamDoc {
    pub name: &'static str,
    pub required: bool,
    pub summary: &'static str,
    schema: Schema,
}

/// One method (or subscription) of the API.
#[derive(Debug, Clone)]
pub struct MethodDoc {
    pub name: &'static str,
    pub summary: &'static str,
    pub params: Vec<ParamDoc>,
    pub result_name: &'static str,
    result: Schema,
    pub errors: Vec<ErrorCode>,
    /// For subscriptions: the notification method and the unsubscribe method.
    pub subscription: Option<(&'static str, &'static str)>,
}

impl MethodDoc {
    /// Whether `name` is one of this method's parameters.
    pub fn takes(&self, name: &str) -> bool {
        self.params.iter().any(|p| p.name == name)
    }

    pub fn param_names(&self) -> Vec<&'static str> {
        self.params.iter().map(|p| p.name).collect()
    }
}

/// What the `path` parameter of a request that starts runs (or shows how
/// they would run) is.
const PATH_PARAM: &str = "the PATH of the asking client's shell (at most 32 KiB, no NUL): the members' CLIs are found \
     on it and run with it, as that shell would, and it is kept with the exchange for its later rounds, hand-offs and \
     a resume after a restart (never logged). Default: the daemon's own PATH";

/// Every method, in reference order.
pub fn methods() -> &'static [MethodDoc] {
    &api().0
}

/// Look a method up by its wire name: its name, parameters, errors and
/// subscription, without its schemas (empty here; [`methods`] has them).
///
/// The daemon reads this on every call (which parameters a method takes,
/// whether it is a subscription), so it is built without generating a
/// schema: building the whole document on a daemon's first call cost
/// ~2 MB of heap and the code of every type's schema (`kdd idle RSS` in
/// the §9 bench), for a document only `rpc.discover` serves.
pub fn method(name: &str) -> Option<&'static MethodDoc> {
    static SIGNATURES: OnceLock<Vec<MethodDoc>> = OnceLock::new();
    SIGNATURES.get_or_init(signatures).iter().find(|m| m.name == name)
}

/// The OpenRPC 1.2 document.
pub fn document() -> &'static Value {
    &api().1
}

fn api() -> &'static (Vec<MethodDoc>, Value) {
    static API: OnceLock<(Vec<MethodDoc>, Value)> = OnceLock::new();
    API.get_or_init(build)
}

struct Builder {
    /// None: the methods' signatures only, no schema generated.
    generator: Option<SchemaGenerator>,
    methods: Vec<MethodDoc>,
}

impl Builder {
    fn method<R: JsonSchema>(
        &mut self,
        name: &'static str,
        result_name: &'static str,
        summary: &'static str,
    ) -> &mut MethodDoc {
        let result = self.generator.as_mut().map(|g| g.subschema_for::<R>()).unwrap_or_default();
        self.methods.push(MethodDoc {
            name,
            summary,
            params: Vec::new(),
            result_name,
            result,
            errors: Vec::new(),
            subscription: None,
        });
        let last = self.methods.len() - 1;
        &mut self.methods[last]
    }

    /// Adds a parameter to the last method.
    fn param<T: JsonSchema>(&mut self, name: &'static str, required: bool, summary: &'static str) -> &mut Self {
        let schema = self.generator.as_mut().map(|g| g.subschema_for::<T>()).unwrap_or_default();
        if let Some(m) = self.methods.last_mut() {
            m.params.push(ParamDoc { name, required, summary, schema });
        }
        self
    }

    /// `path`: the asking client's `PATH`, which the runs a request starts
    /// are found and run with.
    fn path_param(&mut self) -> &mut Self {
        self.param::<String>("path", false, PATH_PARAM)
    }

    fn errors(&mut self, errors: &[ErrorCode]) -> &mut Self {
        if let Some(m) = self.methods.last_mut() {
            m.errors.extend_from_slice(errors);
        }
        self
    }
}

fn build() -> (Vec<MethodDoc>, Value) {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas/".into();
    let mut b = Builder { generator: Some(settings.into_generator()), methods: Vec::new() };
    declare(&mut b);
    let definitions = b.generator.as_mut().map(|g| g.take_definitions(true)).unwrap_or_default();
    let doc = json!({
        "openrpc": "1.2.6",
        "info": {
            "title": "kdd",
            "version": env!("CARGO_PKG_VERSION"),
            "description": format!("The kd daemon. Protocol version {}. Times are Unix milliseconds.", crate::PROTOCOL_VERSION),
        },
        "methods": b.methods.iter().map(method_json).collect::<Vec<_>>(),
        "components": {
            "schemas": definitions,
            "errors": ErrorCode::ALL.iter().map(|c| (c.name().to_string(), json!({"code": c.code(), "message": c.name()}))).collect::<serde_json::Map<_, _>>(),
        },
    });
    (b.methods, doc)
}

/// Every method without its schemas.
fn signatures() -> Vec<MethodDoc> {
    let mut b = Builder { generator: None, methods: Vec::new() };
    declare(&mut b);
    b.methods
}

/// Every method, in reference order.
fn declare(b: &mut Builder) {
    use ErrorCode::*;
    b.method::<Hello>(
        "daemon.hello",
        "hello",
        "Protocol version and capabilities. Clients call it first and refuse another protocol.",
    );
    b.method::<DaemonStatus>("daemon.status", "status", "Version, pid, uptime, socket and database paths, schema version, counts of threads, runs, clients and subscriptions.");
    b.method::<ShutdownAck>("daemon.shutdown", "ack", "Stop gracefully: stop accepting, cancel runs in flight and record them as interrupted, close the database, remove the socket, exit 0. The exchanges it cut resume at the next start, unless resume is false: then they are stopped for good.");
    b.param::<bool>("resume", false, "resume the exchanges cut at the next start (default true)");
    b.method::<Vec<Check>>("daemon.doctor", "checks", "Checks, one per line of `kd doctor`: the database (integrity), the workspace's configuration, and each member's CLI as the daemon would run it (found, `--version`).");
    b.param::<String>("workspace", true, "the workspace whose council is checked (absolute)")
        .path_param()
        .errors(&[InvalidArgument]);
    b.method::<Value>("rpc.discover", "document", "This OpenRPC document.");

    b.method::<Thread>("thread.create", "thread", "Create a thread.");
    b.param::<String>("workspace", true, "directory the conversation belongs to (absolute)")
        .param::<String>("branch", false, "git branch of the workspace")
        .param::<String>("title", false, "a title to show in lists")
        .param::<Vec<String>>("members", false, "council members, in turn order")
        .param::<String>("id", false, "the id to use instead of a generated one: [a-z0-9][a-z0-9-]*")
        .param::<Lineage>("lineage", false, "trunk (default) or branch")
        .param::<String>("parent", false, "the thread a branch forks from (required for a branch)")
        .param::<bool>("set_current", false, "make it the current thread of workspace+branch")
        .param::<ContextMode>(
            "context",
            false,
            "history (default): the whole thread in every prompt; resume: the backend's own session",
        )
        .errors(&[InvalidArgument, AlreadyExists, NotFound]);
    b.method::<Vec<Thread>>("thread.list", "threads", "Threads, most recently active first.");
    b.param::<String>("workspace", false, "only threads of this workspace")
        .param::<ThreadStatus>("status", false, "only threads with this status")
        .param::<u32>("limit", false, "at most this many (default all)");
    b.method::<Thread>("thread.get", "thread", "One thread.");
    b.param::<String>("thread", true, "thread id").errors(&[NotFound]);
    b.method::<Option<Thread>>(
        "thread.current",
        "thread",
        "The current thread of a workspace and branch, or null. When it is a branch that was archived or \
         deleted, the trunk is made current again and returned.",
    );
    b.param::<String>("workspace", true, "workspace directory").param::<String>("branch", false, "git branch");
    b.method::<Thread>("thread.set_current", "thread", "Make a thread the current one of a workspace and branch.");
    b.param::<String>("workspace", true, "workspace directory")
        .param::<String>("branch", false, "git branch")
        .param::<String>("thread", true, "thread id")
        .errors(&[NotFound]);
    b.method::<Thread>(
        "thread.archive",
        "thread",
        "Archive a thread (F-L2): its sessions are archived with it, a summary is written, and messages to it are \
         refused (thread_archived) until thread.unarchive.",
    );
    b.param::<String>("thread", true, "thread id").errors(&[NotFound]);
    b.method::<Vec<SearchHit>>(
        "search.query",
        "hits",
        "Full-text search over every message body, thread title and summary (SQLite FTS5 query syntax: words, \
         \"a phrase\", prefix*, AND/OR/NOT, NEAR(a b, 5), body: or title: columns). Threads found by title or \
         summary come first, then messages, each best first (bm25); snippets mark each hit «like this».",
    );
    b.param::<String>("query", true, "the FTS5 query")
        .param::<String>("thread", false, "only this thread")
        .param::<String>("from", false, "only messages from this sender")
        .param::<i64>("since_ms", false, "only messages written since then (Unix ms)")
        .param::<u32>("limit", false, "most hits (default 20, at most 200)")
        .errors(&[InvalidArgument, NotFound]);
    b.method::<CostReport>(
        "cost.report",
        "report",
        "What the members' answers cost, as their agents reported it (cost_usd, input and output tokens from the \
         usage each backend gives; codex reports a resumed session's usage cumulatively), summed by member, \
         thread, UTC day, exchange or exchange/round, highest first, with the total.",
    );
    b.param::<String>("thread", false, "only this thread (needed for by: exchange)")
        .param::<String>("workspace", false, "only threads of this workspace")
        .param::<i64>("since_ms", false, "only answers written since then (Unix ms)")
        .param::<CostBy>("by", false, "member (default), thread, day, exchange or round")
        .errors(&[NotFound, InvalidArgument]);
    b.method::<Thread>(
        "thread.summarize",
        "thread",
        "Write the thread's summary now: by the lifecycle.summarizer member (a run given the thread's newest \
         messages and the summary prompt), or, with none or when it fails, the extractive summary (the King's \
         first questions and each member's last answer). Stored on the thread; answers when it is written.",
    );
    b.param::<String>("thread", true, "thread id").path_param().errors(&[NotFound, InvalidArgument]);
    b.method::<Thread>(
        "thread.fork",
        "thread",
        "Fork a branch thread (F-L1) from thread: same workspace, members and context mode, its own sessions, made \
         current. Its first message (kind system, purpose bundle) is the context bundle: the files of \
         lifecycle.bundle present in the workspace (default AGENTS.md, CLAUDE.md), read now, the parent's \
         summary if it has one, and what carry says: the parent's conversation so far in the history format \
         (conversation, the default: lifecycle.fork_carry), a summary of it made now (summary: by the \
         lifecycle.summarizer member, else extractive) or nothing more (none); members are given it with the \
         history, in resume mode in each member's first prompt of the branch.",
    );
    b.param::<String>("thread", true, "the parent thread");
    b.param::<String>("title", false, "the branch's title");
    b.param::<Carry>(
        "carry",
        false,
        "conversation, summary or none; default the workspace's lifecycle.fork_carry (conversation)",
    )
    .path_param()
    .errors(&[NotFound, InvalidArgument]);
    b.method::<Thread>("thread.unarchive", "thread", "Open an archived thread again: active, taking messages.");
    b.param::<String>("thread", true, "thread id").errors(&[NotFound]);
    b.method::<Deleted>(
        "thread.delete",
        "deleted",
        "Delete a thread with its messages, runs, sessions, inbox and events. Refused while runs are in flight \
         unless force, which cancels them first.",
    );
    b.param::<String>("thread", true, "thread id");
    b.param::<bool>("force", false, "cancel the runs in flight first").errors(&[NotFound, InvalidArgument]);
    b.method::<Thread>("thread.set_title", "thread", "Name a thread: one line of 1 to 200 characters without control characters, stored trimmed (the rule every title follows).");
    b.param::<String>("thread", true, "thread id");
    b.param::<String>("title", true, "the title").errors(&[NotFound, InvalidArgument]);
    b.method::<Vec<Message>>(
        "thread.messages",
        "messages",
        "Messages of a thread, oldest first, a page at a time: an answer holds at most a quarter of the daemon's \
         response limit of message text (and at least one message), so read on after the last seq it gave until \
         a page is empty. With before_seq and no since_seq, the page is the newest messages before it.",
    );
    b.param::<String>("thread", true, "thread id")
        .param::<u64>("since_seq", false, "only messages with a larger seq (the page starts there)")
        .param::<u32>("limit", false, "at most this many (default: as many as fit the page)")
        .param::<u64>("before_seq", false, "only messages with a smaller seq")
        .param::<bool>(
            "bodies",
            false,
            "false: the messages without their text (body \"\"), e.g. to fix the display order first (default true)",
        )
        .errors(&[NotFound]);
    b.method::<Vec<Rendered>>(
        "thread.render",
        "rendered",
        "Messages' bodies rendered from markdown to sanitised HTML (what kd web shows): no script, event handler, \
         style, image or link other than http, https and mailto; raw HTML in a body shows as text. In the order \
         of seqs.",
    );
    b.param::<String>("thread", true, "thread id")
        .param::<Vec<u64>>("seqs", true, "the messages' seqs, at most 100")
        .errors(&[NotFound, InvalidArgument]);
    b.method::<Message>("message.append", "message", "Append a message; it gets the next seq of the thread.");
    b.param::<String>("thread", true, "thread id")
        .param::<String>("from", true, "sender: king or a member name")
        .param::<String>("body", true, "the text, verbatim")
        .param::<Vec<String>>("to", false, "addressees (default [\"all\"]); each name is kept once")
        .param::<Vec<String>>("cc", false, "copied members; a name also in to is dropped from cc")
        .param::<u64>("reply_to", false, "seq of the message answered")
        .param::<MessageKind>("kind", false, "default king when from is king, else agent")
        .param::<u32>("round", false, "council round")
        .param::<String>("correlation_id", false, "recorded in the event log")
        .param::<Fence>("fence", false, "lock token that must still be current for the write to happen")
        .errors(&[InvalidArgument, NotFound, StaleToken, ThreadArchived]);
    b.method::<ThreadEvent>("thread.subscribe", "event", "Subscribe to a thread: first the messages after since_seq (if given) and where the thread's exchanges stand (the last round of those begun after since_seq that are over, the round under way, the runs in flight), then live events, in order and without a gap. Notifications are thread.event; cancel with thread.unsubscribe.");
    b.param::<String>("thread", true, "thread id")
        .param::<u64>("since_seq", false, "send the backlog of messages after this seq first (0 for all)")
        .param::<bool>(
            "pending",
            false,
            "the thread may not exist yet: subscribe to the id a council.send with new_thread is about to create",
        )
        .errors(&[NotFound, LimitExceeded]);
    if let Some(m) = b.methods.last_mut() {
        m.subscription = Some(("thread.event", "thread.unsubscribe"));
    }

    b.method::<Sent>("council.send", "sent", "Append a King message and start its exchange: a first round (parallel in broadcast mode, round-robin in sequential mode) by the addressed members, then up to `rounds` (default council.auto_rounds) sequential rounds in member order. Members named by `to` or by @mentions in the body get a directed message (one round); otherwise, or with @all, every member answers (one round when a single member answers). Muted members are not queried. A new message stops the thread's pending auto-turns. A member already answering another message on the thread gets a run of its own, queued (status queued) behind the run in flight: never started twice at once, never dropped. Members and agents come from the workspace's .kd/config.json, read on every send.");
    b.param::<String>("thread", true, "thread id")
        .param::<String>("body", true, "the King's message")
        .param::<Vec<String>>("to", false, "only these members")
        .param::<Vec<String>>("mute", false, "members not to query")
        .param::<Style>("style", false, "council (default) or chat: which preamble frames the prompt")
        .param::<u64>(
            "timeout_s",
            false,
            "per-run timeout for this send, in seconds (default: the member's or council.timeout)",
        )
        .param::<String>("correlation_id", false, "recorded in the event log")
        .param::<u32>("rounds", false, "auto rounds after the first (default council.auto_rounds; 0 for none)")
        .param::<NewThread>(
            "new_thread",
            false,
            "create the thread `thread` with its first message; nothing is created if the message is refused. With \
             lineage trunk it must be its workspace's first thread (already_exists when a trunk was made \
             meanwhile: ask the current thread instead)",
        )
        .path_param()
        .errors(&[InvalidArgument, NotFound, AlreadyExists, ThreadArchived]);
    b.method::<ThreadEvent>("council.ask", "event", "Ask a King's question the way `kd ask` does, in one call: in the current thread of new_thread's workspace and branch, or — when it has none — in new_thread, created as thread `thread` with the question; subscribed to from before the question. The first notification is `asked` (the thread, the seq after which its events follow, and what council.send answers); the thread's events follow as thread.subscribe sends them. A question refused (as council.send refuses one, or by a client of another protocol) is refused whole: no message, thread or run is written and no subscription made. Notifications are council.event; cancel with council.unask.");
    b.param::<u32>("protocol", true, "the client's protocol version (daemon.hello's): another daemon's is refused, nothing asked")
        .param::<String>("thread", true, "the id of the thread new_thread makes, when the workspace has no current thread")
        .param::<NewThread>(
            "new_thread",
            true,
            "the workspace and branch whose current thread is asked; the thread made when there is none (lineage trunk:              already_exists when another question made the trunk meanwhile: ask again)",
        )
        .param::<String>("body", true, "the King's message")
        .param::<Vec<String>>("to", false, "only these members")
        .param::<Vec<String>>("mute", false, "members not to query")
        .param::<u64>("timeout_s", false, "per-run timeout in seconds")
        .param::<u32>("rounds", false, "auto rounds after the first (default council.auto_rounds; 0 for none)")
        .path_param()
        .errors(&[InvalidArgument, NotFound, AlreadyExists, ThreadArchived, LimitExceeded]);
    if let Some(m) = b.methods.last_mut() {
        m.subscription = Some(("council.event", "council.unask"));
    }
    b.method::<Interrupted>("council.interrupt", "interrupted", "Cancel the runs on the thread started by the calling client (all runs with `all`) and stop further auto-turns until the next King message.");
    b.param::<String>("thread", true, "thread id")
        .param::<bool>("all", false, "cancel every run on the thread, whoever started it")
        .errors(&[NotFound]);
    b.method::<Vec<RunInfo>>("council.retry", "runs", "Re-query the members whose last run failed (error or timed out). Each retry answers the same message as the failed run, in the same round, and its message names the failed one in `replaces`: clients show it in that place. Starts no auto-rounds.");
    b.param::<String>("thread", true, "thread id")
        .param::<Style>("style", false, "council (default) or chat")
        .param::<u64>("timeout_s", false, "per-run timeout in seconds")
        .path_param()
        .errors(&[NotFound, InvalidArgument]);
    b.method::<ExchangeInfo>("exchange.get", "exchange", "The daemon's view of the exchange begun by a message (a King message's rounds, a completion, a member's work; the council or work one when the message began several): its kind, state (open — kdd goes on with it, after a restart too —, done, or stopped for good), and each step (round, member, purpose, state, run, message, attempts). A client that reconnected after a restart asks it to know whether what it waited on is over. not_found when the message began none (or before the journal).");
    b.param::<String>("thread", true, "thread id")
        .param::<u64>("seq", true, "the message that began it")
        .errors(&[NotFound, InvalidArgument]);
    b.method::<ConfigView>("config.get", "config", "The effective configuration of a workspace, value by value, with where each came from (the file, default, or found on PATH). An invalid file is an invalid_argument error naming the file, the key and the value.");
    b.param::<String>("workspace", true, "workspace directory (absolute)").path_param().errors(&[InvalidArgument]);
    b.method::<Thread>("thread.import", "thread", "Create a thread with its messages in one transaction, keeping their times (for `kd import`). Uses `id` when it is free.");
    b.param::<String>("workspace", true, "workspace directory (absolute)")
        .param::<String>("branch", false, "git branch")
        .param::<String>("id", false, "the id to use if it is free")
        .param::<String>("title", false, "a title (default: the first line of the first King message)")
        .param::<Vec<String>>("members", false, "council members")
        .param::<i64>("created_at_ms", false, "when the thread was created")
        .param::<Vec<ImportedMessage>>("messages", true, "the messages, in order")
        .param::<String>(
            "origin",
            false,
            "where the thread comes from; a second import of the same origin is refused with already_exists (data: thread)",
        )
        .errors(&[InvalidArgument, AlreadyExists]);
    b.method::<Vec<RunInfo>>("run.list", "runs", "Runs in flight, with their agent pids.");
    b.param::<String>("thread", false, "only this thread");
    b.method::<Vec<RunInfo>>("run.cancel", "cancelled", "Cancel runs in flight on a thread (all, one member's, or one run): SIGINT for claude, SIGTERM for the others, SIGKILL after a grace period. Each is recorded as cancelled with an interrupted message holding its text.");
    b.param::<String>("thread", true, "thread id")
        .param::<String>("member", false, "only this member's run")
        .param::<String>("run", false, "only this run")
        .errors(&[NotFound]);

    b.method::<Session>(
        "session.start",
        "session",
        "Start an active session for an agent on a thread. At most one session per thread and agent is active.",
    );
    b.param::<String>("thread", true, "thread id")
        .param::<String>("agent", true, "member name")
        .param::<String>("backend_session_id", false, "the backend's own session id, what --resume takes")
        .param::<String>("holder", false, "who holds it (client or run label)")
        .param::<u32>("pid", false, "process using it; if it dies the session is free")
        .param::<Value>("metadata", false, "any JSON object")
        .errors(&[InvalidArgument, NotFound, SessionActive]);
    b.method::<Session>("session.resume", "session", "Resume a session. Refused with session_active (data: holder, pid) while another holder has it active: a conversation is never forked.");
    b.param::<String>("session", true, "session id")
        .param::<String>("holder", false, "who resumes it")
        .param::<u32>("pid", false, "process using it")
        .errors(&[NotFound, SessionActive]);
    b.method::<Session>("session.end", "session", "End a session (status completed unless given).");
    b.param::<String>("session", true, "session id")
        .param::<SessionStatus>("status", false, "completed (default), expired, idle or archived")
        .param::<String>("backend_session_id", false, "record the backend's session id")
        .errors(&[NotFound, InvalidArgument]);
    b.method::<Vec<Session>>(
        "session.list",
        "sessions",
        "Sessions, newest first. An active session whose holder process has died is released (expired) on the way.",
    );
    b.param::<String>("thread", false, "only this thread")
        .param::<String>("agent", false, "only this agent")
        .param::<SessionStatus>("status", false, "only this status");
    b.method::<Session>("session.get", "session", "One session: whether it exists, its status and holder. An active session whose holder process has died is released (expired) first.");
    b.param::<String>("session", true, "session id").errors(&[NotFound]);

    b.method::<LockOutcome>("lock.acquire", "outcome", "Acquire a conversation lock for ttl_ms: acquired with a fencing token that grows with every acquisition, or denied with the holder and expires_in_ms. A lock whose TTL passed or whose holder pid died is free. The same holder and pid re-acquiring renews it.");
    b.param::<String>("resource", true, "what is locked, e.g. a thread id")
        .param::<String>("holder", true, "who wants it")
        .param::<u64>("ttl_ms", true, "how long it is held unless released (1 ms to 24 h)")
        .param::<u32>("pid", false, "holder process; if it dies the lock is free")
        .errors(&[InvalidArgument]);
    b.method::<LockReleased>(
        "lock.release",
        "released",
        "Release a lock; refused with stale_token unless token is the current one.",
    );
    b.param::<String>("resource", true, "what is locked")
        .param::<u64>("token", true, "the fencing token from lock.acquire")
        .errors(&[StaleToken]);
    b.method::<Vec<Lock>>("lock.list", "locks", "Locks currently held (expired and dead-holder locks are not listed).");
    b.param::<String>("resource", false, "only this resource");

    coordination::methods(b);
    member::methods(b);
    work::methods(b);
    ship::methods(b);
    comment::methods(b);
    approval::methods(b);
    notify::methods(b);
    web::methods(b);

    b.method::<Vec<Event>>(
        "events.list",
        "events",
        "The event log: sessions, messages, runs, locks, and the coordination layer's routing.*, \
         delivery.*, queue.*, completion.*, system.emergency_*, resource.* and race.* decisions. Like tail: the \
         newest events that pass the filter (before before_id when given), or with since_id the first ones after \
         it; oldest first either way. Page back with before_id = the first id returned, forward with since_id = \
         the last.",
    );
    b.param::<String>("thread", false, "only this thread")
        .param::<String>("agent", false, "only events concerning this agent")
        .param::<String>("kind", false, "only this kind, e.g. message or session.resume; a family with .*, e.g. race.*")
        .param::<u64>("since_id", false, "only events with a larger id, the first of them (0: from the start)")
        .param::<u32>("limit", false, "at most this many (default and most: 1000; more is refused, not cut)")
        .param::<u64>("before_id", false, "only events with a smaller id, the newest of them")
        .errors(&[InvalidArgument]);
}

fn method_json(m: &MethodDoc) -> Value {
    let mut v = json!({
        "name": m.name,
        "summary": m.summary,
        "paramStructure": "either",
        "params": m.params.iter().map(|p| json!({
            "name": p.name,
            "required": p.required,
            "summary": p.summary,
            "schema": p.schema,
        })).collect::<Vec<_>>(),
        "result": { "name": m.result_name, "schema": m.result },
        "errors": m.errors.iter().map(|c| json!({"code": c.code(), "message": c.name()})).collect::<Vec<_>>(),
    });
    if let Some((notification, unsubscribe)) = m.subscription {
        v["x-subscription"] = json!({ "notification": notification, "unsubscribe": unsubscribe });
    }
    v
}

/// The Markdown RPC reference included in docs/api.md.
pub fn markdown_reference() -> String {
    let mut out = String::new();
    for m in methods() {
        out.push_str(&format!("### `{}`\n\n{}\n\n", m.name, m.summary));
        if m.params.is_empty() {
            out.push_str("No parameters.\n\n");
        } else {
            out.push_str("| param | type | required | meaning |\n|---|---|---|---|\n");
            for p in &m.params {
                out.push_str(&format!(
                    "| `{}` | {} | {} | {} |\n",
                    p.name,
                    type_name(&p.schema),
                    if p.required { "yes" } else { "no" },
                    p.summary.replace('|', "\\|")
                ));
            }
            out.push('\n');
        }
        out.push_str(&format!("Returns: {}.", type_name(&m.result)));
        if let Some((n, u)) = m.subscription {
            out.push_str(&format!(" Notifications: `{n}`; unsubscribe: `{u}`."));
        }
        if !m.errors.is_empty() {
            let names: Vec<String> = m.errors.iter().map(|c| format!("{} `{}`", c.code(), c.name())).collect();
            out.push_str(&format!(" Errors: {}.", names.join(", ")));
        }
        out.push_str("\n\n");
    }
    out
}

/// A short human name of a schema: `Thread`, `string`, `array of Message`, …
fn type_name(schema: &Schema) -> String {
    let v = schema.as_value();
    if let Some(r) = v.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().unwrap_or(r).to_string();
    }
    if let Some(any) = v.get("anyOf").or_else(|| v.get("oneOf")).and_then(Value::as_array) {
        let names: Vec<String> =
            any.iter().filter_map(|s| Schema::try_from(s.clone()).ok()).map(|s| type_name(&s)).collect();
        return names.join(" or ");
    }
    match v.get("type") {
        Some(Value::String(t)) if t == "array" => {
            let item = v.get("items").cloned().and_then(|s| Schema::try_from(s).ok());
            format!("array of {}", item.map(|s| type_name(&s)).unwrap_or_else(|| "any".into()))
        }
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ if v.as_bool() == Some(true) || v.as_object().is_some_and(|o| o.is_empty()) => "any JSON".into(),
        _ => "object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_has_a_unique_name_and_unique_params() {
        let mut names = std::collections::HashSet::new();
        for m in methods() {
            assert!(names.insert(m.name), "{} listed twice", m.name);
            let mut params = std::collections::HashSet::new();
            for p in &m.params {
                assert!(params.insert(p.name), "{}: param {} listed twice", m.name, p.name);
            }
        }
    }

    /// What the daemon checks calls against (built without schemas) is
    /// the document's methods, name for name and parameter for parameter.
    #[test]
    fn the_signatures_are_the_documents_methods() {
        let key = |m: &MethodDoc| {
            let params: Vec<_> = m.params.iter().map(|p| (p.name, p.required, p.summary)).collect();
            (m.name, m.summary, params, m.result_name, m.errors.clone(), m.subscription)
        };
        let documented: Vec<_> = methods().iter().map(key).collect();
        let signed: Vec<_> = signatures().iter().map(key).collect();
        assert_eq!(signed, documented);
        assert!(methods().iter().all(|m| method(m.name).map(key) == Some(key(m))));
        assert!(method("no.such").is_none());
    }

    #[test]
    fn document_refs_resolve() {
        let doc = document().to_string();
        let schemas = &document()["components"]["schemas"];
        let mut rest = doc.as_str();
        while let Some(i) = rest.find("#/components/schemas/") {
            rest = &rest[i + "#/components/schemas/".len()..];
            let end = rest.find('"').unwrap_or(rest.len());
            let name = &rest[..end];
            assert!(schemas.get(name).is_some(), "dangling $ref to {name}");
        }
        assert_eq!(document()["methods"].as_array().map(Vec::len), Some(methods().len()));
    }

    #[test]
    fn the_api_pages_reference_is_current() {
        let readme = include_str!("../../../docs/api.md");
        let reference = markdown_reference();
        assert!(
            readme.contains(&reference),
            "docs/api.md's method reference is out of date; regenerate it with \
             `cargo run -p kd-client --bin kd -- rpc-reference` and paste it between the markers"
        );
    }

    #[test]
    fn type_names_read_well() {
        let method = |name: &str| methods().iter().find(|m| m.name == name);
        let m = method("thread.messages").map(|m| (type_name(&m.result), type_name(&m.params[1].schema)));
        assert_eq!(m, Some(("array of Message".to_string(), "integer".to_string())));
        let m = method("thread.current").map(|m| type_name(&m.result));
        assert_eq!(m.as_deref(), Some("Thread or null"));
    }
}
