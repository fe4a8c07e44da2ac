//! Which node drives which exchange on a shared registry, and what becomes
//! of a node that dies.
//!
//! A thread belongs to the node that made it (`threads.node_id`): its host
//! has the workspace. An exchange is driven by one node at a time, its
//! **lease**: `lease_owner` until `lease_until`, renewed by the owner's
//! heartbeat ([`super::nodes`]), `lease_epoch` counting its holders. How
//! Postgres-backed job queues (Oban, graphile-worker) lease jobs:
//!
//! - a question asked on another node is written with its exchange for the
//!   owner ([`ask_for`]) and wakes it (`NOTIFY kd_work`, delivered at
//!   commit); the owner takes it with [`claim`] — `FOR UPDATE SKIP LOCKED`,
//!   so of two takers one gets it — at once, or at its next poll;
//! - a node whose heartbeat is older than the lease is dead: one survivor
//!   ([`reap`], the node's row lock its mutex) records its runs
//!   interrupted, which puts their journal steps back to pending, and its
//!   pending approvals cancelled (nobody is left to ask them);
//! - its exchanges are then orphans ([`orphans`]): a node that has their
//!   workspace takes them over with [`claim`] and resumes them.

use deadpool_postgres::GenericClient;
use serde_json::Value;

use super::exchanges::{self, EXCHANGE, exchange};
use super::{LEASE, ME, Pg, live, messages, runs};
use kd_proto::types::{RunInfo, RunStatus};

use crate::db::compose::Asked;
use crate::db::events::NewEvent;
use crate::db::exchanges::{Exchange, ExchangeId, NewExchange};
use crate::db::messages::NewMessage;
use crate::db::runs::Cancel;
use crate::db::{DbResult, Outbox, now_ms};

/// The node that has thread `id`'s workspace when it is another than this
/// connection's, and whether it is live.
pub(crate) async fn thread_node(c: &impl GenericClient, id: &str) -> DbResult<Option<(String, bool)>> {
    let st = c
        .prepare_cached(&format!(
            "SELECT t.node_id, coalesce({}, false) \
             FROM threads t LEFT JOIN nodes n ON n.id = t.node_id \
             WHERE t.id = $1 AND t.node_id IS NOT NULL AND t.node_id <> {ME}",
            live("n")
        ))
        .await?;
    Ok(c.query_opt(&st, &[&id]).await?.map(|r| (r.get(0), r.get(1))))
}

/// Writes question `m` with its exchange `x`, for `node` to drive: the
/// node is woken at commit.
pub(crate) async fn ask_for(
    c: &impl GenericClient,
    now: i64,
    m: NewMessage,
    mut x: NewExchange,
    node: &str,
    out: &mut Outbox,
) -> DbResult<Asked> {
    let message = messages::append(c, now, m, out).await?;
    x.thread = message.thread.clone();
    x.seq = message.seq;
    let exchange = exchanges::begin_for(c, now, &x, Some(node)).await?;
    let steps = exchanges::steps(c, exchange.id).await?;
    Ok(Asked { thread: None, message, exchange, steps })
}

/// Records the runs of every node dead past the lease as interrupted, its
/// pending approvals cancelled (their threads told) and the node dead; the
/// nodes reaped, with how many runs each had in flight.
/// Nodes another survivor is reaping are skipped.
/// Only nodes whose lease is at most `steady_ms` are judged: this node's
/// heartbeats have gone through that long, so each of them had its whole
/// lease to beat since the registry last answered everyone.
pub(crate) async fn reap(
    c: &impl GenericClient,
    now: i64,
    steady_ms: i64,
    out: &mut Outbox,
) -> DbResult<Vec<(String, usize)>> {
    let st = c
        .prepare_cached(&format!(
            "SELECT id, (extract(epoch FROM now() - heartbeat_at) * 1000)::bigint FROM nodes n \
             WHERE state = 'live' AND NOT {} AND id <> {ME} AND n.lease_ms <= $1 ORDER BY id \
             FOR UPDATE SKIP LOCKED",
            live("n")
        ))
        .await?;
    let dead = c.query(&st, &[&steady_ms]).await?;
    let mut reaped = Vec::new();
    for row in dead {
        let (node, silent_ms): (String, i64) = (row.get(0), row.get(1));
        let why = format!("node {node} was lost while the run was in flight (no heartbeat for {} s)", silent_ms / 1000);
        let runs = runs::recover(c, now, Some(&node), &why, out).await?;
        // Its pending approvals' runs died with it: nobody is left to ask.
        let lost =
            format!("node {node} was lost while this approval was pending (no heartbeat for {} s)", silent_ms / 1000);
        let approvals = super::approvals::cancel_of_node(c, now, &node, &lost, out).await?.len();
        c.execute("UPDATE nodes SET state = 'dead', reaped_at = now() WHERE id = $1", &[&node]).await?;
        let data = serde_json::json!({"node": node, "runs": runs, "approvals": approvals, "silent_ms": silent_ms});
        let e = NewEvent {
            kind: "node.dead",
            thread: None,
            session: None,
            agent: None,
            from: None,
            to: &[],
            correlation_id: None,
            data,
        };
        super::events::record(c, now, &e).await?;
        reaped.push((node, runs));
    }
    Ok(reaped)
}

