//! The append lanes: `message.append` on PostgreSQL, batched.
//!
//! Appends to one thread are serial in the database (its row lock hands out
//! the dense seq), so one transaction per append makes a thread's
//! throughput one round trip chain per message. As SQLite's writer does,
//! a few lane tasks per node take what callers have queued and write it
//! together: per thread, one `UPDATE … last_seq = last_seq + k`, one insert
//! of its k messages and one of their events (`unnest` of arrays), the
//! threads of a batch pipelined on one connection and locked in id order,
//! one commit. A thread always goes to the same lane, so its appends keep
//! their order. Should anything in a batch fail (an archived or unknown
//! thread, a bad `reply_to`, a deadlock), the batch is rolled back whole
//! and each of its appends is written alone, as before: every caller gets
//! exactly the answer it would have had.

use std::collections::BTreeMap;
use std::sync::Arc;

use deadpool_postgres::{GenericClient, Pool};
use futures_util::future::try_join_all;
use kd_proto::types::{Message, MessageKind, Purpose, RouteType, ThreadEvent, ThreadStatus};
use tokio::sync::{mpsc, oneshot};

use super::{lifecycle, messages};
use crate::db::messages::NewMessage;
use crate::db::{DbError, DbResult, Outbox, json_list, now_ms};
use crate::hub::Hub;

/// Lanes per node: appends to that many threads go on at once.
const LANES: usize = 4;
/// Appends one batch takes at most.
const BATCH: usize = 256;
/// Appends a lane holds queued before callers wait to queue.
const QUEUE: usize = 4096;

type Reply = oneshot::Sender<DbResult<Message>>;

/// Appends written in a batch of more than one, since kdd started.
static BATCHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The lanes of one node.
pub(crate) struct Lanes {
    lanes: Vec<mpsc::Sender<(NewMessage, Reply)>>,
}

impl Lanes {
    /// Starts the lanes' tasks; they end when the pool closes and no
    /// append is queued.
    pub(crate) fn start(pool: Pool, hub: Arc<Hub>) -> Lanes {
        let lanes = (0..LANES)
            .map(|_| {
                let (tx, rx) = mpsc::channel(QUEUE);
                tokio::spawn(run(pool.clone(), hub.clone(), rx));
                tx
            })
            .collect();
        Lanes { lanes }
    }

    /// Appends `m` through its thread's lane.
    pub(crate) async fn append(&self, m: NewMessage) -> DbResult<Message> {
        let lane = &self.lanes[lane_of(&m.thread)];
        let (tx, rx) = oneshot::channel();
        lane.send((m, tx)).await.map_err(|_| DbError::Closed)?;
        rx.await.map_err(|_| DbError::Closed)?
    }
}

/// The lane of `thread`: the same for every append to it.
fn lane_of(thread: &str) -> usize {
    // FNV-1a: stable, and enough to spread thread ids.
    let h = thread.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (h % LANES as u64) as usize
}

async fn run(pool: Pool, hub: Arc<Hub>, mut rx: mpsc::Receiver<(NewMessage, Reply)>) {
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < BATCH {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        write(&pool, &hub, jobs).await;
    }
}

