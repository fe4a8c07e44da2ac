//! The writer thread: the one owner of the write connection. See the
//! concurrency design in the parent module.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::checkpoint::{self, Checkpointer, EVERY_JOBS, NUDGE_PAGES};
use super::schema::{STOPPING_BUSY, WRITE_BUSY};

use super::{DbError, DbResult, Outbox};
use crate::hub::Hub;

/// Most jobs committed in one transaction.
pub const MAX_BATCH: usize = 512;

type Reply = Box<dyn FnOnce(Option<Failed>) + Send>;
/// Runs the job against the transaction, or, given the reason it cannot
/// run, only prepares the failure reply.
type Body = Box<dyn FnOnce(Result<&Connection, Failed>, &mut Outbox) -> (bool, Reply) + Send>;

/// Why a whole batch failed (its transaction could not begin or commit):
/// every job of it answers with it.
#[derive(Debug, Clone)]
pub(super) struct Failed {
    why: String,
    /// The database is away for now (a full or read-only disk, an I/O
    /// error, another process holding the write lock), not the job wrong:
    /// [`DbError::Unavailable`], which callers may try again.
    outage: bool,
}

impl Failed {
    fn of(doing: &str, e: &rusqlite::Error) -> Failed {
        Failed { why: format!("{doing}: {e}"), outage: super::error::is_outage_code(e.sqlite_error_code()) }
    }

    fn into_error(self) -> DbError {
        if self.outage { DbError::Unavailable(self.why) } else { DbError::Internal(self.why) }
    }
}

/// A unit of work for the writer.
pub(super) enum Job {
    Run(Body),
    /// Finish what is queued before this, checkpoint, stop.
    Close(oneshot::Sender<()>),
}

impl Job {
    pub(super) fn new<T, F>(f: F, reply: oneshot::Sender<DbResult<T>>) -> Job
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Outbox) -> DbResult<T> + Send + 'static,
    {
        Job::Run(Box::new(move |conn, out| {
            let result = match conn {
                Ok(conn) => f(conn, out),
                Err(failed) => Err(failed.into_error()),
            };
            let ok = result.is_ok();
            let reply: Reply = Box::new(move |commit_error| {
                let _ = reply.send(match commit_error {
                    Some(failed) => Err(failed.into_error()),
                    None => result,
                });
            });
            (ok, reply)
        }))
    }

    pub(super) fn close(reply: oneshot::Sender<()>) -> Job {
        Job::Close(reply)
    }
}

/// The write connection and what a commit tells, shared by the writer
/// thread and the small writes that run on their caller's thread
/// ([`Core::try_now`]). Whoever holds `conn` is the one writer of the
/// moment, so writes are still one at a time, in commit order; `None` once
/// the writer closed it.
pub(super) struct Core {
    conn: std::sync::Mutex<Option<Connection>>,
    hub: Arc<Hub>,
    threads: Arc<AtomicU64>,
    /// `None` once stopped (the connection closed).
    checkpointer: std::sync::Mutex<Option<Checkpointer>>,
    since_checkpoint: AtomicUsize,
    /// kdd is stopping: another program's lock is waited for
    /// [`STOPPING_BUSY`], not [`WRITE_BUSY`] ([`lock_wait`]).
    stopping: Arc<AtomicBool>,
}

impl Core {
    pub(super) fn new(conn: Connection, hub: Arc<Hub>, threads: Arc<AtomicU64>, checkpointer: Checkpointer) -> Core {
        checkpoint::watch_wal(&conn);
        Core {
            conn: std::sync::Mutex::new(Some(conn)),
            hub,
            threads,
            checkpointer: std::sync::Mutex::new(Some(checkpointer)),
            since_checkpoint: AtomicUsize::new(0),
            stopping: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Runs `job` — a write of a few rows — at once on this thread, in a
    /// transaction of its own, when no one else writes: nothing is queued
    /// (`queue_empty`), the connection is free, and no other program holds
    /// the file's write lock (which is not waited for here). No hop to the
    /// writer thread and back: two thread switches, each a wake of a
    /// parked thread (issue 31, item 17: a run's start and end took about
    /// five such writes). Gives the job back otherwise, for the queue.
    pub(super) fn try_now(&self, job: Job, queue_empty: bool) -> Option<Job> {
        if !queue_empty {
            return Some(job);
        }
        let Ok(mut guard) = self.conn.try_lock() else { return Some(job) };
        let Some(conn) = guard.as_mut() else { return Some(job) };
        let Some(tx) = begin_at_once(conn) else { return Some(job) };
        let (_, answers) = run_batch(tx, &mut vec![job], &self.hub, &self.threads);
        drop(guard);
        answers.send();
        self.committed(1);
        None
    }

    /// kdd is stopping: from now on the writer waits [`STOPPING_BUSY`] at
    /// most for another program's lock — a wait already begun too — at
    /// each write and at the last checkpoint.
    pub(super) fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// After `jobs` committed: a checkpoint, when one is due.
    fn committed(&self, jobs: usize) {
        let since = self.since_checkpoint.fetch_add(jobs, Ordering::Relaxed) + jobs;
        if since >= EVERY_JOBS || checkpoint::wal_pages() >= NUDGE_PAGES {
            self.since_checkpoint.store(0, Ordering::Relaxed);
            if let Some(checkpointer) = self.checkpointer.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                checkpointer.nudge();
            }
        }
    }
}

/// `BEGIN IMMEDIATE` without waiting for another program's write lock;
/// `None` when it is held (or the transaction cannot begin for another
/// reason: the writer thread then meets it, and answers it). The writer
/// thread sets its own wait again before each batch ([`execute`]).
fn begin_at_once(conn: &mut Connection) -> Option<Tx<'_>> {
    conn.busy_timeout(std::time::Duration::ZERO).ok()?;
    Tx::begin(conn).ok()
}

