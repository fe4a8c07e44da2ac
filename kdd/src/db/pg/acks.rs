//! Acknowledgements owed for emergency broadcasts on PostgreSQL: the
//! operations of [`crate::db::acks`].

use deadpool_postgres::GenericClient;
use kd_proto::types::{Ack, ThreadEvent};
use tokio_postgres::Row;

use super::Pg;
use super::events;
use crate::db::acks::{broadcasts, settled};
use crate::db::{DbResult, Outbox, now_ms};

/// Records that every one of `members` owes an acknowledgement of
/// `broadcast` (message `seq` of `thread`).
pub(crate) async fn owe(
    c: &impl GenericClient,
    broadcast: &str,
    thread: &str,
    seq: u64,
    members: &[String],
) -> DbResult<()> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO acks (broadcast, thread_id, seq, member) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .await?;
    for m in members {
        c.execute(&stmt, &[&broadcast, &thread, &(seq as i64), m]).await?;
    }
    Ok(())
}

/// Settles what `member` owes on `thread` for broadcasts up to message
/// `upto` (of `broadcast` only, when given); returns the settled acks.
pub(crate) async fn settle(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    member: &str,
    upto: u64,
    broadcast: Option<&str>,
    how: &str,
) -> DbResult<Vec<Ack>> {
    let rows = c
        .query(
            &c.prepare_cached(
                "WITH settled AS (
                     UPDATE acks SET acked_at = $5, how = $6
                     WHERE thread_id = $1 AND member = $2 AND acked_at IS NULL AND seq <= $3
                       AND ($4::text IS NULL OR broadcast = $4)
                     RETURNING broadcast, thread_id, seq, member, acked_at, how)
                 SELECT * FROM settled ORDER BY seq, broadcast",
            )
            .await?,
            &[&thread, &member, &(upto.min(i64::MAX as u64) as i64), &broadcast, &now, &how],
        )
        .await?;
    let acks: Vec<Ack> = rows.iter().map(ack).collect::<DbResult<_>>()?;
    for a in &acks {
        events::record(c, now, &settled(thread, member, a, how)).await?;
    }
    Ok(acks)
}

/// Acknowledgements of `thread` (all threads when None), oldest broadcast
/// first; only the pending ones unless `all`.
pub(crate) async fn list(c: &impl GenericClient, thread: Option<&str>, all: bool) -> DbResult<Vec<Ack>> {
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT broadcast, thread_id, seq, member, acked_at, how FROM acks
                 WHERE ($1::text IS NULL OR thread_id = $1) AND ($2 OR acked_at IS NULL)
                 ORDER BY thread_id, seq, member",
            )
            .await?,
            &[&thread, &all],
        )
        .await?;
    rows.iter().map(ack).collect()
}

/// Members still owing an acknowledgement of `broadcast`.
pub(crate) async fn pending_members(c: &impl GenericClient, broadcast: &str) -> DbResult<Vec<String>> {
    let rows = c
        .query(
            &c.prepare_cached("SELECT member FROM acks WHERE broadcast = $1 AND acked_at IS NULL ORDER BY member")
                .await?,
            &[&broadcast],
        )
        .await?;
    Ok(rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?)
}

fn ack(r: &Row) -> DbResult<Ack> {
    crate::db::acks::read(r)
}

/// Tells subscribers who still owes an acknowledgement of each broadcast
/// that `acked` settled.
pub(crate) async fn progress(c: &impl GenericClient, thread: &str, acked: &[Ack], out: &mut Outbox) -> DbResult<()> {
    for a in broadcasts(acked) {
        let from: String = c
            .query_one(
                &c.prepare_cached("SELECT sender FROM messages WHERE thread_id = $1 AND seq = $2").await?,
                &[&thread, &(a.seq as i64)],
            )
            .await?
            .try_get(0)?;
        let pending = pending_members(c, &a.broadcast).await?;
        out.publish(thread, ThreadEvent::Emergency { broadcast: a.broadcast.clone(), seq: a.seq, from, pending });
    }
    Ok(())
}

