//! Connection settings and migrations.
//!
//! Migrations are the files `migrations/NNNN_name.sql`, embedded at build
//! time, applied in order at start; the applied version is SQLite's
//! `user_version`. A migration is never edited after it lands: add a new one.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

use super::{DbError, DbResult};

/// The migrations, in order. Version N is the state after the N-th.
pub const MIGRATIONS: &[&str] = &[
    include_str!("../../../../migrations/0001_init.sql"),
    include_str!("../../../../migrations/0002_runs.sql"),
    include_str!("../../../../migrations/0003_rounds.sql"),
    include_str!("../../../../migrations/0004_sessions_seen_refs_origin.sql"),
    include_str!("../../../../migrations/0005_run_partials.sql"),
    include_str!("../../../../migrations/0006_coordination.sql"),
    include_str!("../../../../migrations/0007_purpose.sql"),
    include_str!("../../../../migrations/0008_lifecycle.sql"),
    include_str!("../../../../migrations/0009_search.sql"),
    include_str!("../../../../migrations/0010_cost_ledger.sql"),
    include_str!("../../../../migrations/0011_work.sql"),
    include_str!("../../../../migrations/0012_exchanges.sql"),
    include_str!("../../../../migrations/0013_work_tampered.sql"),
    include_str!("../../../../migrations/0014_exchange_path.sql"),
    include_str!("../../../../migrations/0015_approvals.sql"),
    include_str!("../../../../migrations/0016_work_check.sql"),
    include_str!("../../../../migrations/0017_work_shipped.sql"),
    include_str!("../../../../migrations/0018_work_comments.sql"),
    include_str!("../../../../migrations/0019_work_uncommitted.sql"),
];

/// The schema version this build writes.
pub fn latest_version() -> u32 {
    MIGRATIONS.len() as u32
}

fn migrations() -> Migrations<'static> {
    Migrations::new(MIGRATIONS.iter().map(|sql| M::up(sql)).collect())
}

/// How long the write connection waits for another program's lock on the
/// file before a write fails as an outage (the writer thread's; a write on
/// its caller's thread does not wait: `writer::Core::try_now`).
pub const WRITE_BUSY: Duration = Duration::from_secs(5);

/// The same wait once kdd is stopping ([`super::Sqlite::stopping`]): what
/// it writes then (runs recorded interrupted, the exchanges cut, the last
/// checkpoint) is not worth a stop held up by another program's lock — a
/// write that fails is lost as in a crash, and the next start finds it out
/// (a hostile trial, stop 61: `kd daemon stop` took 12 s with the file's
/// write lock held).
pub const STOPPING_BUSY: Duration = Duration::from_millis(100);

/// PRAGMAs of the write connection.
pub fn configure(conn: &Connection) -> DbResult<()> {
    conn.busy_timeout(WRITE_BUSY)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // Checkpoints run on their own thread: see `db::checkpoint`.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "journal_size_limit", super::checkpoint::JOURNAL_SIZE_LIMIT)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// Fails unless the database can be written: SQLite opens a file it may
/// not write read-only, and a directory where no journal can be made fails
/// only at the first commit — kdd would start and then fail every write.
pub fn check_writable(conn: &Connection, path: &Path) -> DbResult<()> {
    if conn.is_readonly(rusqlite::MAIN_DB)? {
        return Err(DbError::ReadOnly { path: path.to_path_buf(), reason: "the file cannot be written".into() });
    }
    // A commit that changes nothing still writes (the header) to the WAL.
    let version = version(conn)?;
    let probe = conn.execute_batch(&format!("BEGIN IMMEDIATE; PRAGMA user_version = {version}; COMMIT;"));
    if let Err(e) = probe {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(DbError::ReadOnly { path: path.to_path_buf(), reason: e.to_string() });
    }
    Ok(())
}

/// The page cache of one read connection, in KiB. SQLite's default
/// (2 MiB) holds less than a long thread: a 10,000-message read then pulls
/// every page from the OS again (7 ms of its 13). The cache is filled only
/// by pages read, so an idle daemon does not pay for it.
pub const READER_CACHE_KIB: i64 = 8 * 1024;
const _: () = assert!(READER_CACHE_KIB * 1024 > 6_000_000, "10,000 messages of ~350 characters take ~5 MB of pages");

/// PRAGMAs of a read connection.
pub fn configure_reader(conn: &Connection) -> DbResult<()> {
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "query_only", "ON")?;
    conn.pragma_update(None, "cache_size", -READER_CACHE_KIB)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// The schema version recorded in the database.
pub fn version(conn: &Connection) -> DbResult<u32> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get::<_, u32>(0))?)
}

