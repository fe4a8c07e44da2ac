//! Members' inboxes, participants and delivery modes on PostgreSQL: the
//! operations of [`crate::db::inbox`]. The inboxes of a thread are counted
//! and trimmed by one writer at a time: [`keep`] takes a
//! transaction-scoped advisory lock on the thread first, as the SQLite
//! writer's serial execution did.

use deadpool_postgres::GenericClient;
use kd_proto::types::{DeliveryMode, InboxItem, InboxStatus, Overflow, RouteType};

use tokio_postgres::Row;

use super::Pg;
use super::events;
use crate::db::inbox::{Entry, Kept, Query, mode_of, processed, prompted, role_str, subscribed, was_read};
use crate::db::{DbResult, now_ms};

/// Pending entries of a member on a thread.
async fn pending(c: &impl GenericClient, thread: &str, member: &str) -> DbResult<u32> {
    let n: i64 = c
        .query_one(
            &c.prepare_cached("SELECT count(*) FROM inbox WHERE thread_id = $1 AND member = $2 AND status = 'pending'")
                .await?,
            &[&thread, &member],
        )
        .await?
        .try_get(0)?;
    Ok(n as u32)
}

/// Keeps `e` in its member's inbox, making room or refusing by the
/// member's overflow rule when it is full.
pub(crate) async fn keep(c: &impl GenericClient, now: i64, e: &Entry) -> DbResult<Kept> {
    // Two routings on one thread count its inboxes one after the other (a
    // lock per thread, not per member: a routing keeps entries for several
    // members, in any order, and takes one lock).
    c.execute(
        &c.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended('kd.inbox:' || $1, 0))").await?,
        &[&e.thread],
    )
    .await?;
    let mut size = pending(c, &e.thread, &e.member).await?;
    let mut dropped = None;
    if size >= e.limit {
        if e.overflow == Overflow::RejectNew {
            events::record(c, now, &e.rejected(size)).await?;
            return Ok(Kept::Rejected { size });
        }
        let oldest: i64 = c
            .query_one(
                &c.prepare_cached(
                    "SELECT id FROM inbox WHERE thread_id = $1 AND member = $2 AND status = 'pending' ORDER BY id LIMIT 1",
                )
                .await?,
                &[&e.thread, &e.member],
            )
            .await?
            .try_get(0)?;
        c.execute(
            &c.prepare_cached("UPDATE inbox SET status = 'dropped', done_at = $2 WHERE id = $1").await?,
            &[&oldest, &now],
        )
        .await?;
        events::record(c, now, &e.dropped_for(oldest)).await?;
        dropped = Some(oldest as u64);
        size -= 1;
    }
    let id: i64 = c
        .query_one(
            &c.prepare_cached(
                "INSERT INTO inbox (thread_id, member, seq, sender, type, role, status, queued_at)
                 VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7) RETURNING id",
            )
            .await?,
            &[&e.thread, &e.member, &(e.seq as i64), &e.from, &e.route.as_str(), &role_str(e.role), &now],
        )
        .await?
        .try_get(0)?;
    Ok(Kept::Queued { id: id as u64, size: size + 1, dropped })
}

/// Marks what a member's prompt gave it (every entry of the thread up to
/// `upto`) processed; returns their message seqs.
pub(crate) async fn given(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    member: &str,
    upto: u64,
    run: &str,
) -> DbResult<Vec<u64>> {
    let rows = c
        .query(
            &c.prepare_cached(
                "WITH given AS (
                     UPDATE inbox SET status = 'processed', done_at = $4
                     WHERE thread_id = $1 AND member = $2 AND seq <= $3 AND (status = 'pending' OR status = 'read')
                     RETURNING id, seq)
                 SELECT seq FROM given ORDER BY id",
            )
            .await?,
            &[&thread, &member, &(upto as i64), &now],
        )
        .await?;
    let seqs: Vec<u64> = rows.iter().map(|r| r.try_get::<_, i64>(0).map(|s| s as u64)).collect::<Result<_, _>>()?;
    if !seqs.is_empty() {
        events::write(c, now, &prompted(thread, member, run, &seqs)).await?;
    }
    Ok(seqs)
}