/// Writes a batch, together if it can, else each append alone.
async fn write(pool: &Pool, hub: &Hub, jobs: Vec<(NewMessage, Reply)>) {
    let mut c = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            let e = DbError::from(e);
            for (_, reply) in jobs {
                let _ = reply.send(Err(match &e {
                    DbError::Closed => DbError::Closed,
                    DbError::Unavailable(why) => DbError::Unavailable(why.clone()),
                    other => DbError::Internal(other.to_string()),
                }));
            }
            return;
        }
    };
    let (messages, replies): (Vec<NewMessage>, Vec<Reply>) = jobs.into_iter().unzip();
    let together = async {
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let written = batch(&tx, now_ms(), messages.clone(), &mut out).await?;
        tx.commit().await?;
        DbResult::Ok((written, out))
    }
    .await;
    match together {
        Ok((written, out)) => {
            if written.len() > 1 {
                BATCHED.fetch_add(written.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            for (thread, event) in out.events {
                hub.publish(&thread, event);
            }
            for (m, reply) in written.into_iter().zip(replies) {
                let _ = reply.send(Ok(m));
            }
        }
        Err(_) => {
            for (m, reply) in messages.into_iter().zip(replies) {
                let _ = reply.send(alone(&mut c, hub, m).await);
            }
        }
    }
}

/// One append in a transaction of its own: what the batch falls back to.
async fn alone(c: &mut deadpool_postgres::Object, hub: &Hub, m: NewMessage) -> DbResult<Message> {
    let tx = c.transaction().await?;
    let mut out = Outbox::default();
    let message = messages::append(&tx, now_ms(), m, &mut out).await?;
    tx.commit().await?;
    for (thread, event) in out.events {
        hub.publish(&thread, event);
    }
    Ok(message)
}

/// Writes `all` in the transaction `c`, the threads in id order; the
/// messages as written, in the order given. Any refusal fails it whole.
async fn batch(c: &impl GenericClient, now: i64, all: Vec<NewMessage>, out: &mut Outbox) -> DbResult<Vec<Message>> {
    let mut by_thread: BTreeMap<String, Vec<(usize, NewMessage)>> = BTreeMap::new();
    let n = all.len();
    for (i, m) in all.into_iter().enumerate() {
        by_thread.entry(m.thread.clone()).or_default().push((i, m));
    }
    let groups = try_join_all(by_thread.into_iter().map(|(thread, group)| one_thread(c, now, thread, group))).await?;
    let mut written: Vec<Option<Message>> = vec![None; n];
    for (group, events) in groups {
        for (i, m) in group {
            written[i] = Some(m);
        }
        for (thread, event) in events {
            out.publish(&thread, event);
        }
    }
    written.into_iter().map(|m| m.ok_or_else(|| DbError::Internal("an append of the batch was lost".into()))).collect()
}

/// The messages of one thread, given in order: their seqs taken at once,
/// then inserted with their events. The messages by their place in the
/// batch, and what to publish.
async fn one_thread(
    c: &impl GenericClient,
    now: i64,
    thread: String,
    group: Vec<(usize, NewMessage)>,
) -> DbResult<(Vec<(usize, Message)>, Vec<(String, ThreadEvent)>)> {
    let k = group.len() as i64;
    let all_runs = group.iter().all(|(_, m)| m.run.is_some());
    let st = c
        .prepare_cached(
            "UPDATE threads SET last_seq = last_seq + $2, last_activity_at = $3
             WHERE id = $1 AND (status <> 'archived' OR $4)
             RETURNING last_seq, status, title IS NULL",
        )
        .await?;
    let row = c
        .query_opt(&st, &[&thread, &k, &now, &all_runs])
        .await?
        .ok_or_else(|| DbError::Invalid(format!("thread {thread} takes no batch")))?;
    let last: i64 = row.try_get(0)?;
    let status: &str = row.try_get(1)?;
    let untitled: bool = row.try_get(2)?;
    let first = (last - k + 1) as u64;
    let mut out = Outbox::default();
    if status == "idle" {
        lifecycle::set_status(c, now, &thread, ThreadStatus::Active, "message", None, &mut out).await?;
    }
    if untitled
        && let Some(title) = group
            .iter()
            .find(|(_, m)| m.kind == MessageKind::King)
            .and_then(|(_, m)| kd_proto::title::title_from(&m.body))
    {
        let st = c.prepare_cached("UPDATE threads SET title = $2 WHERE id = $1").await?;
        c.execute(&st, &[&thread, &title]).await?;
    }
    let seqs: Vec<u64> = (0..group.len() as u64).map(|i| first + i).collect();
    for ((_, m), seq) in group.iter().zip(&seqs) {
        if let Some(r) = m.reply_to
            && (r == 0 || r >= *seq)
        {
            return Err(DbError::Invalid(format!("reply_to {r} is not an earlier message")));
        }
    }
    insert(c, now, &group, &seqs).await?;
    let mut written = Vec::with_capacity(group.len());
    for ((i, m), seq) in group.into_iter().zip(seqs) {
        let message = m.into_message(seq, now);
        out.publish(&message.thread, ThreadEvent::Message { message: Box::new(message.clone()) });
        written.push((i, message));
    }
    Ok((written, out.events))
}

/// Inserts a thread's messages as `seqs`, and their events, two statements
/// in all.
async fn insert(c: &impl GenericClient, now: i64, group: &[(usize, NewMessage)], seqs: &[u64]) -> DbResult<()> {
    let ms = || group.iter().map(|(_, m)| m);
    let thread: Vec<&str> = ms().map(|m| m.thread.as_str()).collect();
    let seq: Vec<i64> = seqs.iter().map(|s| *s as i64).collect();
    let sender: Vec<&str> = ms().map(|m| m.from.as_str()).collect();
    let to: Vec<String> = ms().map(|m| json_list(&m.to)).collect();
    let cc: Vec<String> = ms().map(|m| json_list(&m.cc)).collect();
    let reply_to: Vec<Option<i64>> = ms().map(|m| m.reply_to.map(|r| r as i64)).collect();
    let kind: Vec<&str> = ms().map(|m| m.kind.as_str()).collect();
    let body: Vec<&str> = ms().map(|m| m.body.as_str()).collect();
    let round: Vec<Option<i64>> = ms().map(|m| m.round.map(i64::from)).collect();
    let run: Vec<Option<String>> =
        ms().map(|m| m.run.as_ref().map(|r| serde_json::to_string(r).unwrap_or_default())).collect();
    let replaces: Vec<Option<i64>> = ms().map(|m| m.replaces.map(|r| r as i64)).collect();
    let refs: Vec<String> = ms().map(|m| json_list(&m.refs)).collect();
    let route: Vec<Option<&str>> = ms().map(|m| m.route.map(RouteType::as_str)).collect();
    let purpose: Vec<Option<&str>> = ms().map(|m| m.purpose.map(Purpose::as_str)).collect();
    let st = c
        .prepare_cached(
            "INSERT INTO messages
                 (thread_id, seq, sender, recipients, cc, reply_to, kind, body, round, created_at, run, replaces, refs,
                  route, purpose)
             SELECT t, s, f, r, cc, rt, k, b, rd, $15, ru, rp, rf, ro, p
             FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[],
                         $8::text[], $9::bigint[], $10::text[], $11::bigint[], $12::text[], $13::text[], $14::text[])
                  AS u(t, s, f, r, cc, rt, k, b, rd, ru, rp, rf, ro, p)",
        )
        .await?;
    c.execute(
        &st,
        &[
            &thread, &seq, &sender, &to, &cc, &reply_to, &kind, &body, &round, &run, &replaces, &refs, &route,
            &purpose, &now,
        ],
    )
    .await?;
    let events: Vec<_> = ms().zip(seqs).map(|(m, seq)| m.event(*seq)).collect();
    let ev_kind: Vec<&str> = events.iter().map(|e| e.kind).collect();
    let ev_thread: Vec<Option<&str>> = events.iter().map(|e| e.thread).collect();
    let ev_from: Vec<Option<&str>> = events.iter().map(|e| e.from).collect();
    let ev_to: Vec<String> = events.iter().map(|e| json_list(e.to)).collect();
    let ev_corr: Vec<Option<&str>> = events.iter().map(|e| e.correlation_id).collect();
    let ev_data: Vec<String> = events.iter().map(|e| e.data.to_string()).collect();
    let st = c
        .prepare_cached(
            "INSERT INTO conversation_events (at, kind, thread_id, sender, recipients, correlation_id, data)
             SELECT $1, k, t, f, r, c, d
             FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[]) AS u(k, t, f, r, c, d)",
        )
        .await?;
    c.execute(&st, &[&now, &ev_kind, &ev_thread, &ev_from, &ev_to, &ev_corr, &ev_data]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::db::events::EventFilter;
    use crate::db::messages::Page;
    use crate::db::pg::testing;
    use crate::db::threads::NewThread;

    fn king(thread: &str, body: String, reply_to: Option<u64>) -> NewMessage {
        NewMessage { reply_to, ..NewMessage::new(thread, "king", vec!["claude".into()], MessageKind::King, body) }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn appends_queued_together_are_written_together_and_a_refused_one_alone() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let pg = Arc::new(pg);
        let t = pg.create_thread(NewThread::in_workspace("/w")).await.unwrap().id;
        let before = BATCHED.load(Ordering::Relaxed);
        // 64 at once, two of them refused: one replies to a message to
        // come, one goes to no thread.
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let (pg, t) = (pg.clone(), t.clone());
                tokio::spawn(async move {
                    let m = match i {
                        20 => king(&t, "early".into(), Some(1_000)),
                        40 => king("t-none", "lost".into(), None),
                        _ => king(&t, format!("message {i}"), None),
                    };
                    pg.append_message(m).await
                })
            })
            .collect();
        let mut refused = Vec::new();
        for (i, task) in tasks.into_iter().enumerate() {
            if let Err(e) = task.await.unwrap() {
                refused.push((i, e.to_string()));
            }
        }
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(refused[0].1.starts_with("reply_to 1000 is not an earlier message of thread"), "{refused:?}");
        assert!(refused[1].1.contains("t-none"), "{refused:?}");
        let stored = pg.messages(t.clone(), Page::all_after(0)).await.unwrap();
        assert_eq!(stored.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=62).collect::<Vec<_>>(), "dense");
        let bodies: std::collections::BTreeSet<&str> = stored.iter().map(|m| m.body.as_str()).collect();
        assert_eq!(bodies.len(), 62, "each once");
        // Each message has its event, with its seq.
        let filter =
            EventFilter { thread: Some(t.clone()), kind: Some("message".into()), limit: 1000, ..Default::default() };
        let events = pg.events(filter).await.unwrap();
        let mut seqs: Vec<u64> = events.iter().filter_map(|e| e.data["seq"].as_u64()).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=62).collect::<Vec<_>>());
        // A batch written after the refusals, alone: all at once.
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let (pg, t) = (pg.clone(), t.clone());
                tokio::spawn(
                    async move { pg.append_message(king(&t, format!("then {i}"), Some(1))).await.unwrap().seq },
                )
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert!(BATCHED.load(Ordering::Relaxed) > before, "some appends were written together");
        assert_eq!(pg.thread(t).await.unwrap().last_seq, 94);
    }

    #[test]
    fn a_thread_always_takes_the_same_lane_and_threads_spread_over_them() {
        assert_eq!(lane_of("t-abc"), lane_of("t-abc"));
        let used: std::collections::BTreeSet<usize> = (0..64).map(|i| lane_of(&format!("t-{i}"))).collect();
        assert_eq!(used.len(), LANES);
    }
}
