//! Conversation locks on PostgreSQL: the operations of
//! [`crate::db::locks`], with the same rules ([`Held::is_free`]). What the
//! SQLite writer's serial execution gave for free is a lock here: every
//! acquirer and releaser of one resource first takes a transaction-scoped
//! advisory lock on it (two first acquirers serialise even when no row
//! exists yet), then the row's lock; the fencing token is drawn from the
//! `fencing_token` sequence only once those are held, so the tokens of one
//! resource grow in commit order.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Fence, Lock, LockOutcome, LockReleased};
use serde_json::json;
use tokio_postgres::Row;

use super::Pg;
use super::events;
use crate::db::events::NewEvent;
use crate::db::locks::{self, Acquire, Held, acquiring, stale};
use crate::db::{DbResult, now_ms};

const COLUMNS: &str = "resource, holder, pid, token, acquired_at, expires_at";

/// Serialises the writers of `resource` until the transaction ends (taken
/// again, it is already held).
async fn serialise(c: &impl GenericClient, resource: &str) -> DbResult<()> {
    c.execute(
        &c.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended('kd.lock:' || $1, 0))").await?,
        &[&resource],
    )
    .await?;
    Ok(())
}

pub(crate) async fn acquire(
    c: &impl GenericClient,
    now: i64,
    resource: &str,
    holder: &str,
    ttl_ms: u64,
    pid: Option<u32>,
    alive: &(dyn Fn(u32) -> bool + Sync),
) -> DbResult<LockOutcome> {
    let expires_at = now.saturating_add(ttl_ms as i64);
    serialise(c, resource).await?;
    let previous = held(c, resource, true).await?;
    // A holder on another node lives as long as its node does.
    let node_alive = super::nodes::holder_node(c, "locks", "resource", resource).await?.map(|(_, live)| live);
    let by_node = |_: u32| node_alive.unwrap_or(false);
    let alive: &(dyn Fn(u32) -> bool + Sync) = if node_alive.is_some() { &by_node } else { alive };
    let acquire = acquiring(previous.as_ref(), now, holder, pid, alive);
    let mut token: i64 = 0;
    match acquire {
        Acquire::Renew { .. } => {
            c.execute(
                &c.prepare_cached("UPDATE locks SET expires_at = $2 WHERE resource = $1").await?,
                &[&resource, &expires_at],
            )
            .await?;
        }
        Acquire::Deny { .. } => {}
        Acquire::Take { .. } => {
            // Drawn while the resource is held: a later acquirer of it, which
            // waits for this transaction, draws a larger one.
            token = c.query_one(&c.prepare_cached("SELECT nextval('fencing_token')").await?, &[]).await?.get(0);
            c.execute(
                &c.prepare_cached(
                    "INSERT INTO locks (resource, holder, pid, token, acquired_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (resource) DO UPDATE SET holder = excluded.holder, pid = excluded.pid, token = excluded.token,
                         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, node_id = excluded.node_id",
                )
                .await?,
                &[&resource, &holder, &pid.map(i64::from), &token, &now, &expires_at],
            )
            .await?;
        }
    }
    let (kind, data, outcome) = acquire.outcome(resource, token as u64, ttl_ms, pid, expires_at);
    record(c, now, kind, resource, holder, data).await?;
    Ok(outcome)
}

pub(crate) async fn release(c: &impl GenericClient, now: i64, resource: &str, token: u64) -> DbResult<LockReleased> {
    serialise(c, resource).await?;
    match held(c, resource, true).await? {
        Some(h) if h.token == token => {
            c.execute(&c.prepare_cached("DELETE FROM locks WHERE resource = $1").await?, &[&resource]).await?;
            record(c, now, "lock.release", resource, &h.holder, json!({"token": token})).await?;
            Ok(LockReleased { resource: resource.into(), token })
        }
        other => Err(stale(resource, token, other)),
    }
}

/// Refuses a fenced write unless `fence.token` is the lock's current,
/// unexpired token. The lock row is read `FOR SHARE`: a takeover of the
/// resource waits for the fenced write to commit, or the write sees it.
pub(crate) async fn check_fence(c: &impl GenericClient, now: i64, fence: &Fence) -> DbResult<()> {
    let row = c
        .query_opt(
            &c.prepare_cached(&format!("SELECT {COLUMNS} FROM locks WHERE resource = $1 FOR SHARE")).await?,
            &[&fence.resource],
        )
        .await?;
    locks::check_fence(row.as_ref().map(from_row).transpose()?, now, fence)
}

