//! The PostgreSQL engine of the registry: the same operations as SQLite's,
//! over a database several kdd nodes may share.
//!
//! **What it owns.** A pool of connections to one database (at most
//! [`POOL_SIZE`], each waited for at most [`POOL_WAIT`], else
//! [`DbError::Unavailable`]), the hub its writes publish to, the schema
//! (migrated at open, [`schema`]) and the count of threads.
//!
//! **Concurrency design.** One operation = one transaction (READ COMMITTED)
//! on a pooled connection; inside it nothing is awaited but the database.
//! What SQLite's single writer serialised by running jobs one at a time is
//! serialised here by locks taken inside the transaction: a thread's dense
//! `seq` by the row lock of `UPDATE threads SET last_seq = last_seq + 1 …
//! RETURNING last_seq`; one trunk per workspace, single resume of a session
//! and a lock's fencing token by `SELECT … FOR UPDATE` or
//! `pg_advisory_xact_lock(hashtextextended(…, 0))` before the read that
//! decides; unique indexes stay the backstop (a 23505 is mapped to the
//! domain error, [`error::unique_violation`]). A write collects its events
//! in an [`Outbox`] and [`Pg::commit`] publishes them after the commit,
//! before the reply — SQLite's invariant.
//!
//! Every connection runs with `statement_timeout = 30s` and
//! `idle_in_transaction_session_timeout = 60s` (a stuck kdd cannot hold a
//! thread's row lock for long), `TimeZone = UTC`, `application_name = kdd`.
//! Times stay Unix milliseconds computed by kdd, as in SQLite.

pub(crate) mod acks;
mod approvals;
pub(crate) mod check;
mod comments;
pub(crate) mod compose;
pub(crate) mod cost;
mod error;
pub(crate) mod events;
pub(crate) mod exchanges;
pub(crate) mod inbox;
mod lane;
pub(crate) mod leases;
pub(crate) mod lifecycle;
pub(crate) mod locks;
pub(crate) mod messages;
pub mod nodes;
pub(crate) mod page_json;
pub(crate) mod relay;
mod row;
pub(crate) mod runs;
pub mod schema;
pub(crate) mod search;
pub(crate) mod search_query;
pub(crate) mod sessions;
#[cfg(test)]
mod test_rows;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod threads;
pub mod url;
pub(crate) mod work;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use crate::db::{DbError, DbResult, Outbox};
use crate::hub::Hub;

use error::still_open;
pub use error::unique_violation;

/// Connections in the pool.
pub const POOL_SIZE: usize = 16;
/// How long an operation waits for a free connection (or a new one).
pub const POOL_WAIT: Duration = Duration::from_secs(5);

/// This connection's node in SQL: what every row it writes records as its
/// `node_id` (`kd.node`, set at connect; `local` for a connection of no
/// node, as the columns' defaults say).
pub(crate) const ME: &str = "coalesce(current_setting('kd.node', true), 'local')";

/// This connection's node's lease in SQL, an interval (`kd.lease_ms`, set
/// at connect; [`nodes::LEASE`] for a connection of no node): how long a
/// node stays live after its heartbeat, and an exchange leased to it.
pub(crate) const LEASE: &str =
    "make_interval(secs => coalesce(current_setting('kd.lease_ms', true), '15000')::float8 / 1000)";

/// Whether the `nodes` row `n` is live, in SQL: its heartbeat younger than
/// its own lease.
pub(crate) fn live(n: &str) -> String {
    format!("({n}.state = 'live' AND {n}.heartbeat_at > now() - make_interval(secs => {n}.lease_ms::float8 / 1000))")
}

/// Settings of every connection, sent at its start (no round trip).
const SESSION_OPTIONS: &str = "-c statement_timeout=30s -c idle_in_transaction_session_timeout=60s -c TimeZone=UTC \
                               -c client_min_messages=warning";

/// Handle to a PostgreSQL registry; cheap to share behind an `Arc`.
pub struct Pg {
    pool: Pool,
    hub: Arc<Hub>,
    location: String,
    schema_version: u32,
    threads: AtomicU64,
    /// Woken when work is routed to this node (`kd_work`, [`relay`]).
    pub(crate) work: tokio::sync::Notify,
    /// `message.append`, batched ([`lane`]).
    pub(crate) lanes: lane::Lanes,
    /// Cancellations other nodes asked of this one (`kd_cancel`, [`relay`]):
    /// the sender the listener feeds, the receiver the cluster task takes.
    pub(crate) cancels: (
        tokio::sync::mpsc::Sender<crate::db::runs::Cancel>,
        std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<crate::db::runs::Cancel>>>,
    ),
    /// Since when this node's heartbeats have gone through without a
    /// break (`None` while they fail): it judges others dead only once it
    /// has been steadily live for a lease — after an outage of the
    /// database, every node's heartbeat is old, not only the dead ones'.
    pub(crate) steady_since: std::sync::Mutex<Option<std::time::Instant>>,
    /// Set when the others declared this node dead (its heartbeat stalled
    /// past the lease): what it drove is theirs now.
    pub(crate) lost: std::sync::atomic::AtomicBool,
}

