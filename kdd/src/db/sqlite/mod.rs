//! The SQLite engine of the registry: every operation of the interface
//! ([`crate::db`]) over one file on this machine.
//!
//! **Concurrency design.** One dedicated OS thread owns the only write
//! connection ([`writer`]). Async callers send it jobs — closures over a
//! `&Connection` — through a bounded channel and await a oneshot reply. The
//! writer drains whatever is queued (up to [`writer::MAX_BATCH`] jobs), runs
//! them in one `BEGIN IMMEDIATE` transaction, each inside its own savepoint so
//! one failing job does not undo the others, commits, and only then replies
//! and publishes the jobs' events to subscribers. A write of a few rows
//! ([`Sqlite::write_now`]: a run's start and end) runs on its caller's
//! thread instead when nothing is queued and the connection is free — the
//! connection is behind a mutex its holder of the moment owns. Everything
//! that must be serialised — a thread's dense `seq`, single-resume of
//! sessions, fencing tokens — is therefore decided by one writer at a
//! time, in commit order. Reads run on `spawn_blocking` over a small pool of
//! read-only connections ([`pool`]; WAL lets them proceed beside the
//! writer) — those of a few rows by their keys on the caller's thread
//! ([`Sqlite::read_now`]); the WAL is checkpointed on a thread of its own
//! ([`checkpoint`]).
//!
//! One module per table (or concern) holds its SQL and its `impl Sqlite`
//! operations; [`schema`] holds the migrations, [`search`] the FTS5 index,
//! [`page_json`] pages of messages written as JSON from the rows, [`error`]
//! how rusqlite's errors become [`DbError`]s.

pub(crate) mod acks;
pub(crate) mod approvals;
pub(crate) mod check;
mod checkpoint;
pub(crate) mod comments;
pub(crate) mod compose;
pub(crate) mod cost;
mod error;
pub(crate) mod events;
pub(crate) mod exchanges;
pub(crate) mod inbox;
pub(crate) mod lifecycle;
pub(crate) mod locks;
pub(crate) mod messages;
mod one_node;
mod page_json;
mod pool;
mod row;
pub(crate) mod runs;
pub mod schema;
pub(crate) mod search;
pub(crate) mod sessions;
pub(crate) mod threads;
pub(crate) mod work;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pool::ReadPool;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};
use writer::{Job, MAX_BATCH};

use crate::db::{Cause, DbError, DbResult, Outbox};
use crate::hub::Hub;

/// `LIMIT n` to write into a statement's SQL (`None`: no limit): SQLite
/// plans with a LIMIT's value, so a cached statement whose LIMIT is a
/// bound parameter is prepared again at every run (issue 31: a third of
/// reading a thread went in that). A statement is cached per limit.
pub(super) fn limit(n: Option<u32>) -> String {
    n.map(|n| format!("LIMIT {n}")).unwrap_or_default()
}

/// The most text a write on its caller's thread carries ([`Sqlite::write_now`]):
/// a longer question or answer is indexed for search on the writer thread.
pub(super) const SMALL_TEXT: usize = 64 * 1024;

/// The SQLite engine: one write connection (its writer thread, or a small
/// write's caller), a pool of readers.
pub struct Sqlite {
    jobs: mpsc::Sender<Job>,
    core: Arc<writer::Core>,
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
            DbError::Engine { text, cause: Cause::ReadOnly } => {
                DbError::ReadOnly { path: path.to_path_buf(), reason: text }
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
        let core = Arc::new(writer::Core::new(conn, hub, threads.clone(), checkpointer));
        let handle = writer::spawn(core.clone(), rx).map_err(|e| DbError::Migration {
            path: path.to_path_buf(),
            reason: format!("cannot start writer: {e}"),
        })?;
        Ok(Sqlite {
            jobs: tx,
            core,
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

    /// [`Sqlite::write`] of a few rows by their keys (a run's start, its
    /// end with an answer of ordinary length): on the caller's thread (a
    /// runtime worker) when no one else writes — it takes less than the
    /// hop to the writer thread and back; queued for the writer otherwise,
    /// as [`Sqlite::write`] (`writer::Core::try_now`). A write that may take
    /// many rows or a large text goes through [`Sqlite::write`].
    pub async fn write_now<T, F>(&self, f: F) -> DbResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Outbox) -> DbResult<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let queue_empty = self.jobs.capacity() == self.jobs.max_capacity();
        if let Some(job) = self.core.try_now(Job::new(f, reply), queue_empty) {
            self.jobs.send(job).await.map_err(|_| DbError::Closed)?;
        }
        rx.await.map_err(|_| DbError::Closed)?
    }

    /// [`Sqlite::write_now`] when `small` (the text it carries is at most
    /// [`SMALL_TEXT`]), [`Sqlite::write`] otherwise.
    pub async fn write_if_small<T, F>(&self, small: bool, f: F) -> DbResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Outbox) -> DbResult<T> + Send + 'static,
    {
        if small { self.write_now(f).await } else { self.write(f).await }
    }

