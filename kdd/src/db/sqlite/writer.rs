//! The writer thread: the one owner of the write connection. See the
//! concurrency design in the parent module.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use super::checkpoint::{self, Checkpointer, EVERY_JOBS, NUDGE_PAGES};
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

pub(super) fn spawn(
    conn: Connection,
    rx: mpsc::Receiver<Job>,
    hub: Arc<Hub>,
    threads: Arc<AtomicU64>,
    checkpointer: Checkpointer,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("kdd-db-writer".into()).spawn(move || run(conn, rx, &hub, &threads, checkpointer))
}

fn run(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Job>,
    hub: &Hub,
    threads: &AtomicU64,
    mut checkpointer: Checkpointer,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut since_checkpoint = 0;
    checkpoint::watch_wal(&conn);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        since_checkpoint += batch.len();
        let closed = execute(&mut conn, &mut batch, hub, threads);
        if since_checkpoint >= EVERY_JOBS || checkpoint::wal_pages() >= NUDGE_PAGES {
            checkpointer.nudge();
            since_checkpoint = 0;
        }
        if let Some(closed) = closed {
            rx.close();
            checkpointer.stop();
            if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
                tracing::warn!("checkpoint at close failed: {e}");
            }
            drop(conn);
            let _ = closed.send(());
            return;
        }
    }
}

/// Runs one batch in one transaction. Returns the close request if the
/// batch contained one (jobs after it are dropped unanswered: their callers
/// see [`DbError::Closed`]).
fn execute(conn: &mut Connection, batch: &mut Vec<Job>, hub: &Hub, threads: &AtomicU64) -> Option<oneshot::Sender<()>> {
    let mut done: Vec<(Reply, Option<Outbox>)> = Vec::with_capacity(batch.len());
    let mut close = None;
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            tracing::error!("cannot begin a write transaction: {e}");
            let failed = Failed::of("cannot begin a transaction", &e);
            for job in batch.drain(..) {
                match job {
                    Job::Run(body) => {
                        let (_, reply) = body(Err(failed.clone()), &mut Outbox::default());
                        reply(None);
                    }
                    Job::Close(r) => close = Some(r),
                }
            }
            return close;
        }
    };
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
    // Events go out before the reply: whatever the caller does next (and
    // publishes) must reach subscribers after what this job wrote.
    for (reply, out) in done {
        if let (None, Some(out)) = (&commit_error, out) {
            if out.threads_added != 0 {
                threads.fetch_add(out.threads_added as u64, Ordering::Relaxed);
            }
            for (thread, event) in out.events {
                hub.publish(&thread, event);
            }
        }
        reply(commit_error.clone());
    }
    close
}

fn savepoint(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