impl Pg {
    /// Connects to `url` (a `postgres://` URL or a conninfo string),
    /// migrates the database (once, whoever else starts at the same time)
    /// and counts its threads. Refuses a database whose schema is newer than
    /// ours.
    pub async fn open(url: &str, hub: Arc<Hub>) -> DbResult<Pg> {
        Self::open_sized(url, hub, POOL_SIZE, None).await
    }

    /// [`Pg::open`] for node `node`: every connection names it
    /// (`kd.node`), so what this node writes records where it runs.
    pub async fn open_as(url: &str, hub: Arc<Hub>, node: &str) -> DbResult<Pg> {
        Self::open_sized(url, hub, POOL_SIZE, Some((node, nodes::LEASE))).await
    }

    /// [`Pg::open`] for node `me`, with its lease.
    pub async fn open_node(url: &str, hub: Arc<Hub>, me: &crate::db::Node) -> DbResult<Pg> {
        Self::open_sized(url, hub, POOL_SIZE, Some((&me.id, me.lease))).await
    }

    /// [`Pg::open`] with a pool of `size` connections.
    pub async fn open_sized(url: &str, hub: Arc<Hub>, size: usize, node: Option<(&str, Duration)>) -> DbResult<Pg> {
        let mut target = url::parse(url)?;
        let mut options = match target.config.get_options() {
            Some(own) if !own.is_empty() => format!("{own} {SESSION_OPTIONS}"),
            _ => SESSION_OPTIONS.to_string(),
        };
        // A node name is `[a-z0-9_.-]` (kd_proto::names): nothing to quote.
        if let Some((node, lease)) = node.filter(|(n, _)| kd_proto::names::check_node_name(n).is_ok()) {
            options.push_str(&format!(" -c kd.node={node} -c kd.lease_ms={}", lease.as_millis()));
        }
        target.config.options(options);
        if target.config.get_application_name().is_none() {
            target.config.application_name("kdd");
        }
        if target.config.get_connect_timeout().is_none() {
            target.config.connect_timeout(POOL_WAIT);
        }
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = match &target.tls {
            url::Tls::None => Manager::from_config(target.config, tokio_postgres::NoTls, manager_config),
            url::Tls::Verified(roots) => {
                let tls = tokio_postgres_rustls::MakeRustlsConnect::new(url::rustls_config(roots)?);
                Manager::from_config(target.config, tls, manager_config)
            }
        };
        let location = target.location;
        let pool = Pool::builder(manager)
            .max_size(size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| DbError::Internal(format!("cannot build the database pool: {e}")))?;
        let unreachable = |e: DbError| match e {
            DbError::Unavailable(why) => DbError::Unavailable(format!("{location}: {why}")),
            other => other,
        };
        let mut c = pool.get().await.map_err(|e| unreachable(e.into()))?;
        let schema_version = schema::migrate(&mut c, &location).await.map_err(unreachable)?;
        let count = threads::count(&c).await?;
        drop(c);
        let lanes = lane::Lanes::start(pool.clone(), hub.clone());
        let (cancel_tx, cancel_rx) = tokio::sync::mpsc::channel(64);
        Ok(Pg {
            pool,
            hub,
            location,
            schema_version,
            threads: AtomicU64::new(count),
            lanes,
            cancels: (cancel_tx, std::sync::Mutex::new(Some(cancel_rx))),
            steady_since: Default::default(),
            work: tokio::sync::Notify::new(),
            lost: Default::default(),
        })
    }

    /// The database's address, without its password.
    pub fn location(&self) -> &str {
        &self.location
    }

    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// Number of threads: counted at open, kept by this node's writes.
    pub fn thread_count(&self) -> u64 {
        self.threads.load(Ordering::Relaxed)
    }

    /// `["ok"]` when the database answers and holds the schema this kdd
    /// migrated it to; else what is wrong.
    pub async fn integrity_check(&self) -> DbResult<Vec<String>> {
        let c = self.conn().await?;
        let found = schema::found(&c).await?;
        if found == self.schema_version {
            Ok(vec!["ok".into()])
        } else {
            Ok(vec![format!(
                "the database {} has schema version {found}; this kdd migrated it to {}",
                self.location, self.schema_version
            )])
        }
    }

    /// Closes the pool: later operations fail with [`DbError::Closed`].
    /// Transactions in progress finish on the connections they hold.
    pub async fn close(&self) {
        self.pool.close();
    }

    /// Whether the registry was closed.
    pub fn is_closed(&self) -> bool {
        self.pool.is_closed()
    }

    /// A pooled connection (reads; and `.transaction()` for writes).
    pub(crate) async fn conn(&self) -> DbResult<deadpool_postgres::Object> {
        Ok(self.pool.get().await?)
    }