    /// Runs `f` on a pooled read-only connection on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> DbResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        self.read_pooled(move |pool| pool.with(f)).await
    }

    /// Runs `f` on a pooled read-only connection on the caller's thread (a
    /// runtime worker): a read of a few rows by their keys, which takes
    /// microseconds — less than the hop to the blocking pool and back,
    /// two thread switches, each a wake of a parked thread (issue 31, item
    /// 17: a tenth of kdd's time in an ask went in such switches). A read
    /// that may take many rows goes through [`Sqlite::read`].
    pub fn read_now<T>(&self, f: impl FnOnce(&Connection) -> DbResult<T>) -> DbResult<T> {
        self.readers.with(f)
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

    /// SQLite's `integrity_check`: `ok`, or the problems it found. On a
    /// connection of its own: FTS5's part of the check reads the search
    /// index through what a pooled connection kept of it from an earlier
    /// read, and told a healthy registry written meanwhile as corrupt.
    pub async fn integrity_check(&self) -> DbResult<Vec<String>> {
        self.read_pooled(|pool| {
            let c = pool.open()?;
            let mut stmt = c.prepare("PRAGMA integrity_check")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    /// Finishes every queued write, checkpoints the WAL and stops the writer.
    /// Later writes fail with [`DbError::Closed`].
    /// kdd is stopping: another program's lock on the file is waited for
    /// briefly ([`schema::STOPPING_BUSY`]) by what is still written.
    pub fn stopping(&self) {
        self.core.stopping();
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &tempfile::TempDir) -> Sqlite {
        Sqlite::open(&dir.path().join("kd.sqlite3"), Arc::new(Hub::new())).unwrap()
    }

    /// The name of the thread a write ran on.
    fn on_thread(_: &Connection, _: &mut Outbox) -> DbResult<Option<String>> {
        Ok(std::thread::current().name().map(str::to_string))
    }

    /// `kd doctor`'s check while messages are written and indexed: the
    /// check reads the search index as one moment had it (it said "fts5:
    /// corruption found reading blob" of a healthy registry).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_integrity_check_reads_the_search_index_as_one_moment_had_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(open(&dir));
        db.write(|c, _| {
            Ok(c.execute_batch(
                "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t', '/w', 1, 1)",
            )?)
        })
        .await
        .unwrap();
        let writing = {
            let db = db.clone();
            tokio::spawn(async move {
                for i in 0..400 {
                    db.write(move |c, _| {
                        Ok(c.execute(
                            "INSERT INTO messages (thread_id, seq, sender, recipients, kind, body, created_at)
                             VALUES ('t', ?1, 'king', '[]', 'king', ?2, 1)",
                            rusqlite::params![i + 1, format!("stress {i} word{i} ").repeat(20)],
                        )?)
                    })
                    .await
                    .unwrap();
                    db.index_messages().await.unwrap();
                }
            })
        };
        let mut checks = 0;
        while !writing.is_finished() {
            let f = crate::db::search::Filter { limit: Some(5), ..Default::default() };
            db.search("stress".into(), f).await.unwrap();
            assert_eq!(db.integrity_check().await.unwrap(), ["ok"], "check {checks}");
            checks += 1;
        }
        writing.await.unwrap();
        assert!(checks > 0, "checked while it wrote");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_write_runs_on_its_callers_thread_when_no_one_else_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let here = std::thread::current().name().map(str::to_string);
        assert_eq!(db.write_now(on_thread).await.unwrap(), here, "on the caller's thread");
        assert_eq!(db.write(on_thread).await.unwrap().as_deref(), Some("kdd-db-writer"));
        // What it wrote is committed, and seen by the next write.
        db.write_now(|c, _| Ok(c.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)")?))
            .await
            .unwrap();
        let n: i64 = db.write(|c, _| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?)).await.unwrap();
        assert_eq!(n, 1);
    }

    /// A queued write answers its caller after the writer let go of the
    /// connection: the caller's next small write finds it free and runs on
    /// its own thread, never queued behind a writer that has finished.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_write_answers_after_the_connection_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let here = std::thread::current().name().map(str::to_string);
        for i in 0..2000 {
            assert_eq!(db.write(on_thread).await.unwrap().as_deref(), Some("kdd-db-writer"));
            assert_eq!(db.write_now(on_thread).await.unwrap(), here, "write {i} found the connection held");
        }
    }

    /// Small writes on their callers' threads and queued ones at once are
    /// still one writer at a time: each takes the next number after what
    /// committed before it, and none is taken twice or skipped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_and_queued_writes_at_once_write_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(open(&dir));
        db.write(|c, _| Ok(c.execute_batch("CREATE TABLE n (seq INTEGER PRIMARY KEY)")?)).await.unwrap();
        let next = |c: &Connection, _: &mut Outbox| -> DbResult<i64> {
            Ok(c.query_row("INSERT INTO n SELECT coalesce(max(seq), 0) + 1 FROM n RETURNING seq", [], |r| r.get(0))?)
        };
        let writes: Vec<_> = (0..200)
            .map(|i| {
                let db = db.clone();
                tokio::spawn(async move { if i % 2 == 0 { db.write_now(next).await } else { db.write(next).await } })
            })
            .collect();
        let mut taken = Vec::new();
        for w in writes {
            taken.push(w.await.unwrap().unwrap());
        }
        taken.sort_unstable();
        assert_eq!(taken, (1..=200).collect::<Vec<i64>>());
    }

    /// Another program holding the file's write lock (a `sqlite3` shell's
    /// open `BEGIN IMMEDIATE`) is not waited for on the caller's thread: the
    /// write goes to the writer thread, which waits for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_write_does_not_wait_on_its_callers_thread_for_another_programs_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let other = Connection::open(dir.path().join("kd.sqlite3")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = std::time::Instant::now();
        let waited = tokio::time::timeout(std::time::Duration::from_millis(300), db.write_now(on_thread)).await;
        assert!(waited.is_err(), "written while another program held the lock: {waited:?}");
        assert!(started.elapsed() < schema::WRITE_BUSY / 2, "the caller's thread waited for the lock");
        other.execute_batch("COMMIT").unwrap();
        assert_eq!(db.write(on_thread).await.unwrap().as_deref(), Some("kdd-db-writer"), "the queue goes on");
        let here = std::thread::current().name().map(str::to_string);
        assert_eq!(db.write_now(on_thread).await.unwrap(), here, "and the caller's thread writes again");
    }

    /// Once kdd is stopping, a write waits for another program's lock
    /// [`schema::STOPPING_BUSY`] at most — a wait begun before the stop
    /// too — and the last checkpoint does not wait it out either (a
    /// hostile trial, stop 61: `kd daemon stop` took 12 s, then 30 s, with
    /// the file's write lock held). Before the stop it waits and then writes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn once_kdd_stops_a_write_waits_for_another_programs_lock_only_briefly() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(open(&dir));
        let other = Connection::open(dir.path().join("kd.sqlite3")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let waiting = tokio::spawn({
            let db = db.clone();
            async move { db.write(on_thread).await }
        });
        // Still waiting past the stopping wait: its wait is the long one.
        tokio::time::sleep(schema::STOPPING_BUSY * 3).await;
        assert!(!waiting.is_finished(), "the write gave up before kdd stopped");
        let stopping = std::time::Instant::now();
        db.stopping();
        let failed = waiting.await.unwrap();
        assert!(matches!(failed, Err(DbError::Unavailable(_))), "{failed:?}");
        assert!(stopping.elapsed() < schema::WRITE_BUSY / 2, "the wait begun went on: {:?}", stopping.elapsed());
        let closing = std::time::Instant::now();
        db.close().await;
        assert!(closing.elapsed() < schema::WRITE_BUSY / 2, "the last checkpoint waited: {:?}", closing.elapsed());
        other.execute_batch("COMMIT").unwrap();
    }
}