/// A write transaction (`BEGIN IMMEDIATE`), rolled back unless committed:
/// rusqlite's `Transaction`, with its two statements prepared once for
/// the connection rather than parsed at every write (a write of a few rows
/// spent a tenth of its time so, issue 31, item 17).
struct Tx<'c>(&'c Connection);

impl<'c> Tx<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Tx<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Tx(conn))
    }

    fn commit(self) -> rusqlite::Result<()> {
        // A commit that failed (SQLITE_BUSY leaves the transaction open) is
        // rolled back by the drop, as rusqlite's `Transaction` does.
        self.0.prepare_cached("COMMIT")?.execute([]).map(|_| ())
    }

    fn rollback(conn: &Connection) {
        if !conn.is_autocommit()
            && let Err(e) = conn.prepare_cached("ROLLBACK").and_then(|mut r| r.execute([]))
        {
            tracing::error!("cannot roll back a write transaction: {e}");
        }
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        Tx::rollback(self.0);
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.0
    }
}

pub(super) fn spawn(core: Arc<Core>, rx: mpsc::Receiver<Job>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("kdd-db-writer".into()).spawn(move || {
        lock_wait::STOPPING.with(|s| *s.borrow_mut() = Some(core.stopping.clone()));
        run(&core, rx)
    })
}

/// The writer thread's wait for another program's write lock on the file:
/// SQLite's busy handler, retrying for [`WRITE_BUSY`], or only
/// [`STOPPING_BUSY`] once kdd is stopping — also a wait begun before
/// (a busy *timeout* set at the start of a wait cannot be shortened).
mod lock_wait {
    use std::cell::{Cell, RefCell};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use super::{STOPPING_BUSY, WRITE_BUSY};

    thread_local! {
        /// The writer's [`super::Core::stopping`], on its thread.
        pub(super) static STOPPING: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
        /// When the wait under way began.
        static SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
    }

    /// Sets the wait on `conn` (the writer thread's connection).
    pub(super) fn set(conn: &rusqlite::Connection) {
        if let Err(e) = conn.busy_handler(Some(wait)) {
            tracing::warn!("cannot set the write connection's busy handler: {e}");
        }
    }

    /// Called by SQLite while the lock is held elsewhere (`tries` before
    /// this one): sleeps a little and says whether to try again.
    fn wait(tries: i32) -> bool {
        let now = Instant::now();
        if tries == 0 {
            SINCE.with(|s| s.set(Some(now)));
        }
        let waited = SINCE.with(Cell::get).map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let stopping = STOPPING.with(|s| s.borrow().as_ref().is_some_and(|s| s.load(Ordering::Relaxed)));
        if waited >= if stopping { STOPPING_BUSY } else { WRITE_BUSY } {
            return false;
        }
        // SQLite's own steps (1, 2, 5, 10 … ms), at most 20 ms, so a stop
        // is seen within that.
        let step = [1, 2, 5, 10, 15].get(tries as usize).copied().unwrap_or(20);
        std::thread::sleep(Duration::from_millis(step));
        true
    }
}