/// Whether the `nodes` row `n` still holds its exchanges, in SQL: it has
/// not stopped, and [`reap`] has not declared it dead (however late its
/// heartbeat).
const STILL_ITS: &str = "n.state = 'live'";

/// Open exchanges no node drives — their node stopped, or was declared
/// dead by [`reap`], their lease is over — with their thread's workspace:
/// a node that has it may take them over. A node whose heartbeat is late
/// but that nobody declared dead yet keeps them: after an outage of the
/// database every heartbeat and lease is late, and [`reap`] judges a node
/// only once the judge has been steadily live for that node's lease.
/// `kd work`'s are left to their node: the members' worktrees are on its
/// disk.
pub(crate) async fn orphans(c: &impl GenericClient) -> DbResult<Vec<(ExchangeId, String)>> {
    let st = c
        .prepare_cached(&format!(
            "SELECT x.id, t.workspace FROM exchanges x JOIN threads t ON t.id = x.thread_id \
             WHERE x.state = 'open' AND x.kind <> 'work' AND x.node_id <> {ME} \
             AND (x.lease_until IS NULL OR x.lease_until < now()) \
             AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = x.node_id AND {STILL_ITS}) \
             ORDER BY x.created_at, x.id LIMIT 100"
        ))
        .await?;
    Ok(c.query(&st, &[]).await?.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Leases to this node the exchanges routed to it and not taken yet, and
/// those of `adopt` still orphaned once their runs are recorded (no step
/// running): this node drives them from now on. Rows another node is
/// taking at the same moment are skipped, not waited for.
pub(crate) async fn claim(c: &impl GenericClient, now: i64, adopt: &[ExchangeId]) -> DbResult<Vec<Exchange>> {
    let returning: Vec<String> = EXCHANGE.split(", ").map(|col| format!("x.{col}")).collect();
    let st = c
        .prepare_cached(&format!(
            "WITH c AS (SELECT x.id FROM exchanges x WHERE x.state = 'open' AND ( \
                 (x.node_id = {ME} AND x.lease_owner IS NULL) \
              OR (x.id = ANY($1) AND x.node_id <> {ME} AND (x.lease_until IS NULL OR x.lease_until < now()) \
                  AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = x.node_id AND {STILL_ITS}) \
                  AND NOT EXISTS (SELECT 1 FROM exchange_steps s WHERE s.exchange_id = x.id \
                                  AND s.state = 'running'))) \
               ORDER BY x.created_at, x.id FOR UPDATE OF x SKIP LOCKED) \
             UPDATE exchanges x SET node_id = {ME}, lease_owner = {ME}, lease_until = now() + {LEASE}, \
                 lease_epoch = x.lease_epoch + 1, updated_at = $2 \
             FROM c WHERE x.id = c.id RETURNING {}",
            returning.join(", "),
        ))
        .await?;
    let mut taken: Vec<Exchange> =
        c.query(&st, &[&adopt, &now]).await?.iter().map(exchange).collect::<DbResult<_>>()?;
    taken.sort_by_key(|x| (x.created_at_ms, x.id));
    Ok(taken)
}

/// Writes the plan of an exchange routed here, once: false when it has
/// one already.
pub(crate) async fn plan(c: &impl GenericClient, now: i64, x: ExchangeId, plan: &Value) -> DbResult<bool> {
    let plan = plan.to_string();
    let st = c
        .prepare_cached(
            "UPDATE exchanges SET plan = $2, updated_at = $3 WHERE id = $1 AND state = 'open' \
             AND plan::jsonb ? 'routed'",
        )
        .await?;
    Ok(c.execute(&st, &[&x, &plan, &now]).await? == 1)
}

/// Asks `node` to stop its runs in flight on `c.thread` (those of
/// `c.member`, or run `c.run`), woken at commit; the runs it has, as the
/// registry knows them.
pub(crate) async fn cancel_on(c: &impl GenericClient, node: &str, cancel: &Cancel) -> DbResult<Vec<RunInfo>> {
    let st = c
        .prepare_cached(
            "SELECT id, member, backend, status, pid, started_at, reply_to, round, exchange, replaces, ordinal, \
             purpose FROM runs WHERE thread_id = $1 AND node_id = $2 AND status IN ('waiting', 'streaming') \
             AND ($3::text IS NULL OR member = $3) AND ($4::text IS NULL OR id = $4) ORDER BY started_at, ordinal",
        )
        .await?;
    let rows = c.query(&st, &[&cancel.thread, &node, &cancel.member, &cancel.run]).await?;
    let payload = serde_json::json!({"node": node, "cancel": cancel}).to_string();
    c.execute("SELECT pg_notify('kd_cancel', $1)", &[&payload]).await?;
    rows.iter()
        .map(|r| {
            let opt = |i: usize| r.try_get::<_, Option<i64>>(i).map(|v| v.map(|v| v as u64));
            Ok(RunInfo {
                id: r.try_get(0)?,
                thread: cancel.thread.clone(),
                member: r.try_get(1)?,
                backend: r.try_get(2)?,
                status: if r.try_get::<_, &str>(3)? == "streaming" { RunStatus::Streaming } else { RunStatus::Waiting },
                pid: opt(4)?.map(|p| p as u32),
                started_at_ms: r.try_get(5)?,
                chars: 0,
                reply_to: opt(6)?,
                round: opt(7)?.map(|v| v as u32),
                exchange: opt(8)?,
                replaces: opt(9)?,
                ordinal: opt(10)?.unwrap_or(0),
                purpose: r.try_get::<_, Option<&str>>(11)?.and_then(kd_proto::types::Purpose::parse),
                approval: None,
            })
        })
        .collect()
}

impl Pg {
    pub async fn cancel_on_node(&self, node: String, cancel: Cancel) -> DbResult<Vec<RunInfo>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let runs = cancel_on(&tx, &node, &cancel).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(runs)
    }

    /// The cancellations other nodes asked of this one, once: its cluster
    /// task takes them.
    pub fn cancels(&self) -> Option<tokio::sync::mpsc::Receiver<Cancel>> {
        self.cancels.1.lock().ok()?.take()
    }

    pub async fn thread_node(&self, id: String) -> DbResult<Option<(String, bool)>> {
        thread_node(&self.conn().await?, &id).await
    }

    pub async fn ask_node(&self, m: NewMessage, x: NewExchange, node: String) -> DbResult<Asked> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let asked = ask_for(&tx, now_ms(), m, x, &node, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(asked)
    }

    pub async fn reap_dead_nodes(&self) -> DbResult<Vec<(String, usize)>> {
        // A node is judged only once this one has been steadily live for
        // that node's lease: after an outage of the database everyone's
        // heartbeat is old, and each needs its own lease to beat again.
        let steady_ms = self.steady_ms();
        if steady_ms == 0 {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let reaped = reap(&tx, now_ms(), steady_ms, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(reaped)
    }

    pub async fn orphan_exchanges(&self) -> DbResult<Vec<(ExchangeId, String)>> {
        orphans(&self.conn().await?).await
    }

    pub async fn claim_exchanges(&self, adopt: Vec<ExchangeId>) -> DbResult<Vec<Exchange>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let taken = claim(&tx, now_ms(), &adopt).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(taken)
    }

    pub async fn plan_exchange(&self, x: ExchangeId, p: Value) -> DbResult<bool> {
        plan(&self.conn().await?, now_ms(), x, &p).await
    }

    /// Until work is routed to this node.
    pub async fn work_routed(&self) {
        self.work.notified().await
    }

    /// Whether the others declared this node dead.
    pub fn lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::db::Node;
    use crate::hub::Hub;

    fn node(id: &str, lease: Duration) -> Node {
        Node { id: id.into(), host: "h1".into(), pid: 100, socket: "/s".into(), lease }
    }

    #[tokio::test]
    async fn a_node_is_judged_by_its_own_lease_and_only_by_a_node_steadily_live_that_long() {
        let Some((pg, db)) = super::super::testing::fresh().await else { return };
        pg.close().await;
        let (a, b, d) =
            (node("a", Duration::from_secs(60)), node("b", Duration::from_secs(1)), node("d", Duration::from_secs(30)));
        let on_a = Pg::open_node(db.url(), Arc::new(Hub::new()), &a).await.unwrap();
        let on_b = Pg::open_node(db.url(), Arc::new(Hub::new()), &b).await.unwrap();
        let on_d = Pg::open_node(db.url(), Arc::new(Hub::new()), &d).await.unwrap();
        on_a.join(&a, &|_| true).await.unwrap();
        on_b.join(&b, &|_| true).await.unwrap();
        on_d.join(&d, &|_| true).await.unwrap();
        // b beat 5 s ago, d 40 s ago: each dead by its own lease (1 s, 30
        // s), though a's is a minute.
        let c = on_a.conn().await.unwrap();
        c.execute("UPDATE nodes SET heartbeat_at = now() - interval '5 seconds' WHERE id = 'b'", &[]).await.unwrap();
        c.execute("UPDATE nodes SET heartbeat_at = now() - interval '40 seconds' WHERE id = 'd'", &[]).await.unwrap();
        // a failed to beat (an outage of the database): it judges no one.
        on_a.heard(false);
        assert_eq!(on_a.reap_dead_nodes().await.unwrap(), vec![]);
        // Steady for 2 s: b has had its lease to beat again since, d not yet.
        let ago = |s: u64| Some(Instant::now().checked_sub(Duration::from_secs(s)).expect("uptime"));
        *on_a.steady_since.lock().unwrap() = ago(2);
        assert_eq!(on_a.reap_dead_nodes().await.unwrap(), vec![("b".to_string(), 0)]);
        *on_a.steady_since.lock().unwrap() = ago(31);
        assert_eq!(on_a.reap_dead_nodes().await.unwrap(), vec![("d".to_string(), 0)]);
        let state: String = c.query_one("SELECT state FROM nodes WHERE id = 'b'", &[]).await.unwrap().get(0);
        assert_eq!(state, "dead");
        // a, beating a minute-long lease, stays live to b however long ago
        // 10 s is.
        c.execute("UPDATE nodes SET heartbeat_at = now() - interval '10 seconds' WHERE id = 'a'", &[]).await.unwrap();
        let live: Vec<String> = on_b.nodes(&b).await.unwrap().into_iter().map(|n| n.id).collect();
        assert_eq!(live, ["a"]);
        on_d.close().await;
        on_a.close().await;
        on_b.close().await;
    }

    #[tokio::test]
    async fn a_late_node_keeps_its_exchanges_until_a_node_steadily_live_declares_it_dead() {
        let Some((pg, db)) = super::super::testing::fresh().await else { return };
        pg.close().await;
        let (a, b) = (node("a", Duration::from_secs(1)), node("b", Duration::from_secs(1)));
        let on_a = Pg::open_node(db.url(), Arc::new(Hub::new()), &a).await.unwrap();
        let on_b = Pg::open_node(db.url(), Arc::new(Hub::new()), &b).await.unwrap();
        on_a.join(&a, &|_| true).await.unwrap();
        on_b.join(&b, &|_| true).await.unwrap();
        // An exchange a drives, as an outage of the database leaves it: its
        // lease over, a's heartbeat late.
        let c = on_a.conn().await.unwrap();
        let ws = std::env::temp_dir().display().to_string();
        c.execute("INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t', $1, 1, 1)", &[&ws])
            .await
            .unwrap();
        let x: i64 = c
            .query_one(
                "INSERT INTO exchanges (thread_id, seq, kind, plan, created_at, updated_at, lease_owner, lease_until) \
                 VALUES ('t', 1, 'council', '{}', 1, 1, 'a', now() - interval '5 seconds') RETURNING id",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        c.execute("UPDATE nodes SET heartbeat_at = now() - interval '5 seconds' WHERE id = 'a'", &[]).await.unwrap();
        // b is back from the outage too, not yet steadily: a is not judged,
        // and what a drives is a's.
        on_b.heard(false);
        on_b.heard(true);
        assert_eq!(on_b.reap_dead_nodes().await.unwrap(), vec![]);
        assert_eq!(on_b.orphan_exchanges().await.unwrap(), vec![]);
        assert!(on_b.claim_exchanges(vec![x]).await.unwrap().is_empty());
        // a beats again: it still drives it.
        assert!(on_a.heartbeat(&a, 1).await.unwrap());
        // Then a stops beating; b, steadily live past a's lease, declares
        // it dead and may take its exchange.
        c.execute("UPDATE nodes SET heartbeat_at = now() - interval '5 seconds' WHERE id = 'a'", &[]).await.unwrap();
        c.execute("UPDATE exchanges SET lease_until = now() - interval '1 second'", &[]).await.unwrap();
        *on_b.steady_since.lock().unwrap() = Instant::now().checked_sub(Duration::from_secs(2));
        assert_eq!(on_b.reap_dead_nodes().await.unwrap(), vec![("a".to_string(), 0)]);
        assert_eq!(on_b.orphan_exchanges().await.unwrap(), vec![(x, ws)]);
        let taken = on_b.claim_exchanges(vec![x]).await.unwrap();
        assert_eq!(taken.iter().map(|x| x.id).collect::<Vec<_>>(), [x]);
        on_a.close().await;
        on_b.close().await;
    }
}