    /// Commits `tx`, then publishes `out` (events to the hub, the change in
    /// the number of threads): publish after commit, before the reply.
    pub(crate) async fn commit(&self, tx: deadpool_postgres::Transaction<'_>, out: Outbox) -> DbResult<()> {
        tx.commit().await?;
        if out.threads_added != 0 {
            self.threads.fetch_add(out.threads_added as u64, Ordering::Relaxed);
        }
        for (thread, event) in out.events {
            self.hub.publish(&thread, event);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn two_nodes_opening_a_fresh_database_together_migrate_it_once() {
        let Some(db) = testing::empty().await else { return };
        let (a, b) = tokio::join!(Pg::open(db.url(), Arc::new(Hub::new())), Pg::open(db.url(), Arc::new(Hub::new())));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.schema_version(), b.schema_version()), (schema::known(), schema::known()));
        let c = a.conn().await.unwrap();
        let rows = c.query("SELECT version FROM kd_schema ORDER BY version", &[]).await.unwrap();
        let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(versions, (1..=schema::known() as i32).collect::<Vec<_>>());
        assert_eq!(a.integrity_check().await.unwrap(), ["ok"]);
        a.close().await;
        b.close().await;
    }

    #[tokio::test]
    async fn a_database_with_a_newer_schema_is_refused() {
        let Some((pg, db)) = testing::fresh().await else { return };
        let c = pg.conn().await.unwrap();
        c.execute("INSERT INTO kd_schema (version, applied_at, kdd) VALUES (999, 0, 'future')", &[]).await.unwrap();
        assert_eq!(pg.integrity_check().await.unwrap().len(), 1);
        assert_ne!(pg.integrity_check().await.unwrap(), ["ok"]);
        drop(c);
        match Pg::open(db.url(), Arc::new(Hub::new())).await {
            Err(DbError::SchemaTooNew { path, found: 999, known }) => {
                assert_eq!(known, schema::known());
                assert_eq!(path, std::path::PathBuf::from(pg.location()));
                let msg = DbError::SchemaTooNew { path, found: 999, known }.to_string();
                assert!(!msg.contains("password"), "{msg}");
            }
            Err(e) => panic!("not refused as too new: {e}"),
            Ok(_) => panic!("a newer schema was opened"),
        }
    }

    #[tokio::test]
    async fn thread_count_is_counted_at_open_and_kept_by_commits() {
        let Some((pg, db)) = testing::fresh().await else { return };
        assert_eq!(pg.thread_count(), 0);
        let mut c = pg.conn().await.unwrap();
        let tx = c.transaction().await.unwrap();
        for id in ["a", "b"] {
            tx.execute(
                "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ($1, '/w/' || $1, 1, 1)",
                &[&id],
            )
            .await
            .unwrap();
        }
        pg.commit(tx, Outbox { threads_added: 2, ..Outbox::default() }).await.unwrap();
        assert_eq!(pg.thread_count(), 2);
        let tx = c.transaction().await.unwrap();
        tx.execute("DELETE FROM threads WHERE id = 'a'", &[]).await.unwrap();
        pg.commit(tx, Outbox { threads_added: -1, ..Outbox::default() }).await.unwrap();
        assert_eq!(pg.thread_count(), 1);
        let again = Pg::open(db.url(), Arc::new(Hub::new())).await.unwrap();
        assert_eq!(again.thread_count(), 1);
    }

    #[tokio::test]
    async fn events_are_published_after_the_commit_and_not_after_a_rollback() {
        use kd_proto::types::ThreadEvent;
        let Some((pg, _db)) = testing::fresh().await else { return };
        let mut rx = pg.hub.subscribe("t");
        let mut c = pg.conn().await.unwrap();
        let tx = c.transaction().await.unwrap();
        let mut out = Outbox::default();
        out.publish("t", ThreadEvent::Status { status: kd_proto::types::ThreadStatus::Idle, reason: "test".into() });
        drop(tx);
        assert!(rx.try_recv().is_err());
        let tx = c.transaction().await.unwrap();
        pg.commit(tx, out).await.unwrap();
        assert!(rx.try_recv().is_ok());
    }

    #[tokio::test]
    async fn a_closed_pool_answers_closed_and_sessions_are_utc_with_timeouts() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let c = pg.conn().await.unwrap();
        let row = c
            .query_one(
                "SELECT current_setting('TimeZone'), current_setting('statement_timeout'),
                        current_setting('idle_in_transaction_session_timeout'), current_setting('application_name')",
                &[],
            )
            .await
            .unwrap();
        let got: (String, String, String, String) = (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(got, ("UTC".into(), "30s".into(), "1min".into(), "kdd".into()));
        drop(c);
        pg.close().await;
        assert!(matches!(pg.conn().await, Err(DbError::Closed)));
    }
}