fn run(core: &Core, mut rx: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let jobs = batch.len();
        let mut guard = core.conn.lock().unwrap_or_else(|e| e.into_inner());
        let Some(conn) = guard.as_mut() else { return };
        let (closed, answers) = execute(conn, &mut batch, &core.hub, &core.threads);
        if let Some(closed) = closed {
            let conn = guard.take();
            drop(guard);
            answers.send();
            rx.close();
            // Taken out first: a write finishing meanwhile does not wait
            // for the last checkpoint to nudge it.
            let checkpointer = core.checkpointer.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(mut checkpointer) = checkpointer {
                checkpointer.stop();
            }
            if let Some(conn) = conn {
                lock_wait::set(&conn);
                if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
                    tracing::warn!("checkpoint at close failed: {e}");
                }
                drop(conn);
            }
            let _ = closed.send(());
            return;
        }
        drop(guard);
        answers.send();
        core.committed(jobs);
    }
}

/// The replies of a batch that ended, sent once its writer let go of the
/// connection: a caller woken by its reply finds the connection free for
/// its next small write ([`Core::try_now`]) rather than queueing it behind
/// a writer that has finished.
#[must_use]
struct Answers {
    replies: Vec<Reply>,
    commit_error: Option<Failed>,
}

impl Answers {
    fn send(self) {
        for reply in self.replies {
            reply(self.commit_error.clone());
        }
    }
}

/// Runs one batch in one transaction. Returns the close request if the
/// batch contained one (jobs after it are dropped unanswered: their callers
/// see [`DbError::Closed`]), and the replies to send.
fn execute(
    conn: &mut Connection,
    batch: &mut Vec<Job>,
    hub: &Hub,
    threads: &AtomicU64,
) -> (Option<oneshot::Sender<()>>, Answers) {
    // Waits for another program's lock, which a write on its caller's
    // thread did not ([`begin_at_once`]).
    lock_wait::set(conn);
    match Tx::begin(conn) {
        Ok(tx) => run_batch(tx, batch, hub, threads),
        Err(e) => {
            tracing::error!("cannot begin a write transaction: {e}");
            let failed = Failed::of("cannot begin a transaction", &e);
            let mut close = None;
            let mut replies = Vec::with_capacity(batch.len());
            for job in batch.drain(..) {
                match job {
                    Job::Run(body) => replies.push(body(Err(failed.clone()), &mut Outbox::default()).1),
                    Job::Close(r) => close = Some(r),
                }
            }
            (close, Answers { replies, commit_error: None })
        }
    }
}

/// Runs `batch` in `tx`, each job in a savepoint of its own, commits, then
/// publishes what committed — still holding the connection, so events go
/// out in commit order. Returns the close request if the batch held one,
/// and the replies, for after the connection is let go.
fn run_batch(
    tx: Tx<'_>,
    batch: &mut Vec<Job>,
    hub: &Hub,
    threads: &AtomicU64,
) -> (Option<oneshot::Sender<()>>, Answers) {
    let mut done: Vec<(Reply, Option<Outbox>)> = Vec::with_capacity(batch.len());
    let mut close = None;
    for job in batch.drain(..) {
        let body = match job {
            Job::Run(body) => body,
            Job::Close(r) => {
                close = Some(r);
                break;
            }
        };
        let mut out = Outbox::default();
        if let Err(e) = savepoint(&tx, "SAVEPOINT job") {
            let (_, reply) = body(Err(Failed::of("cannot open a savepoint", &e)), &mut out);
            done.push((reply, None));
            continue;
        }
        let (ok, reply) = body(Ok(&tx), &mut out);
        if ok {
            if let Err(e) = savepoint(&tx, "RELEASE job") {
                tracing::error!("cannot release savepoint: {e}");
            }
            done.push((reply, Some(out)));
        } else {
            if let Err(e) = savepoint(&tx, "ROLLBACK TO job").and_then(|_| savepoint(&tx, "RELEASE job")) {
                tracing::error!("cannot roll back savepoint: {e}");
            }
            done.push((reply, None));
        }
    }
    // Jobs queued after a close request are dropped here, unanswered.
    batch.clear();
    let commit_error = tx.commit().err().map(|e| {
        tracing::error!("commit failed: {e}");
        Failed::of("commit failed", &e)
    });
    // Events go out before the replies: whatever a caller does next (and
    // publishes) must reach subscribers after what its job wrote.
    let mut replies = Vec::with_capacity(done.len());
    for (reply, out) in done {
        if let (None, Some(out)) = (&commit_error, out) {
            if out.threads_added != 0 {
                threads.fetch_add(out.threads_added as u64, Ordering::Relaxed);
            }
            for (thread, event) in out.events {
                hub.publish(&thread, event);
            }
        }
        replies.push(reply);
    }
    (close, Answers { replies, commit_error })
}

fn savepoint(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
