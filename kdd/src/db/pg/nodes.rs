//! This kdd among the others on one PostgreSQL registry: its row in
//! `nodes` (who it is, where, since when), its heartbeat, and who is live.
//!
//! Liveness is decided by one clock, the database's: a node is live while
//! its last heartbeat is younger than the lease. A node name is held by one
//! process at a time: a second kdd taking a live name is refused, unless the
//! holder is a dead process of this same host (a restart after a crash
//! takes its name back at once). Every start is a new incarnation: what the
//! previous one held is not this one's.

use std::time::Duration;

use kd_proto::types::NodeStatus;

use super::{LEASE as LEASE_SQL, Pg, live};
use crate::db::{DbError, DbResult, Node, now_ms};

/// How long a node stays live after its last heartbeat, by default
/// (`kdd --cluster-lease-ms`).
pub const LEASE: Duration = Duration::from_secs(15);

impl Pg {
    /// Takes the name `me.id` for this process (refused while another live
    /// process holds it); this start's incarnation.
    pub async fn join(&self, me: &Node, alive: &(dyn Fn(u32) -> bool + Sync)) -> DbResult<i64> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtextextended('kd.node:' || $1, 0))", &[&me.id]).await?;
        let held = tx
            .query_opt(
                &format!(
                    "SELECT host, pid, (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint FROM nodes n \
                     WHERE id = $1 AND {}",
                    live("n")
                ),
                &[&me.id],
            )
            .await?;
        if let Some(row) = held {
            let (host, pid, ago): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let pid = u32::try_from(pid).unwrap_or(0);
            let ours = host == me.host && (pid == me.pid || !alive(pid));
            if !ours {
                return Err(DbError::Invalid(format!(
                    "node {} is already live (host {host}, pid {pid}, heartbeat {} ms ago); give this kdd another \
                     --node (or KD_NODE)",
                    me.id,
                    ago.max(0)
                )));
            }
        }
        let row = tx
            .query_one(
                "INSERT INTO nodes (id, host, pid, socket, kdd_version, started_at, heartbeat_at, clock_ms, \
                 incarnation, state, lease_ms) VALUES ($1, $2, $3, $4, $5, now(), now(), $6, 1, 'live', $7) \
                 ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, socket = excluded.socket, \
                 lease_ms = excluded.lease_ms, \
                 kdd_version = excluded.kdd_version, started_at = now(), heartbeat_at = now(), \
                 clock_ms = excluded.clock_ms, incarnation = nodes.incarnation + 1, state = 'live', reaped_at = NULL \
                 RETURNING incarnation",
                &[
                    &me.id,
                    &me.host,
                    &i64::from(me.pid),
                    &me.socket,
                    &kd_proto::VERSION,
                    &now_ms(),
                    &(me.lease.as_millis().min(i64::MAX as u128) as i64),
                ],
            )
            .await?;
        tx.commit().await?;
        self.heard(true);
        Ok(row.get(0))
    }

    /// Notes whether a heartbeat went through.
    pub(crate) fn heard(&self, ok: bool) {
        if let Ok(mut since) = self.steady_since.lock() {
            match (ok, *since) {
                (true, None) => *since = Some(std::time::Instant::now()),
                (false, _) => *since = None,
                (true, Some(_)) => {}
            }
        }
    }

    /// For how long this node's heartbeats have gone through without a
    /// break, in milliseconds (0 while they fail): it judges another node
    /// dead only when that is at least the other's lease.
    pub(crate) fn steady_ms(&self) -> i64 {
        let since = self.steady_since.lock().ok().and_then(|s| *s);
        since.map_or(0, |t| t.elapsed().as_millis().min(i64::MAX as u128) as i64)
    }

    /// Says this node is live and renews the leases of the exchanges it
    /// drives; false when it may not: another process took its name, or the
    /// others declared it dead (its heartbeat stalled past the lease).
    pub async fn heartbeat(&self, me: &Node, incarnation: i64) -> DbResult<bool> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let n = tx
            .execute(
                "UPDATE nodes SET heartbeat_at = now(), clock_ms = $2 \
                 WHERE id = $1 AND incarnation = $3 AND state = 'live'",
                &[&me.id, &now_ms(), &incarnation],
            )
            .await?;
        if n == 1 {
            tx.execute(
                &format!(
                    "UPDATE exchanges SET lease_until = now() + {LEASE_SQL} WHERE lease_owner = $1 AND state = 'open'"
                ),
                &[&me.id],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(n == 1)
    }

    /// This node stops: it is no longer live.
    pub async fn leave(&self, me: &Node, incarnation: i64) -> DbResult<()> {
        let c = self.conn().await?;
        c.execute("UPDATE nodes SET state = 'stopped' WHERE id = $1 AND incarnation = $2", &[&me.id, &incarnation])
            .await?;
        Ok(())
    }

    /// The live nodes, by name.
    pub async fn nodes(&self, me: &Node) -> DbResult<Vec<NodeStatus>> {
        let c = self.conn().await?;
        let rows = c
            .query(
                &format!(
                    "SELECT id, host, pid, (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint, \
                     clock_ms - (extract(epoch FROM heartbeat_at) * 1000)::bigint FROM nodes n \
                     WHERE {} ORDER BY id",
                    live("n")
                ),
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let id: String = r.get(0);
                NodeStatus {
                    this: id == me.id,
                    id,
                    host: r.get(1),
                    pid: u32::try_from(r.get::<_, i64>(2)).unwrap_or(0),
                    heartbeat_ms_ago: u64::try_from(r.get::<_, i64>(3)).unwrap_or(0),
                    clock_skew_ms: r.get(4),
                }
            })
            .collect())
    }
}

