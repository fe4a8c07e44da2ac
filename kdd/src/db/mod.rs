//! The registry's interface: every durable fact kdd keeps, whichever engine
//! keeps it.
//!
//! **The interface** (this folder's own modules) is what the rest of kdd
//! speaks: [`Db`], the handle, and its operations ([`registry`]);
//! [`DbError`]; the vocabulary of those operations, one module per concept
//! ([`threads`], [`messages`], [`runs`], [`sessions`], [`locks`],
//! [`events`], [`inbox`], [`acks`], [`lifecycle`], [`compose`], [`exchanges`],
//! [`search`], [`cost`]: their types and the pure rules both engines follow
//! — refusals, the events a change records, lineage, who blocks a session
//! — and how each reads its rows, through [`row::Columns`], which each engine
//! implements over its driver's row);
//! what kdd does while the registry is away ([`outage`]); and the contract
//! suite, which runs the same calls on both engines (`contract`). No SQL
//! and no driver's type lives here.
//!
//! **The engines** are siblings that implement every operation, each as an
//! inherent `async fn` of the same signature, and import only the
//! interface, never each other:
//!
//! - [`sqlite`]: one file on this machine. One writer thread owns the only
//!   write connection and runs jobs in batched `IMMEDIATE` transactions,
//!   publishing their events after the commit; reads run on a pool of
//!   read-only connections; FTS5 indexes messages for search.
//! - [`pg`]: a PostgreSQL database several kdd nodes may share. One
//!   operation is one transaction on a pooled connection; what SQLite's
//!   single writer serialises, row locks and advisory locks serialise here;
//!   nodes lease exchanges, hear each other by NOTIFY and batch appends in
//!   lanes.
//!
//! No SQL exists outside the engines.

pub mod acks;
pub mod approvals;
pub mod check;
pub mod comments;
pub mod compose;
#[cfg(test)]
mod contract;
pub mod cost;
pub mod events;
pub mod exchanges;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod inbox;
pub mod lifecycle;
pub mod locks;
pub mod messages;
pub mod outage;
mod page_json;
pub mod pg;
mod registry;
mod row;
pub mod runs;
pub mod search;
pub mod sessions;
pub mod sqlite;
pub mod threads;

use std::path::PathBuf;

use kd_proto::types::ThreadEvent;
pub use registry::{Db, Node};

/// Errors of the registry. Mapped once, at the RPC edge, to error codes.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// What the engine itself reported (SQLite's or PostgreSQL's error, in
    /// its words); `cause` says whether the database is only away for now.
    #[error("database error: {text}")]
    Engine { text: String, cause: Cause },
    /// The database cannot be reached (connection lost or refused, no free
    /// connection in time): this operation fails, kdd keeps serving.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A second trunk for a workspace and git branch (F-L1).
    #[error(
        "the trunk of {workspace}{} already exists: thread {thread}; fork it for a branch",
        branch.as_deref().map(|b| format!(" (branch {b})")).unwrap_or_default()
    )]
    TrunkExists { workspace: String, branch: Option<String>, thread: String },
    #[error("{origin} is already imported as thread {thread}")]
    AlreadyImported { origin: String, thread: String },
    #[error(
        "Session already active: {session} is held by {}{}",
        holder.as_deref().unwrap_or("an unnamed holder"),
        node.as_deref().map(|n| format!(" on node {n}")).unwrap_or_default()
    )]
    SessionActive { session: String, holder: Option<String>, pid: Option<u32>, node: Option<String> },
    #[error("stale fencing token {token} for {resource}")]
    StaleToken { resource: String, token: u64, current: Option<u64> },
    #[error(
        "database {path} has schema version {found}, newer than this kdd knows ({known}); \
         run a newer kdd or point --db at another database"
    )]
    SchemaTooNew { path: PathBuf, found: u32, known: u32 },
    #[error("cannot migrate database {path}: {reason}")]
    Migration { path: PathBuf, reason: String },
    #[error(
        "the database {path} is read-only ({reason}); kdd writes it — check the permissions of the file and its \
         directory, and that its file system is mounted read-write"
    )]
    ReadOnly { path: PathBuf, reason: String },
    #[error("thread {0} is archived; `kd unarchive {0}` opens it again")]
    Archived(String),
    /// A journal step another run took, or that is over (F-J1): the run
    /// asking for it must not start.
    #[error("step {0} of an exchange is taken or over")]
    StepTaken(i64),
    /// A member already answering on the thread, on another node: a run
    /// of it may not start there too (one run per member per thread).
    #[error("{member} is already answering on thread {thread}{}", node.as_deref().map(|n| format!(" on node {n}")).unwrap_or_default())]
    MemberBusy { member: String, thread: String, node: Option<String> },
    /// A run whose end is written already (a recovery, or another node's
    /// reaper, wrote it): its end is written once.
    #[error("run {run} has ended already ({status}): its end is written once")]
    RunEnded { run: String, status: String },
    #[error("internal registry error: {0}")]
    Internal(String),
    #[error("the registry is closed")]
    Closed,
}

pub type DbResult<T> = Result<T, DbError>;

/// Why an engine failed, as far as kdd cares: each engine maps its own
/// errors (rusqlite's codes, PostgreSQL's SQLSTATEs) to one of these, so
/// the interface and the outage rules need neither's types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The statement or the data: the same operation would fail again.
    Failed,
    /// The database is away for now (a full disk, an I/O error, its write
    /// lock held elsewhere, the file not to be opened): see [`outage`].
    Away,
    /// The database cannot be written (a read-only file or file system).
    ReadOnly,
}

impl DbError {
    /// An engine's error that trying again will not mend.
    pub fn engine(text: impl Into<String>) -> DbError {
        DbError::Engine { text: text.into(), cause: Cause::Failed }
    }
}

/// What a write job leaves behind to be done after its transaction commits.
#[derive(Default)]
pub struct Outbox {
    /// Events for the subscribers of a thread, in order.
    pub events: Vec<(String, ThreadEvent)>,
    /// Change in the number of threads.
    pub threads_added: i64,
}

impl Outbox {
    pub fn publish(&mut self, thread: &str, event: ThreadEvent) {
        self.events.push((thread.to_string(), event));
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// JSON text of a list of names, as stored in the list columns.
pub(crate) fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

/// A list column back into names; a corrupt value reads as empty.
pub(crate) fn parse_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

/// A short random id with a prefix-free alphabet: `[a-z0-9]{len}`.
pub(crate) fn random_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..len).map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char).collect()
}
