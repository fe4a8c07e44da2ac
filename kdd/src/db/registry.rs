//! The storage interface: every operation kdd asks of its registry, named
//! by what kdd needs (threads, messages, runs, sessions, locks, the
//! exchange journal…), not by how an engine keeps it.
//!
//! [`Db`] is the handle every subsystem holds (`Arc<Db>`): an enum of the
//! engines, whose methods are the operations listed once below and passed
//! to the engine in use. Each engine implements every operation as an
//! inherent `async fn` of the same signature — a list the compiler checks
//! against both, with no boxed future per call. Rules for every operation,
//! whatever the engine:
//!
//! - **one operation, one transaction**: a caller never composes writes;
//!   what must be atomic is one operation;
//! - **events after commit**: what a write tells subscribers reaches the
//!   hub only once it has committed, before the caller hears back;
//! - the same result, errors ([`DbError`]) and order for the same calls:
//!   the engines' contract tests check it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kd_proto::paths::DbLocation;
use kd_proto::types::{
    Ack, CostBy, CostReport, DeliveryMode, Event, ExchangeInfo, InboxItem, InboxStatus, Lock, LockOutcome,
    LockReleased, Message, NodeStatus, RouteType, RunInfo, SearchHit, Session, SessionStatus, Thread, ThreadStatus,
};
use kd_proto::work::{WorkCheck, WorkState, Worktree};
use serde_json::Value;

use kd_proto::approval::Approval;
use kd_proto::comment::Comment;

use super::approvals::{Decide, Decided};
use super::check::{CheckEnded, Fix, Started};
use super::compose::{Asked, Routed, Routing};
use super::events::{EventFilter, Record};
use super::exchanges::kd_step::{EventsOf, KdStep};
use super::exchanges::{Exchange, ExchangeId, Kind, NewExchange, Opened, Purpose, Step, StepId, StepKey};
use super::lifecycle::{Material, Summary};
use super::messages::{NewMessage, Page};
use super::outage::Again;
use super::pg::{self, Pg};
use super::runs::{Finish, Orphan, RunStart};
use super::sessions::{NewSession, SessionEnd};
use super::sqlite::Sqlite;
use super::threads::NewThread;
use super::{DbError, DbResult, cost, inbox, search};
use crate::hub::Hub;

/// The handle to the registry, whichever engine keeps it.
pub struct Db {
    engine: Engine,
    /// kd's data directory on this machine (members' worktrees live there).
    data: PathBuf,
    /// This daemon, as the registry knows it.
    me: Node,
    /// Whether the registry is away, as the writes kept for it see it.
    pub(super) outage: super::outage::Outage,
}

/// A kdd process of the registry: one per host and socket.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its name (`kdd --node`, by default the host name).
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub socket: String,
    /// How long it stays live after a heartbeat, and holds what it leased
    /// (`kdd --cluster-lease-ms`).
    pub lease: std::time::Duration,
}

#[cfg(test)]
impl Node {
    /// This process as a node named `id`.
    pub fn here(id: &str) -> Node {
        Node {
            id: id.into(),
            host: "localhost".into(),
            pid: std::process::id(),
            socket: "/test.sock".into(),
            lease: pg::nodes::LEASE,
        }
    }
}

/// The engine in use.
enum Engine {
    /// One file on this machine (the default).
    Sqlite(Sqlite),
    /// A PostgreSQL database several nodes may share; this node's
    /// incarnation there.
    Postgres { pg: Arc<Pg>, incarnation: i64 },
}

/// Declares the operations of the interface: each becomes a method of
/// [`Db`] that runs the engine's operation of the same name.
macro_rules! operations {
    ($( $(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident : $ty:ty)* $(,)?) -> $ret:ty; )*) => {
        impl Db {
            $(
                $(#[$doc])*
                pub async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    match &self.engine {
                        Engine::Sqlite(e) => e.$name($($arg),*).await,
                        Engine::Postgres { pg, .. } => pg.$name($($arg),*).await,
                    }
                }
            )*
        }
    };
}