/// Locks that are held now: expired and dead-holder locks are left out.
pub(crate) async fn list(
    c: &impl GenericClient,
    now: i64,
    resource: Option<&str>,
    alive: &(dyn Fn(u32) -> bool + Sync),
) -> DbResult<Vec<Lock>> {
    let rows = c
        .query(
            &c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM locks WHERE ($1::text IS NULL OR resource = $1) ORDER BY resource"
            ))
            .await?,
            &[&resource],
        )
        .await?;
    let mut out = Vec::new();
    for row in &rows {
        out.extend(from_row(row)?.shown(row.try_get(0)?, now, alive));
    }
    Ok(out)
}

/// The lock on `resource`; `lock`: its row locked until the transaction
/// ends.
async fn held(c: &impl GenericClient, resource: &str, lock: bool) -> DbResult<Option<Held>> {
    let sql = format!("SELECT {COLUMNS} FROM locks WHERE resource = $1{}", if lock { " FOR UPDATE" } else { "" });
    let row = c.query_opt(&c.prepare_cached(&sql).await?, &[&resource]).await?;
    row.as_ref().map(from_row).transpose()
}

fn from_row(r: &Row) -> DbResult<Held> {
    crate::db::locks::read(r)
}

async fn record(
    c: &impl GenericClient,
    now: i64,
    kind: &str,
    resource: &str,
    holder: &str,
    mut data: serde_json::Value,
) -> DbResult<()> {
    data["resource"] = json!(resource);
    // A lock on a thread id is that thread's conversation lock.
    let thread: Option<String> = c
        .query_opt(&c.prepare_cached("SELECT id FROM threads WHERE id = $1").await?, &[&resource])
        .await?
        .map(|r| r.try_get(0))
        .transpose()?;
    events::record(
        c,
        now,
        &NewEvent { kind, thread: thread.as_deref(), from: Some(holder), data, ..Default::default() },
    )
    .await
}

impl Pg {
    pub async fn acquire_lock(
        &self,
        resource: String,
        holder: String,
        ttl_ms: u64,
        pid: Option<u32>,
    ) -> DbResult<LockOutcome> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        // The time is read once the resource is ours: an acquirer that
        // waited for another sees its lock with a clock as late as its own.
        serialise(&tx, &resource).await?;
        let got = acquire(&tx, now_ms(), &resource, &holder, ttl_ms, pid, &crate::proc::pid_alive).await?;
        self.commit(tx, Default::default()).await?;
        Ok(got)
    }

    pub async fn release_lock(&self, resource: String, token: u64) -> DbResult<LockReleased> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let released = release(&tx, now_ms(), &resource, token).await?;
        self.commit(tx, Default::default()).await?;
        Ok(released)
    }

    pub async fn locks(&self, resource: Option<String>) -> DbResult<Vec<Lock>> {
        let c = self.conn().await?;
        list(&c, now_ms(), resource.as_deref(), &crate::proc::pid_alive).await
    }
}

#[cfg(test)]
mod tests {
    use crate::db::DbError;
    use std::sync::Arc;

    use super::*;
    use crate::db::pg::test_rows::{dead_pid, events, thread};
    use crate::db::pg::testing;