/// Where the holder of a row of `table` (`sessions` by `id`, `locks` by
/// `resource`) runs, when it is another node than this connection's
/// (`kd.node`), and whether that node is live.
pub(crate) async fn holder_node(
    c: &impl deadpool_postgres::GenericClient,
    table: &'static str,
    key: &'static str,
    value: &str,
) -> DbResult<Option<(String, bool)>> {
    let sql = format!(
        "SELECT r.node_id, coalesce({}, false) \
         FROM {table} r LEFT JOIN nodes n ON n.id = r.node_id \
         WHERE r.{key} = $1 AND r.node_id IS DISTINCT FROM current_setting('kd.node', true) AND r.node_id IS NOT NULL",
        live("n")
    );
    let row = c.query_opt(&c.prepare_cached(&sql).await?, &[&value]).await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Keeps `me` live until the registry closes, a heartbeat every third of
/// the lease. A heartbeat refused says this node lost what it held
/// ([`Pg::lost`]): the daemon stops rather than act on it.
pub(crate) fn beat(pg: std::sync::Arc<Pg>, me: Node, incarnation: i64) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(me.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Said once per outage of the registry, not at every beat.
        let mut failing = false;
        loop {
            tick.tick().await;
            if pg.is_closed() {
                return;
            }
            let beat = pg.heartbeat(&me, incarnation).await;
            pg.heard(matches!(beat, Ok(true)));
            match beat {
                Ok(true) if failing => {
                    tracing::info!(node = me.id, "this node's heartbeat goes through again");
                    failing = false;
                }
                Ok(true) => {}
                Ok(false) => {
                    tracing::error!(
                        node = me.id,
                        "this node is no longer live in the registry (declared dead after its heartbeat stalled, or \
                         another kdd took its name): what it drove is another node's now"
                    );
                    pg.lost.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
                Err(e) if !failing => {
                    tracing::warn!(node = me.id, "cannot say this node is live: {e}; kdd keeps trying");
                    failing = true;
                }
                Err(_) => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, pid: u32) -> Node {
        Node { id: id.into(), host: "h1".into(), pid, socket: "/s".into(), lease: LEASE }
    }

    #[tokio::test]
    async fn a_live_name_is_one_processs_until_it_dies() {
        let Some((pg, _db)) = super::super::testing::fresh().await else { return };
        let a = node("a", 100);
        let first = pg.join(&a, &|_| true).await.unwrap();
        // Another live process of the same name is refused, naming the holder.
        let e = pg.join(&node("a", 200), &|_| true).await.unwrap_err().to_string();
        assert!(e.contains("node a is already live (host h1, pid 100"), "{e}");
        // A restart after a crash (the holder's pid is dead) takes it back.
        let again = pg.join(&node("a", 200), &|pid| pid != 100).await.unwrap();
        assert_eq!(again, first + 1, "a new incarnation");
        assert!(!pg.heartbeat(&a, first).await.unwrap(), "the old incarnation's heartbeat is refused");
        pg.join(&node("b", 300), &|_| true).await.unwrap();
        let live: Vec<String> = pg.nodes(&node("b", 300)).await.unwrap().into_iter().map(|n| n.id).collect();
        assert_eq!(live, ["a", "b"]);
        pg.leave(&node("b", 300), 1).await.unwrap();
        let live = pg.nodes(&a).await.unwrap();
        assert_eq!(live.len(), 1);
        assert!(live[0].this && live[0].pid == 200);
    }

    /// A thread of `pg` to hold sessions on.
    async fn a_thread(pg: &Pg) -> String {
        let t = crate::db::threads::NewThread { members: vec![], ..crate::db::threads::NewThread::in_workspace("/w") };
        pg.create_thread(t).await.unwrap().id
    }

    #[tokio::test]
    async fn a_session_or_lock_held_on_a_live_node_is_refused_elsewhere_naming_it_until_that_node_dies() {
        let Some((pg, db)) = super::super::testing::fresh().await else { return };
        pg.close().await;
        let hub = || std::sync::Arc::new(crate::hub::Hub::new());
        let a = Pg::open_as(db.url(), hub(), "a").await.unwrap();
        let b = Pg::open_as(db.url(), hub(), "b").await.unwrap();
        let (node_a, node_b) = (node("a", 100), node("b", 200));
        let inc_a = a.join(&node_a, &|_| true).await.unwrap();
        b.join(&node_b, &|_| true).await.unwrap();
        let thread = a_thread(&a).await;
        // A pid no process of this host has: seen from b's host, a's holder
        // would be a dead process; it is alive because node a is.
        let far = 999_999_999;
        let s = crate::db::sessions::NewSession {
            thread: thread.clone(),
            agent: "claude".into(),
            backend_session_id: None,
            holder: Some("claude".into()),
            pid: Some(far),
            metadata: serde_json::json!({}),
        };
        let held = a.start_session(s).await.unwrap();
        match b.resume_session(held.id.clone(), Some("claude".into()), Some(std::process::id())).await {
            Err(e @ DbError::SessionActive { .. }) => {
                assert!(e.to_string().ends_with("is held by claude on node a"), "{e}")
            }
            other => panic!("refused on b: {other:?}"),
        }
        let lock = a.acquire_lock("repo".into(), "claude".into(), 60_000, Some(far)).await.unwrap();
        assert!(matches!(lock, kd_proto::types::LockOutcome::Acquired { .. }), "{lock:?}");
        let denied = b.acquire_lock("repo".into(), "codex".into(), 60_000, None).await.unwrap();
        assert!(matches!(denied, kd_proto::types::LockOutcome::Denied { .. }), "{denied:?}");
        // Node a stops: what it held is free to b.
        a.leave(&node_a, inc_a).await.unwrap();
        let resumed = b.resume_session(held.id.clone(), Some("claude".into()), Some(std::process::id())).await;
        assert!(resumed.is_ok(), "{resumed:?}");
        let taken = b.acquire_lock("repo".into(), "codex".into(), 60_000, None).await.unwrap();
        assert!(matches!(taken, kd_proto::types::LockOutcome::Acquired { .. }), "{taken:?}");
        let c = b.conn().await.unwrap();
        let on: String = c.query_one("SELECT node_id FROM sessions WHERE id = $1", &[&held.id]).await.unwrap().get(0);
        assert_eq!(on, "b", "the session is held on b now");
        a.close().await;
        b.close().await;
    }
}