/// Brings the database to [`latest_version`]; refuses a newer one.
pub fn migrate(conn: &mut Connection, path: &Path) -> DbResult<u32> {
    let found = version(conn)?;
    let known = latest_version();
    if found > known {
        return Err(DbError::SchemaTooNew { path: path.to_path_buf(), found, known });
    }
    migrations().to_latest(conn).map_err(|e| DbError::Migration { path: path.to_path_buf(), reason: e.to_string() })?;
    version(conn)
}

/// A migrated registry in memory with one thread `thread` (for the
/// tables' unit tests).
#[cfg(test)]
pub fn in_memory_with_thread(thread: &str) -> Connection {
    let mut conn = Connection::open_in_memory().expect("in-memory database");
    configure(&conn).expect("configure");
    migrate(&mut conn, Path::new(":memory:")).expect("migrate");
    conn.execute("INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES (?1, '/w', 1, 1)", [thread])
        .expect("a thread");
    conn
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_caches_a_long_thread() -> DbResult<()> {
        let conn = Connection::open_in_memory()?;
        configure_reader(&conn)?;
        let kib: i64 = conn.pragma_query_value(None, "cache_size", |r| r.get(0))?;
        assert_eq!(kib, -READER_CACHE_KIB);
        Ok(())
    }

    #[test]
    fn migrations_are_valid() {
        assert!(migrations().validate().is_ok());
    }

    #[test]
    fn fresh_database_reaches_latest_version() -> DbResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DbError::Internal(e.to_string()))?;
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path)?;
        configure(&conn)?;
        assert_eq!(migrate(&mut conn, &path)?, latest_version());
        // Applying again is a no-op.
        assert_eq!(migrate(&mut conn, &path)?, latest_version());
        Ok(())
    }

    #[test]
    fn newer_schema_is_refused_with_versions_in_the_message() -> DbResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DbError::Internal(e.to_string()))?;
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path)?;
        conn.pragma_update(None, "user_version", latest_version() + 1)?;
        let err = migrate(&mut conn, &path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(&format!("schema version {}", latest_version() + 1)), "{err}");
        assert!(err.contains("newer than this kdd knows"), "{err}");
        Ok(())
    }

    #[test]
    fn a_database_of_the_schema_before_the_lifecycle_upgrades_in_place() -> DbResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DbError::Internal(e.to_string()))?;
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path)?;
        configure(&conn)?;
        // Written by the schema of issue 10 (migrations 1 to 7).
        let before = Migrations::new(MIGRATIONS[..7].iter().map(|sql| M::up(sql)).collect());
        before.to_latest(&mut conn).map_err(|e| DbError::Internal(e.to_string()))?;
        conn.execute_batch(
            "INSERT INTO threads (id, workspace, status, lineage, created_at, last_activity_at, last_seq, title)
                 VALUES ('old1', '/w', 'archived', 'branch', 1, 2, 1, 'kept');
             INSERT INTO threads (id, workspace, branch, lineage, created_at, last_activity_at)
                 VALUES ('tr2', '/w', 'main', 'trunk', 20, 20), ('tr1', '/w', 'main', 'trunk', 10, 10),
                        ('tr3', '/w', 'dev', 'trunk', 30, 30);
             INSERT INTO messages (thread_id, seq, sender, recipients, kind, body, created_at)
                 VALUES ('old1', 1, 'king', '[\"all\"]', 'king', 'hello', 2);",
        )?;
        assert_eq!(migrate(&mut conn, &path)?, latest_version());
        // Every new thread used to be a trunk: the oldest stays one.
        let lineage = |id: &str| crate::db::sqlite::threads::get(&conn, id).map(|t| (t.lineage, t.parent));
        use kd_proto::types::Lineage::*;
        assert_eq!(lineage("tr1")?, (Trunk, None));
        assert_eq!(lineage("tr2")?, (Branch, Some("tr1".to_string())));
        assert_eq!(lineage("tr3")?, (Trunk, None), "another git branch has its own trunk");
        let t = crate::db::sqlite::threads::get(&conn, "old1")?;
        assert_eq!((t.title.as_deref(), t.summary, t.last_seq), (Some("kept"), None, 1));
        let summary = crate::db::lifecycle::Summary { text: "s".into(), by: "kd".into() };
        let mut out = crate::db::sqlite::Outbox::default();
        crate::db::sqlite::lifecycle::set_status(
            &conn,
            3,
            "old1",
            kd_proto::types::ThreadStatus::Active,
            "unarchive",
            Some(&summary),
            &mut out,
        )?;
        // What the database held is in the search index.
        let hits = crate::db::sqlite::search::query(&conn, "hello", &Default::default())?;
        assert_eq!(hits.iter().map(|h| (h.thread.as_str(), h.seq)).collect::<Vec<_>>(), [("old1", Some(1))]);
        let m = crate::db::sqlite::messages::list(&conn, "old1", crate::db::messages::Page::all_after(0))?;
        assert_eq!((m.len(), m[0].purpose, m[0].body.as_str()), (1, None, "hello"));
        Ok(())
    }
}
