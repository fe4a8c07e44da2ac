//! The registry: every durable fact lives in one SQLite database.
//!
//! **Concurrency design.** One dedicated OS thread owns the only write
//! connection ([`writer`]). Async callers send it jobs — closures over a
//! `&Connection` — through a bounded channel and await a oneshot reply. The
//! writer drains whatever is queued (up to [`writer::MAX_BATCH`] jobs), runs
//! them in one `BEGIN IMMEDIATE` transaction, each inside its own savepoint so
//! one failing job does not undo the others, commits, and only then replies
//! and publishes the jobs' events to subscribers. Everything that must be
//! serialised — a thread's dense `seq`, single-resume of sessions, fencing
//! tokens — is therefore decided by one thread, in commit order, without
//! locks in Rust. Reads run on `spawn_blocking` over a small pool of
//! read-only connections (WAL lets them proceed beside the writer).
//!
//! No SQL exists outside this module: [`threads`], [`messages`],
//! [`sessions`], [`locks`] and [`events`] hold the queries, [`schema`] the
//! migrations.

pub mod acks;
pub mod approvals;
mod checkpoint;
pub mod compose;
#[cfg(test)]
mod contract;
pub mod cost;
pub mod events;
pub mod exchanges;
pub mod inbox;
pub mod lifecycle;
pub mod locks;
pub mod messages;
mod one_node;
pub mod outage;
mod page_json;
pub mod pg;
mod pool;
mod registry;
pub mod runs;
pub mod schema;
pub mod search;
pub mod sessions;
pub mod threads;
pub mod work;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kd_proto::types::ThreadEvent;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::hub::Hub;
use pool::ReadPool;
use writer::Job;

pub use registry::{Db, Node};
pub use writer::MAX_BATCH;

/// Errors of the registry. Mapped once, at the RPC edge, to error codes.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {0}")]
    Postgres(String),
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

/// The SQLite engine: one writer thread, a pool of readers.
pub struct Sqlite {
    jobs: mpsc::Sender<Job>,
    readers: Arc<ReadPool>,
    path: PathBuf,
    schema_version: u32,
    threads: Arc<AtomicU64>,
    writer: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Sqlite {
    /// Opens (creating if needed) and migrates the database, and starts the
    /// writer thread. Refuses a database whose schema is newer than ours.
    pub fn open(path: &Path, hub: Arc<Hub>) -> DbResult<Sqlite> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| DbError::Migration {
                path: path.to_path_buf(),
                reason: format!("cannot create {}: {e}", dir.display()),
            })?;
        }
        let read_only = |e: DbError| match e {
            DbError::Sqlite(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ReadOnly) => {
                DbError::ReadOnly { path: path.to_path_buf(), reason: e.to_string() }
            }
            DbError::Migration { reason, .. } if reason.contains("readonly") => {
                DbError::ReadOnly { path: path.to_path_buf(), reason }
            }
            other => other,
        };
        if let Ok(meta) = std::fs::metadata(path)
            && !meta.is_file()
        {
            return Err(DbError::Invalid(format!(
                "the database {} is not a regular file; point --db (or KD_DB) at a file",
                path.display()
            )));
        }
        let mut conn = Connection::open(path)?;
        schema::configure(&conn).map_err(read_only)?;
        schema::check_writable(&conn, path).map_err(read_only)?;
        let schema_version = schema::migrate(&mut conn, path).map_err(read_only)?;
        let thread_count = threads::count(&conn)?;
        let threads = Arc::new(AtomicU64::new(thread_count));
        let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
        let checkpointer = checkpoint::Checkpointer::spawn(path)?;
        let handle = writer::spawn(conn, rx, hub, threads.clone(), checkpointer).map_err(|e| DbError::Migration {
            path: path.to_path_buf(),
            reason: format!("cannot start writer: {e}"),
        })?;
        Ok(Sqlite {
            jobs: tx,
            readers: Arc::new(ReadPool::new(path.to_path_buf())),
            path: path.to_path_buf(),
            schema_version,
            threads,
            writer: std::sync::Mutex::new(Some(handle)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// Number of threads, kept current by the writer.
    pub fn thread_count(&self) -> u64 {
        self.threads.load(Ordering::Relaxed)
    }

    /// Runs `f` in the writer's transaction; its outbox is published only if
    /// the transaction commits, and the reply arrives after the commit.
    pub async fn write<T, F>(&self, f: F) -> DbResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Outbox) -> DbResult<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        self.jobs.send(Job::new(f, reply)).await.map_err(|_| DbError::Closed)?;
        rx.await.map_err(|_| DbError::Closed)?
    }

    /// Runs `f` on a pooled read-only connection on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> DbResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        self.read_pooled(move |pool| pool.with(f)).await
    }

    /// Runs `f` with the pool of read connections on the blocking pool: a
    /// read that takes more than one connection.
    async fn read_pooled<T, F>(&self, f: F) -> DbResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<ReadPool>) -> DbResult<T> + Send + 'static,
    {
        let pool = self.readers.clone();
        tokio::task::spawn_blocking(move || f(&pool))
            .await
            .map_err(|e| DbError::Internal(format!("read task failed: {e}")))?
    }

    /// SQLite's `integrity_check`: `ok`, or the problems it found.
    pub async fn integrity_check(&self) -> DbResult<Vec<String>> {
        self.read(|c| {
            let mut stmt = c.prepare("PRAGMA integrity_check")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    /// Finishes every queued write, checkpoints the WAL and stops the writer.
    /// Later writes fail with [`DbError::Closed`].
    pub async fn close(&self) {
        let (reply, rx) = oneshot::channel();
        if self.jobs.send(Job::close(reply)).await.is_ok() {
            let _ = rx.await;
        }
        let handle = self.writer.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = handle {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        self.readers.clear();
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