operations! {
    // ---- approvals ----
    /// Records an approval (pending, or decided by the policy) asked by a run of `node`; tells the thread.
    fn add_approval(&self, a: Approval, node: String) -> DbResult<()>;
    /// One approval.
    fn approval(&self, id: String) -> DbResult<Option<Approval>>;
    /// Approvals, newest first: pending only unless `all`; of one thread or all; at most `limit`.
    fn approvals(&self, all: bool, thread: Option<String>, limit: u32) -> DbResult<Vec<Approval>>;
    /// Ends a pending approval (decided, expired, cancelled) once; tells the thread.
    fn decide_approval(&self, d: Decide) -> DbResult<Decided>;
    /// What the King granted `member` on `thread` for the thread, or for the run `run`.
    fn approvals_granted(&self, thread: String, member: String, run: Option<String>) -> DbResult<Vec<Approval>>;
    /// Cancels the pending approvals of `node`'s runs (the node starts again).
    fn cancel_node_approvals(&self, node: String, message: String) -> DbResult<Vec<Approval>>;
    // ---- threads ----
    /// A new thread (a trunk, or a branch of its workspace's trunk); at most one trunk per
    /// workspace and git branch.
    fn create_thread(&self, t: NewThread) -> DbResult<Thread>;
    /// One thread.
    fn thread(&self, id: String) -> DbResult<Thread>;
    /// Threads (of a workspace, in a status), most recently active first.
    fn threads(&self, workspace: Option<String>, status: Option<ThreadStatus>, limit: Option<u32>) -> DbResult<Vec<Thread>>;
    /// The thread a workspace and git branch are on, if any.
    fn current_thread(&self, workspace: String, branch: Option<String>) -> DbResult<Option<Thread>>;
    /// Puts a workspace and git branch on a thread.
    fn set_current_thread(&self, workspace: String, branch: Option<String>, id: String) -> DbResult<Thread>;
    /// The trunk thread of a workspace and git branch, if it has one.
    fn trunk(&self, workspace: String, branch: Option<String>) -> DbResult<Option<String>>;
    /// The members a thread was last asked with.
    fn set_thread_members(&self, id: String, members: Vec<String>) -> DbResult<()>;

    // ---- messages ----
    /// Appends a message with the thread's next seq (dense, one writer at a time per thread).
    fn append_message(&self, m: NewMessage) -> DbResult<Message>;
    /// A page of a thread's messages, in seq order.
    fn messages(&self, thread: String, page: Page) -> DbResult<Vec<Message>>;
    /// One message of a thread.
    fn message(&self, thread: String, seq: u64) -> DbResult<Message>;

    // ---- pages of messages as JSON ----
    /// A page for `thread.messages`: read forwards, it is written as JSON
    /// from the rows (this module); from the end, it is a list.
    fn messages_page(&self, thread: String, page: Page) -> DbResult<kd_proto::types::Messages>;

    // ---- compound writes: a thread with its messages, a question with its exchange, a routed message ----
    /// A King's question: [its new thread], its messages, its exchange and first steps, in one
    /// transaction.
    fn ask(&self, t: Option<NewThread>, messages: Vec<NewMessage>, x: NewExchange) -> DbResult<Asked>;
    /// A new thread and its first message, in one transaction.
    fn create_thread_with_message(&self, t: NewThread, m: NewMessage) -> DbResult<(Thread, Message)>;
    /// A new thread and its messages, in one transaction.
    fn create_thread_with_messages(&self, t: NewThread, messages: Vec<NewMessage>) -> DbResult<(Thread, Vec<Message>)>;
    /// A thread imported whole (its messages with their times); an origin is imported once.
    fn import_thread(&self, t: NewThread, created_at: i64, messages: Vec<(i64, NewMessage)>) -> DbResult<Thread>;
    /// A routed message with its inbox entries, participants and acknowledgements owed.
    fn route(&self, r: Routing) -> DbResult<Routed>;

    // ---- runs ----
    /// Records a run waiting to start, taking its journal step (pending → running) or failing with
    /// [`DbError::StepTaken`]; tried [`Again`], a row of the run already there is its first try's.
    fn insert_run(&self, run: RunInfo, step: Option<StepId>, again: Again) -> DbResult<()>;
    /// A run recorded as `insert_run` records it, with the session it takes and the inbox items its
    /// prompt gives — and, its agent spawned already, as `run_started` records that — in one
    /// transaction ([`RunStart`]); the session, or why the run has none (a refusal is recorded, the
    /// run all the same).
    fn record_run(&self, start: RunStart) -> DbResult<DbResult<Session>>;
    /// The run's process started (its pid and backend session). Only a shared registry refuses it:
    /// [`DbError::MemberBusy`] when another node's run of the member streams on the thread.
    /// Tried [`Again`], a start its first try wrote is told, not recorded again.
    fn run_started(
        &self,
        run: RunInfo,
        pid: u32,
        pid_start: Option<u64>,
        session: Option<String>,
        again: Again,
    ) -> DbResult<()>;
    /// What a run has said so far (kept so a cut run's partial answer survives).
    fn append_run_partial(&self, id: String, text: String) -> DbResult<()>;
    /// A run ended: its message, cost, acknowledgements, run row, journal step and session end, in
    /// one transaction. Tried [`Again`], a run ended by its first try answers that try's message.
    fn finish_run(&self, run: RunInfo, f: Finish, again: Again) -> DbResult<Message>;
    /// The backend's own session id of a run, saved while it runs (a CLI
    /// agent's with its partial text: `agent::cli`).
    fn run_session_seen(&self, run: String, backend: String) -> DbResult<()>;
    /// The runs a dead daemon left in flight.
    fn orphan_runs(&self) -> DbResult<Vec<Orphan>>;
    /// Records every run a dead daemon left in flight as interrupted, with its partial answer; how
    /// many.
    fn recover_runs(&self) -> DbResult<usize>;

    // ---- sessions ----
    /// Starts a session; a refusal is [`DbError::SessionActive`] (and is
    /// recorded in the event log).
    fn start_session(&self, s: NewSession) -> DbResult<Session>;
    /// Resumes a session; a rejection is [`DbError::SessionActive`] (and is
    /// recorded in the event log).
    fn resume_session(&self, id: String, holder: Option<String>, pid: Option<u32>) -> DbResult<Session>;
    /// Ends a session (idle, ended or failed).
    fn end_session(&self, e: SessionEnd) -> DbResult<Session>;
    /// Sessions, newest first. Active ones whose holder process has died
    /// are released (expired) first, so none is listed as held by the dead.
    fn sessions(&self, thread: Option<String>, agent: Option<String>, status: Option<SessionStatus>) -> DbResult<Vec<Session>>;
    /// One session, released first when its holder has died.
    fn session(&self, id: String) -> DbResult<Session>;

    // ---- locks and fencing tokens ----
    /// Takes a lock on a resource for a holder, with a fencing token; or says who holds it.
    fn acquire_lock(&self, resource: String, holder: String, ttl_ms: u64, pid: Option<u32>) -> DbResult<LockOutcome>;
    /// Releases a lock its token still holds.
    fn release_lock(&self, resource: String, token: u64) -> DbResult<LockReleased>;
    /// Locks held (on one resource).
    fn locks(&self, resource: Option<String>) -> DbResult<Vec<Lock>>;

    // ---- the event log ----
    /// The event log, filtered.
    fn events(&self, filter: EventFilter) -> DbResult<Vec<Event>>;
    /// Records events that change nothing else (decisions, warnings).
    fn record(&self, events: Vec<Record>) -> DbResult<()>;

    // ---- inboxes and delivery ----
    /// A member's inbox.
    fn inbox(&self, q: inbox::Query) -> DbResult<Vec<InboxItem>>;
    /// Marks inbox items of a member processed (or another status); how many changed.
    fn inbox_process(&self, member: String, ids: Vec<u64>, status: InboxStatus) -> DbResult<u32>;
    /// How a member of a workspace takes routed messages of some types.
    fn delivery_subscribe(&self, workspace: String, member: String, types: Vec<RouteType>, mode: DeliveryMode) -> DbResult<()>;
    /// A member's delivery modes by route type, where set.
    fn delivery_overrides(&self, workspace: String, member: String) -> DbResult<Vec<(RouteType, DeliveryMode)>>;

    // ---- acknowledgements ----
    /// `kd ack`: settles what `member` owes on `thread` (for `broadcast`
    /// only, when given) and tells subscribers who still owes.
    fn acknowledge(&self, thread: String, member: String, broadcast: Option<String>) -> DbResult<Vec<Ack>>;
    /// Acknowledgements owed (of a thread; all, or only pending).
    fn acks(&self, thread: Option<String>, all: bool) -> DbResult<Vec<Ack>>;

    // ---- lifecycle of threads ----
    /// Moves a thread to a lifecycle status (with the summary it leaves, when archived).
    fn set_thread_status(&self, id: String, to: ThreadStatus, reason: &'static str, summary: Option<Summary>) -> DbResult<Thread>;
    /// Ages a thread when nothing happened on it since `seen_activity` (re-checked in the
    /// transaction); whether it moved.
    fn age_thread(&self, id: String, seen_activity: i64, to: ThreadStatus, summary: Option<Summary>) -> DbResult<bool>;
    /// What the summariser reads of a thread: its last questions and answers.
    fn summary_material(&self, id: String, questions: u32) -> DbResult<Material>;
    /// A thread's summary.
    fn set_thread_summary(&self, id: String, summary: Summary) -> DbResult<Thread>;
    /// A thread's title.
    fn set_thread_title(&self, id: String, title: String) -> DbResult<Thread>;
    /// Deletes a thread and everything of it; how many messages went.
    fn delete_thread(&self, id: String) -> DbResult<u64>;

    // ---- search ----
    /// Searches, after indexing every message written before.
    fn search(&self, q: String, f: search::Filter) -> DbResult<Vec<SearchHit>>;
    /// Indexes the messages not yet indexed, a batch per write job.
    fn index_messages(&self) -> DbResult<u64>;

    // ---- cost ----
    /// Cost and tokens, filtered, grouped.
    fn cost_report(&self, f: cost::Filter, by: CostBy) -> DbResult<CostReport>;
    /// What the exchange begun by King message `king` has cost so far.
    fn exchange_cost(&self, thread: String, king: u64) -> DbResult<f64>;

    // ---- line comments on members' work ----
    /// Records a new comment on a member's work (refused past `comments::MAX_PER_WORK`).
    fn add_comment(&self, c: Comment) -> DbResult<()>;
    /// One comment.
    fn comment(&self, id: String) -> DbResult<Option<Comment>>;
    /// The comments on a thread's work (of one member), oldest first.
    fn comments(&self, thread: String, member: Option<String>) -> DbResult<Vec<Comment>>;
    /// Marks pending comments sent in the King's message `seq`; those it marked.
    fn send_comments(&self, ids: Vec<String>, seq: u64, at: i64) -> DbResult<Vec<Comment>>;
    /// Resolves a comment (by a member's commit, or the King) once; the comment as it stands.
    fn resolve_comment(&self, id: String, by: Option<String>, at: i64) -> DbResult<Comment>;

    // ---- members' worktrees ----
    /// Records a member's new worktree (`vote`: the task is a best-of-N).
    fn add_worktree(&self, w: Worktree, vote: bool) -> DbResult<()>;
    /// The worktree of `member` on `thread`, if it has one.
    fn worktree(&self, thread: String, member: String) -> DbResult<Option<Worktree>>;
    /// The worktrees of a work thread.
    fn worktrees_of(&self, thread: String) -> DbResult<Vec<Worktree>>;
    /// The worktrees of a work thread, each with whether its member has had
    /// a run on the thread (a worktree none has worked in yet is fresh).
    fn worktrees_with_runs(&self, thread: String) -> DbResult<Vec<(bool, Worktree)>>;
    /// Every worktree kd made (of one repository).
    fn worktrees(&self, repo: Option<String>) -> DbResult<Vec<Worktree>>;
    /// Every worktree whose work is not settled.
    fn unsettled_worktrees(&self) -> DbResult<Vec<Worktree>>;
    /// Sets where the member's work stands.
    fn set_worktree_state(&self, thread: String, member: String, state: WorkState) -> DbResult<()>;
    /// Moves the member's work to `state` unless the King settled it, kd
    /// found it tampered with, or its worktree is gone; the worktree as it
    /// stands then (none: no work).
    fn move_worktree_state(&self, thread: String, member: String, state: WorkState) -> DbResult<Option<Worktree>>;
    /// The branch's new head and the diff's size (files, added, removed)
    /// from the base.
    fn set_worktree_head(&self, thread: String, member: String, head: String, totals: (u32, u64, u64)) -> DbResult<()>;
    /// The work brought up to date: its new base (the King's commit merged
    /// into its branch), head, and the diff's size from that base.
    fn set_worktree_base(&self, thread: String, member: String, base: String, head: String, totals: (u32, u64, u64)) -> DbResult<()>;
    /// Why kd could not commit the member's last run (its changes are in
    /// the worktree only); a new head or base recorded clears it.
    fn set_worktree_uncommitted(&self, thread: String, member: String, why: String) -> DbResult<()>;
    /// The member's branch was pushed for a pull request.
    fn set_worktree_shipped(&self, thread: String, member: String, shipped: kd_proto::work::Shipped) -> DbResult<()>;
    /// The worktree is gone from disk since `at`.
    fn set_worktree_removed(&self, thread: String, member: String, at: i64) -> DbResult<()>;
    /// Marks the check of the member's head running since `at` (told on the thread), unless the
    /// work is settled, tampered with or gone.
    fn begin_check(&self, thread: String, member: String, at: i64) -> DbResult<Started>;
    /// Records a check's result if it is still the running one (told on the thread); with `fix`,
    /// a member whose check did not pass and has tries left is sent back (a try counted, `working`).
    /// Tried [`Again`], a result its first try recorded is answered as that try was.
    fn end_check(&self, thread: String, member: String, check: WorkCheck, fix: Fix, again: Again) -> DbResult<CheckEnded>;
    /// The worktrees on disk whose check was running when a daemon stopped.
    fn running_checks(&self) -> DbResult<Vec<Worktree>>;
    /// Records on a run the commit kd made of its changes and its note.
    fn set_run_work(&self, run: String, commit: Option<String>, note: Option<String>) -> DbResult<()>;
    /// A member's work a dead daemon cut: what kd committed of it recorded
    /// on its interrupted run (when known), and the work `state` (`done`,
    /// or `tampered` when kd would not commit it).
    fn work_interrupted(&self, thread: String, member: String, run: Option<String>, commit: Option<String>, note: String, state: WorkState) -> DbResult<()>;

    // ---- the exchange journal: exchanges ----
    /// The open exchange begun by message `seq` of a thread, if any.
    fn open_exchange_at(&self, thread: String, seq: u64) -> DbResult<Option<ExchangeId>>;
    /// Begins an exchange, or finds the one its correlation id already began; with its steps.
    fn begin_settling_exchange(&self, x: NewExchange) -> DbResult<Option<(Exchange, Vec<Step>)>>;
    /// One exchange.
    fn exchange(&self, x: ExchangeId) -> DbResult<Exchange>;
    /// Opens a step of an exchange (once per key), or finds it.
    fn open_step(&self, x: ExchangeId, key: StepKey) -> DbResult<Opened>;
    /// The steps of an exchange.
    fn exchange_steps(&self, x: ExchangeId) -> DbResult<Vec<Step>>;
    /// An exchange's plan is carried out: it is done (with its result).
    fn plan_done(&self, x: ExchangeId, result: Option<serde_json::Value>) -> DbResult<()>;
    /// Stops an exchange for good with a reason.
    fn stop_exchange(&self, x: ExchangeId, reason: String) -> DbResult<()>;
    /// Stops an exchange and writes kd's notice of it, in one transaction; whether it was open.
    fn stop_exchange_with_notice(&self, x: ExchangeId, reason: String, notice: NewMessage) -> DbResult<bool>;
    /// Stops every open exchange of a thread; which.
    fn stop_thread_exchanges(&self, thread: String, reason: String) -> DbResult<Vec<ExchangeId>>;
    /// Stops every open exchange for good (`kd daemon stop --no-resume`); how many.
    fn stop_open_exchanges(&self, reason: String) -> DbResult<usize>;
    /// Records where each open exchange was cut at a graceful stop, for the next start to resume;
    /// how many.
    fn cut_open_exchanges(&self) -> DbResult<usize>;
    /// Every open exchange, oldest first: what a start resumes.
    fn unfinished_exchanges(&self) -> DbResult<Vec<Exchange>>;
    /// An exchange goes on after a restart (counted, told).
    fn exchange_resumed(&self, x: Exchange) -> DbResult<()>;
    /// Gives a step up after its cuts: the member's error in place of its cut answer.
    fn give_up_step(&self, step: StepId, error: NewMessage, reason: String) -> DbResult<Option<Message>>;

    // ---- the exchange journal: kd's own steps ----
    /// One of kd's own steps (tally, merge, notice): its message and the step's end, in one
    /// transaction; `events` are recorded with it.
    fn kd_step(&self, x: ExchangeId, key: StepKey, m: NewMessage, events: EventsOf) -> DbResult<KdStep>;
    /// Cancels a step that will not run.
    fn cancel_step(&self, step: StepId, reason: String) -> DbResult<()>;
    /// Fixes a choice of an exchange once (ballot labels…): the value stored first wins.
    fn fix_choice(&self, x: ExchangeId, name: &'static str, value: Value) -> DbResult<Value>;
    /// Cancels an exchange's pending steps of one purpose; how many.
    fn cancel_pending_steps(&self, x: ExchangeId, purpose: Purpose, reason: String) -> DbResult<usize>;
    /// The exchange a client's correlation id began on a thread.
    fn exchange_by_correlation(&self, thread: String, id: String) -> DbResult<Option<Exchange>>;
    /// The exchange of a kind begun by message `seq` of a thread.
    fn exchange_at(&self, thread: String, seq: u64, kind: Kind) -> DbResult<Option<ExchangeId>>;
    /// An exchange's steps, each with the message that ended it.
    fn steps_with_messages(&self, x: ExchangeId) -> DbResult<Vec<(Step, Option<Message>)>>;

    // ---- several nodes (PostgreSQL): who drives what ----
    /// The node that has a thread's workspace when it is another than this one, and whether it
    /// is live (`None` on SQLite: one node).
    fn thread_node(&self, id: String) -> DbResult<Option<(String, bool)>>;
    /// A King's question and its exchange, for `node` to drive (it is woken at commit).
    fn ask_node(&self, m: NewMessage, x: NewExchange, node: String) -> DbResult<Asked>;
    /// Asks `node` to stop its runs on a thread (woken at commit); the runs it has there.
    fn cancel_on_node(&self, node: String, c: super::runs::Cancel) -> DbResult<Vec<RunInfo>>;
    /// Records the runs of nodes dead past the lease as interrupted; the nodes and their runs.
    fn reap_dead_nodes(&self) -> DbResult<Vec<(String, usize)>>;
    /// Open exchanges no live node drives, with their thread's workspace.
    fn orphan_exchanges(&self) -> DbResult<Vec<(ExchangeId, String)>>;
    /// Leases to this node the exchanges routed to it, and those of `adopt` still orphaned.
    fn claim_exchanges(&self, adopt: Vec<ExchangeId>) -> DbResult<Vec<Exchange>>;
    /// Writes the plan of an exchange routed here, once; false when it has one.
    fn plan_exchange(&self, x: ExchangeId, plan: Value) -> DbResult<bool>;

    // ---- the exchange journal: what a client reads ----
    /// `exchange.get`: see [`info`].
    fn exchange_info(&self, thread: String, seq: u64) -> DbResult<Option<ExchangeInfo>>;
}

/// What the handle says of itself, and its life.
impl Db {
    /// Opens the registry at `at` (creating and migrating it if needed) as
    /// node `me`. A file's directory is kd's data directory; on a shared
    /// database this node joins the others (refused while another live
    /// process holds its name), keeps itself live and hears what they
    /// publish.
    pub async fn open(at: &DbLocation, hub: Arc<Hub>, me: Node) -> DbResult<Db> {
        match at {
            DbLocation::File(file) => {
                let data = file.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
                Ok(Db { engine: Engine::Sqlite(Sqlite::open(file, hub)?), data, me, outage: Default::default() })
            }
            DbLocation::Url(url) => {
                let data = kd_proto::paths::data_dir().map_err(|e| DbError::Invalid(e.to_string()))?;
                let pg = Arc::new(Pg::open_node(url, hub.clone(), &me).await?);
                let incarnation = match pg.join(&me, &crate::proc::pid_alive).await {
                    Ok(i) => i,
                    Err(e) => {
                        pg.close().await;
                        return Err(e);
                    }
                };
                pg::nodes::beat(pg.clone(), me.clone(), incarnation);
                pg::relay::start(pg.clone(), url.clone(), me.id.clone(), hub);
                Ok(Db { engine: Engine::Postgres { pg, incarnation }, data, me, outage: Default::default() })
            }
        }
    }

    /// This daemon's node.
    pub fn node(&self) -> &Node {
        &self.me
    }

    /// The live nodes of the registry, this one included.
    pub async fn nodes(&self) -> DbResult<Vec<NodeStatus>> {
        match &self.engine {
            Engine::Sqlite(_) => Ok(vec![NodeStatus {
                id: self.me.id.clone(),
                host: self.me.host.clone(),
                pid: self.me.pid,
                heartbeat_ms_ago: 0,
                this: true,
                clock_skew_ms: 0,
            }]),
            Engine::Postgres { pg, .. } => pg.nodes(&self.me).await,
        }
    }

    /// Until work is routed to this node by another (never, on SQLite).
    pub async fn work_routed(&self) {
        match &self.engine {
            Engine::Sqlite(_) => std::future::pending().await,
            Engine::Postgres { pg, .. } => pg.work_routed().await,
        }
    }

    /// The cancellations other nodes ask of this one (once; none on SQLite).
    pub fn cancels(&self) -> Option<tokio::sync::mpsc::Receiver<super::runs::Cancel>> {
        match &self.engine {
            Engine::Sqlite(_) => None,
            Engine::Postgres { pg, .. } => pg.cancels(),
        }
    }

    /// Whether the other nodes declared this one dead: what it drove is
    /// theirs now, and it must stop.
    pub fn lost(&self) -> bool {
        match &self.engine {
            Engine::Sqlite(_) => false,
            Engine::Postgres { pg, .. } => pg.lost(),
        }
    }

    /// Whether other nodes may share this registry.
    pub fn is_shared(&self) -> bool {
        matches!(self.engine, Engine::Postgres { .. })
    }

    /// kd's data directory on this machine.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The engine's name, as `kd daemon status` shows it.
    pub fn engine(&self) -> &'static str {
        match &self.engine {
            Engine::Sqlite(_) => "sqlite",
            Engine::Postgres { .. } => "postgres",
        }
    }

    /// Where the registry is: a file's path, or a database's URL without
    /// its password.
    pub fn location(&self) -> String {
        match &self.engine {
            Engine::Sqlite(e) => e.path().display().to_string(),
            Engine::Postgres { pg, .. } => pg.location().to_string(),
        }
    }

    /// The registry's file, when an engine keeps it in one.
    pub fn path(&self) -> Option<&Path> {
        match &self.engine {
            Engine::Sqlite(e) => Some(e.path()),
            Engine::Postgres { .. } => None,
        }
    }

    pub fn schema_version(&self) -> u32 {
        match &self.engine {
            Engine::Sqlite(e) => e.schema_version(),
            Engine::Postgres { pg, .. } => pg.schema_version(),
        }
    }

    /// Number of threads, kept current by the engine.
    pub fn thread_count(&self) -> u64 {
        match &self.engine {
            Engine::Sqlite(e) => e.thread_count(),
            Engine::Postgres { pg, .. } => pg.thread_count(),
        }
    }

    /// The engine's own check of the registry: `ok`, or the problems found.
    pub async fn integrity_check(&self) -> DbResult<Vec<String>> {
        match &self.engine {
            Engine::Sqlite(e) => e.integrity_check().await,
            Engine::Postgres { pg, .. } => pg.integrity_check().await,
        }
    }

    /// kdd is stopping: what it still writes does not wait long for the
    /// registry (SQLite: another program's lock on the file). PostgreSQL's
    /// waits are bounded as always (a connection, a statement).
    pub fn stopping(&self) {
        if let Engine::Sqlite(e) = &self.engine {
            e.stopping();
        }
    }

    /// Finishes what is under way and closes the registry; later
    /// operations fail with [`super::DbError::Closed`].
    pub async fn close(&self) {
        match &self.engine {
            Engine::Sqlite(e) => e.close().await,
            Engine::Postgres { pg, incarnation } => {
                if let Err(e) = pg.leave(&self.me, *incarnation).await {
                    tracing::warn!("cannot tell the other nodes this one stops: {e}");
                }
                let dropped = pg::relay::dropped();
                if dropped > 0 {
                    tracing::warn!("{dropped} event(s) were not relayed to or from the other nodes (queues full)");
                }
                pg.close().await
            }
        }
    }
}