    fn token(o: &LockOutcome) -> u64 {
        match o {
            LockOutcome::Acquired { token, .. } => *token,
            other => panic!("not acquired: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_second_acquirer_is_denied_with_the_holder_and_the_holder_renews_with_its_token() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let first = pg.acquire_lock("conv-1".into(), "alice".into(), 60_000, None).await.unwrap();
        assert!(token(&first) > 0);
        match pg.acquire_lock("conv-1".into(), "bob".into(), 60_000, Some(std::process::id())).await.unwrap() {
            LockOutcome::Denied { holder, pid, expires_in_ms, .. } => {
                assert_eq!((holder.as_str(), pid), ("alice", None));
                assert!(expires_in_ms > 50_000 && expires_in_ms <= 60_000, "{expires_in_ms}");
            }
            other => panic!("bob got {other:?}"),
        }
        // Other resources are independent, and their tokens larger.
        assert!(token(&pg.acquire_lock("conv-2".into(), "bob".into(), 60_000, None).await.unwrap()) > token(&first));
        match pg.acquire_lock("conv-1".into(), "alice".into(), 90_000, None).await.unwrap() {
            LockOutcome::Acquired { token: t, renewed, .. } => assert_eq!((t, renewed), (token(&first), true)),
            other => panic!("{other:?}"),
        }
        let listed = pg.locks(None).await.unwrap();
        assert_eq!(
            listed.iter().map(|l| (l.resource.as_str(), l.holder.as_str())).collect::<Vec<_>>(),
            [("conv-1", "alice"), ("conv-2", "bob")]
        );
        assert_eq!(pg.locks(Some("conv-2".into())).await.unwrap().len(), 1);
        assert_eq!(events(&pg, "lock.deny").await.len(), 1);
        assert_eq!(events(&pg, "lock.renew").await.len(), 1);
    }

    #[tokio::test]
    async fn after_the_ttl_the_next_acquirer_gets_a_larger_token_and_the_old_one_is_stale() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let old = token(&pg.acquire_lock("t".into(), "alice".into(), 60_000, None).await.unwrap());
        let fence = |token| Fence { resource: "t".into(), token };
        let c = pg.conn().await.unwrap();
        check_fence(&c, now_ms(), &fence(old)).await.unwrap();
        // Renewed for no time at all: expired at once.
        assert_eq!(token(&pg.acquire_lock("t".into(), "alice".into(), 0, None).await.unwrap()), old);
        assert!(pg.locks(None).await.unwrap().is_empty(), "an expired lock is not listed");
        assert!(matches!(check_fence(&c, now_ms(), &fence(old)).await, Err(DbError::StaleToken { current: None, .. })));
        let new = token(&pg.acquire_lock("t".into(), "bob".into(), 60_000, None).await.unwrap());
        assert!(new > old, "fencing token did not grow: {old} then {new}");
        match check_fence(&c, now_ms(), &fence(old)).await {
            Err(DbError::StaleToken { token, current, .. }) => assert_eq!((token, current), (old, Some(new))),
            other => panic!("a stale token passed: {other:?}"),
        }
        match pg.release_lock("t".into(), old).await {
            Err(DbError::StaleToken { current, .. }) => assert_eq!(current, Some(new)),
            other => panic!("released with a stale token: {other:?}"),
        }
        let acquired = events(&pg, "lock.acquire").await;
        assert_eq!(
            (&acquired[1]["freed"], &acquired[1]["previous_holder"], &acquired[1]["previous_token"]),
            (&json!("expired"), &json!("alice"), &json!(old))
        );
        // A lock on a thread id is recorded on that thread.
        let on_thread: i64 = c
            .query_one("SELECT count(*) FROM conversation_events WHERE thread_id = 't' AND kind LIKE 'lock.%'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(on_thread, 3);
        assert_eq!(pg.release_lock("t".into(), new).await.unwrap(), LockReleased { resource: "t".into(), token: new });
        assert!(pg.locks(None).await.unwrap().is_empty());
        assert!(matches!(pg.release_lock("t".into(), new).await, Err(DbError::StaleToken { current: None, .. })));
    }

    #[tokio::test]
    async fn a_lock_held_by_a_dead_process_is_free() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let first = token(&pg.acquire_lock("r".into(), "worker".into(), 3_600_000, Some(dead_pid())).await.unwrap());
        assert!(pg.locks(None).await.unwrap().is_empty(), "a dead holder's lock is not listed");
        let second = token(&pg.acquire_lock("r".into(), "other".into(), 1000, None).await.unwrap());
        assert!(second > first);
        assert_eq!(events(&pg, "lock.acquire").await[1]["freed"], "holder_dead");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn concurrent_acquirers_of_one_resource_get_one_holder_and_tokens_growing_in_commit_order() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let pg = Arc::new(pg);
        // Held for an hour: one of eight first acquirers gets it.
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let pg = pg.clone();
                tokio::spawn(async move { pg.acquire_lock("r".into(), format!("h{i}"), 3_600_000, None).await })
            })
            .collect();
        let mut acquired = 0;
        for t in tasks {
            match t.await.unwrap().unwrap() {
                LockOutcome::Acquired { renewed: false, .. } => acquired += 1,
                LockOutcome::Denied { .. } => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(acquired, 1);
        assert_eq!(pg.locks(None).await.unwrap().len(), 1);
        // Held for no time: every acquirer takes it over from the one that
        // committed before it, whose token must be smaller.
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let pg = pg.clone();
                tokio::spawn(async move { pg.acquire_lock("s".into(), format!("h{i}"), 0, None).await })
            })
            .collect();
        let mut tokens = Vec::new();
        for t in tasks {
            tokens.push(token(&t.await.unwrap().unwrap()));
        }
        let taken: Vec<_> =
            events(&pg, "lock.acquire").await.into_iter().filter(|d| d["resource"] == "s").collect::<Vec<_>>();
        assert_eq!(taken.len(), 32);
        let mut chain: Vec<(u64, u64)> = taken
            .iter()
            .filter(|d| d.get("previous_token").is_some())
            .map(|d| (d["previous_token"].as_u64().unwrap(), d["token"].as_u64().unwrap()))
            .collect();
        assert_eq!(chain.len(), 31, "every later acquirer took over from another");
        assert!(chain.iter().all(|(prev, token)| prev < token), "a takeover got a smaller token: {chain:?}");
        chain.sort_unstable();
        tokens.sort_unstable();
        assert_eq!(chain.iter().map(|c| c.0).collect::<Vec<_>>(), tokens[..31]);
        assert_eq!(chain.iter().map(|c| c.1).collect::<Vec<_>>(), tokens[1..]);
    }
}