/// A member's inbox entries, oldest first, with their messages' bodies.
pub(crate) async fn read(c: &impl GenericClient, now: i64, q: &Query) -> DbResult<Vec<InboxItem>> {
    let types: Vec<&str> = q.types.iter().map(|t| t.as_str()).collect();
    let status = q.status.unwrap_or(InboxStatus::Pending);
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT i.id, i.member, i.thread_id, i.seq, i.sender, i.type, i.role, i.status, i.queued_at, i.read_at,
                        coalesce(m.body, '')
                 FROM inbox i LEFT JOIN messages m ON m.thread_id = i.thread_id AND m.seq = i.seq
                 WHERE i.member = $1 AND ($2::text IS NULL OR i.thread_id = $2)
                   AND (i.status = $3 OR ($6 AND i.status = 'read'))
                   AND (cardinality($4::text[]) = 0 OR i.type = ANY($4))
                 ORDER BY i.id LIMIT $5",
            )
            .await?,
            &[&q.member, &q.thread, &status.as_str(), &types, &i64::from(q.limit), &q.also_read],
        )
        .await?;
    let mut items: Vec<InboxItem> = rows.iter().map(item).collect::<DbResult<_>>()?;
    if q.mark_read && !items.is_empty() {
        let mark = c.prepare_cached("UPDATE inbox SET status = 'read', read_at = $2 WHERE id = $1").await?;
        for i in &mut items {
            c.execute(&mark, &[&(i.id as i64), &now]).await?;
            i.status = InboxStatus::Read;
            i.read_at_ms = Some(now);
        }
    }
    let ids: Vec<u64> = items.iter().map(|i| i.id).collect();
    events::record(c, now, &was_read(q, status, &ids)).await?;
    Ok(items)
}

fn item(r: &Row) -> DbResult<InboxItem> {
    crate::db::inbox::read(r)
}

/// Sets the status of a member's entries `ids`; returns how many changed.
pub(crate) async fn process(
    c: &impl GenericClient,
    now: i64,
    member: &str,
    ids: &[u64],
    status: InboxStatus,
) -> DbResult<u32> {
    let stmt = c.prepare_cached("UPDATE inbox SET status = $3, done_at = $4 WHERE id = $1 AND member = $2").await?;
    let mut n = 0;
    for id in ids {
        n += c.execute(&stmt, &[&(*id as i64), &member, &status.as_str(), &now]).await? as u32;
    }
    events::record(c, now, &processed(member, ids, status, n)).await?;
    Ok(n)
}

/// Records that `names` took part in a routed message of `thread`; returns
/// the thread's participants, first seen first.
pub(crate) async fn participate(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    names: &[String],
) -> DbResult<Vec<String>> {
    let upsert = c
        .prepare_cached(
            "INSERT INTO participants (thread_id, name, first_at, last_at) VALUES ($1, $2, $3, $3)
             ON CONFLICT (thread_id, name) DO UPDATE SET last_at = excluded.last_at",
        )
        .await?;
    for n in names {
        c.execute(&upsert, &[&thread, n, &now]).await?;
    }
    let rows = c
        .query(
            &c.prepare_cached("SELECT name FROM participants WHERE thread_id = $1 ORDER BY first_at, rowid").await?,
            &[&thread],
        )
        .await?;
    Ok(rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?)
}

/// `queue.subscribe`: `member` takes `types` in `mode` in `workspace`.
pub(crate) async fn subscribe(
    c: &impl GenericClient,
    now: i64,
    workspace: &str,
    member: &str,
    types: &[RouteType],
    mode: DeliveryMode,
) -> DbResult<()> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO delivery_overrides (workspace, member, type, mode) VALUES ($1, $2, $3, $4)
             ON CONFLICT (workspace, member, type) DO UPDATE SET mode = excluded.mode",
        )
        .await?;
    for t in types {
        c.execute(&stmt, &[&workspace, &member, &t.as_str(), &mode.as_str()]).await?;
    }
    events::record(c, now, &subscribed(workspace, member, types, mode)).await
}

/// The modes a member chose per type in `workspace`.
pub(crate) async fn overrides(
    c: &impl GenericClient,
    workspace: &str,
    member: &str,
) -> DbResult<Vec<(RouteType, DeliveryMode)>> {
    let rows = c
        .query(
            &c.prepare_cached("SELECT type, mode FROM delivery_overrides WHERE workspace = $1 AND member = $2").await?,
            &[&workspace, &member],
        )
        .await?;
    let mut out = Vec::new();
    for row in &rows {
        let (t, m): (&str, &str) = (row.try_get(0)?, row.try_get(1)?);
        if let Some(t) = RouteType::parse(t) {
            out.push((t, mode_of(m)));
        }
    }
    Ok(out)
}