impl Pg {
    /// `kd ack`: settles what `member` owes on `thread` (for `broadcast`
    /// only, when given) and tells subscribers who still owes.
    pub async fn acknowledge(&self, thread: String, member: String, broadcast: Option<String>) -> DbResult<Vec<Ack>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let acked = settle(&tx, now_ms(), &thread, &member, u64::MAX, broadcast.as_deref(), "kd ack").await?;
        progress(&tx, &thread, &acked, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(acked)
    }

    pub async fn acks(&self, thread: Option<String>, all: bool) -> DbResult<Vec<Ack>> {
        list(&self.conn().await?, thread.as_deref(), all).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::db::pg::test_rows::{events, message, thread};
    use crate::db::pg::testing;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn acknowledgements_owed_are_settled_by_an_answer_or_kd_ack_and_subscribers_told_who_still_owes() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        thread(&pg, "u").await;
        message(&pg, "t", 1, "king", "king", "stop everything").await;
        message(&pg, "t", 2, "claude", "agent", "me too").await;
        message(&pg, "u", 1, "king", "king", "elsewhere").await;
        let c = pg.conn().await.unwrap();
        owe(&c, "e-1", "t", 1, &names(&["codex", "claude", "gemini"])).await.unwrap();
        owe(&c, "e-1", "t", 1, &names(&["codex"])).await.unwrap();
        owe(&c, "e-2", "t", 2, &names(&["codex"])).await.unwrap();
        owe(&c, "e-3", "u", 1, &names(&["codex"])).await.unwrap();
        assert_eq!(pending_members(&c, "e-1").await.unwrap(), ["claude", "codex", "gemini"]);
        let all = pg.acks(None, false).await.unwrap();
        assert_eq!(
            all.iter().map(|a| (a.thread.as_str(), a.seq, a.member.as_str())).collect::<Vec<_>>(),
            [("t", 1, "claude"), ("t", 1, "codex"), ("t", 1, "gemini"), ("t", 2, "codex"), ("u", 1, "codex")]
        );
        // An answer to message 1 settles what was owed up to it.
        let settled = settle(&c, 10, "t", "codex", 1, None, "answer").await.unwrap();
        assert_eq!(settled.iter().map(|a| a.broadcast.as_str()).collect::<Vec<_>>(), ["e-1"]);
        assert!(settled[0].acknowledged && settled[0].acked_at_ms == Some(10));
        // kd ack settles everything else owed on the thread, and says who still owes.
        let mut rx = pg.hub.subscribe("t");
        let acked = pg.acknowledge("t".into(), "codex".into(), None).await.unwrap();
        assert_eq!(
            acked.iter().map(|a| (a.broadcast.as_str(), a.how.as_deref())).collect::<Vec<_>>(),
            [("e-2", Some("kd ack"))]
        );
        let told: serde_json::Value = serde_json::from_str(rx.try_recv().unwrap().json.get()).unwrap();
        assert_eq!(told["broadcast"], "e-2");
        assert_eq!(told["from"], "claude");
        assert_eq!(told["pending"], json!([]));
        let only = pg.acknowledge("t".into(), "claude".into(), Some("e-9".into())).await.unwrap();
        assert!(only.is_empty());
        pg.acknowledge("t".into(), "claude".into(), Some("e-1".into())).await.unwrap();
        let told: serde_json::Value = serde_json::from_str(rx.try_recv().unwrap().json.get()).unwrap();
        assert_eq!((&told["from"], &told["pending"]), (&json!("king"), &json!(["gemini"])));
        assert_eq!(pg.acks(Some("t".into()), false).await.unwrap().len(), 1);
        assert_eq!(pg.acks(Some("t".into()), true).await.unwrap().len(), 4);
        assert_eq!(pg.acks(Some("u".into()), false).await.unwrap().len(), 1);
        let recorded = events(&pg, "system.emergency_acknowledge").await;
        assert_eq!(
            recorded.iter().map(|d| d["how"].as_str().unwrap()).collect::<Vec<_>>(),
            ["answer", "kd ack", "kd ack"]
        );
    }
}