impl Pg {
    pub async fn inbox(&self, q: Query) -> DbResult<Vec<InboxItem>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let items = read(&tx, now_ms(), &q).await?;
        self.commit(tx, Default::default()).await?;
        Ok(items)
    }

    pub async fn inbox_process(&self, member: String, ids: Vec<u64>, status: InboxStatus) -> DbResult<u32> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let n = process(&tx, now_ms(), &member, &ids, status).await?;
        self.commit(tx, Default::default()).await?;
        Ok(n)
    }

    pub async fn delivery_subscribe(
        &self,
        workspace: String,
        member: String,
        types: Vec<RouteType>,
        mode: DeliveryMode,
    ) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        subscribe(&tx, now_ms(), &workspace, &member, &types, mode).await?;
        self.commit(tx, Default::default()).await
    }

    pub async fn delivery_overrides(
        &self,
        workspace: String,
        member: String,
    ) -> DbResult<Vec<(RouteType, DeliveryMode)>> {
        overrides(&self.conn().await?, &workspace, &member).await
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::Role;
    use serde_json::json;
    use std::sync::Arc;

    use super::*;
    use crate::db::pg::test_rows::{events, message, thread};
    use crate::db::pg::testing;

    fn entry(member: &str, seq: u64, route: RouteType, limit: u32, overflow: Overflow) -> Entry {
        Entry {
            thread: "t".into(),
            member: member.into(),
            seq,
            from: "king".into(),
            route,
            role: Role::To,
            limit,
            overflow,
            correlation_id: format!("c-{seq}"),
        }
    }

    async fn kept(pg: &Pg, e: Entry) -> Kept {
        let mut c = pg.conn().await.unwrap();
        let tx = c.transaction().await.unwrap();
        let k = keep(&tx, now_ms(), &e).await.unwrap();
        pg.commit(tx, Outbox::default()).await.unwrap();
        k
    }

    fn query(member: &str) -> Query {
        Query {
            member: member.into(),
            thread: None,
            types: vec![],
            status: None,
            also_read: false,
            limit: 100,
            mark_read: false,
        }
    }

    use crate::db::Outbox;

    #[tokio::test]
    async fn a_full_inbox_drops_its_oldest_or_refuses_by_the_members_rule() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let p2p = RouteType::PointToPoint;
        let Kept::Queued { id: first, size: 1, dropped: None } =
            kept(&pg, entry("a", 1, p2p, 2, Overflow::DropOldest)).await
        else {
            panic!("not queued")
        };
        assert!(matches!(kept(&pg, entry("a", 2, p2p, 2, Overflow::DropOldest)).await, Kept::Queued { size: 2, .. }));
        match kept(&pg, entry("a", 3, p2p, 2, Overflow::DropOldest)).await {
            Kept::Queued { size, dropped, .. } => assert_eq!((size, dropped), (2, Some(first))),
            other => panic!("{other:?}"),
        }
        assert_eq!(kept(&pg, entry("a", 4, p2p, 2, Overflow::RejectNew)).await, Kept::Rejected { size: 2 });
        let pending = pg.inbox(query("a")).await.unwrap();
        assert_eq!(pending.iter().map(|i| i.seq).collect::<Vec<_>>(), [2, 3]);
        let dropped = events(&pg, "queue.dropped").await;
        assert_eq!(dropped, [json!({"inbox": first, "for_seq": 3, "limit": 2})]);
        assert_eq!(events(&pg, "queue.rejected").await, [json!({"seq": 4, "queue_size": 2, "limit": 2})]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn concurrent_routings_to_one_member_never_overfill_its_inbox() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let pg = Arc::new(pg);
        for (member, overflow) in [("a", Overflow::RejectNew), ("b", Overflow::DropOldest)] {
            let tasks: Vec<_> = (1..=8)
                .map(|seq| {
                    let pg = pg.clone();
                    tokio::spawn(async move { kept(&pg, entry(member, seq, RouteType::Broadcast, 3, overflow)).await })
                })
                .collect();
            let mut outcomes = Vec::new();
            for t in tasks {
                outcomes.push(t.await.unwrap());
            }
            let pending = pg.inbox(query(member)).await.unwrap();
            assert_eq!(pending.len(), 3, "{member}: {outcomes:?}");
            let queued = outcomes.iter().filter(|k| matches!(k, Kept::Queued { .. })).count();
            let dropped = outcomes.iter().filter(|k| matches!(k, Kept::Queued { dropped: Some(_), .. })).count();
            match overflow {
                Overflow::RejectNew => assert_eq!((queued, dropped), (3, 0)),
                Overflow::DropOldest => assert_eq!((queued, dropped), (8, 5)),
            }
        }
    }

    #[tokio::test]
    async fn a_member_reads_its_inbox_is_given_it_in_a_prompt_and_processes_it() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        for seq in 1..=4 {
            message(&pg, "t", seq, "king", "king", &format!("body {seq}")).await;
        }
        for (seq, route) in [(1, RouteType::PointToPoint), (2, RouteType::Broadcast), (3, RouteType::Broadcast)] {
            kept(&pg, entry("a", seq, route, 10, Overflow::DropOldest)).await;
        }
        kept(&pg, entry("b", 4, RouteType::Broadcast, 10, Overflow::DropOldest)).await;
        let broadcasts = Query { types: vec![RouteType::Broadcast], mark_read: true, ..query("a") };
        let read = pg.inbox(broadcasts.clone()).await.unwrap();
        assert_eq!(read.iter().map(|i| (i.seq, i.body.as_str())).collect::<Vec<_>>(), [(2, "body 2"), (3, "body 3")]);
        assert!(read.iter().all(|i| i.status == InboxStatus::Read && i.read_at_ms.is_some()));
        assert!(pg.inbox(broadcasts.clone()).await.unwrap().is_empty(), "read entries are no longer pending");
        assert_eq!(pg.inbox(Query { also_read: true, ..broadcasts }).await.unwrap().len(), 2);
        let one = Query { limit: 1, thread: Some("t".into()), ..query("a") };
        assert_eq!(pg.inbox(one).await.unwrap()[0].seq, 1);
        assert_eq!(events(&pg, "queue.read").await.len(), 4);
        // A prompt that gave the member up to seq 2: pending and read alike.
        let c = pg.conn().await.unwrap();
        assert_eq!(given(&c, now_ms(), "t", "a", 2, "r1").await.unwrap(), [1, 2]);
        assert!(given(&c, now_ms(), "t", "a", 2, "r2").await.unwrap().is_empty());
        assert_eq!(events(&pg, "delivery.prompt").await, [json!({"seqs": [1, 2], "run": "r1"})]);
        let rest = pg.inbox(Query { also_read: true, ..query("a") }).await.unwrap();
        assert_eq!(rest.iter().map(|i| i.seq).collect::<Vec<_>>(), [3]);
        // Processing counts only the member's own entries.
        let b = pg.inbox(query("b")).await.unwrap()[0].id;
        let n = pg.inbox_process("a".into(), vec![rest[0].id, b], InboxStatus::Dismissed).await.unwrap();
        assert_eq!(n, 1);
        let dismissed = Query { status: Some(InboxStatus::Dismissed), ..query("a") };
        assert_eq!(pg.inbox(dismissed).await.unwrap()[0].seq, 3);
        assert_eq!(events(&pg, "queue.process").await[0]["updated"], 1);
    }

    #[tokio::test]
    async fn participants_are_listed_first_seen_first_and_delivery_modes_kept_per_type() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let c = pg.conn().await.unwrap();
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(participate(&c, 5, "t", &names(&["king", "zed", "amy"])).await.unwrap(), ["king", "zed", "amy"]);
        assert_eq!(participate(&c, 6, "t", &names(&["bob", "zed"])).await.unwrap(), ["king", "zed", "amy", "bob"]);
        pg.delivery_subscribe(
            "/w".into(),
            "a".into(),
            vec![RouteType::Broadcast, RouteType::Multicast],
            DeliveryMode::Queued,
        )
        .await
        .unwrap();
        pg.delivery_subscribe("/w".into(), "a".into(), vec![RouteType::Multicast], DeliveryMode::Immediate)
            .await
            .unwrap();
        let mut modes = pg.delivery_overrides("/w".into(), "a".into()).await.unwrap();
        modes.sort_by_key(|(t, _)| t.as_str());
        assert_eq!(
            modes,
            [(RouteType::Broadcast, DeliveryMode::Queued), (RouteType::Multicast, DeliveryMode::Immediate)]
        );
        assert!(pg.delivery_overrides("/v".into(), "a".into()).await.unwrap().is_empty());
        assert_eq!(events(&pg, "queue.subscribe").await.len(), 2);
    }
}
