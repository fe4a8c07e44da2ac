//! Messages (PostgreSQL; mirrors `db/messages.rs`): a dense per-thread
//! `seq` taken by `UPDATE threads SET last_seq = last_seq + 1 … RETURNING
//! last_seq`. The update holds the thread row's lock until commit, so a
//! concurrent append (on any node) waits and then reads the committed
//! `last_seq`: no gap (a rolled-back append rolls back its increment), no
//! duplicate (`UNIQUE (thread_id, seq)` stays the backstop).

use deadpool_postgres::GenericClient;
use futures_util::TryStreamExt;
use kd_proto::types::{Message, Purpose, RouteType, ThreadEvent, ThreadStatus};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{Pg, events, lifecycle, locks, threads};
use crate::db::messages::{NewMessage, Page};
use crate::db::{DbError, DbResult, Outbox, json_list, now_ms};

/// Appends a message with the thread's next seq, records it in the event
/// log and queues it for the thread's subscribers. A message revives an
/// idle thread; an archived one refuses it (but for the end of a run that
/// was in flight). The King's first message names a thread that has no
/// title.
pub(crate) async fn append(c: &impl GenericClient, now: i64, m: NewMessage, out: &mut Outbox) -> DbResult<Message> {
    if let Some(fence) = &m.fence {
        locks::check_fence(c, now, fence).await?;
    }
    // The next seq, taken unless the thread is archived (the end of a run
    // already in flight is kept; nothing new is).
    let next = c
        .prepare_cached(
            "UPDATE threads SET last_seq = last_seq + 1, last_activity_at = $2
             WHERE id = $1 AND (status <> 'archived' OR $3)
             RETURNING last_seq, status, title IS NULL",
        )
        .await?;
    let Some(row) = c.query_opt(&next, &[&m.thread, &now, &m.run.is_some()]).await? else {
        return Err(match threads::exists(c, &m.thread).await? {
            true => DbError::Archived(m.thread.clone()),
            false => DbError::NotFound(format!("thread {}", m.thread)),
        });
    };
    let seq: i64 = row.try_get(0)?;
    let status: &str = row.try_get(1)?;
    let untitled: bool = row.try_get(2)?;
    if status == "idle" {
        lifecycle::set_status(c, now, &m.thread, ThreadStatus::Active, "message", None, out).await?;
    }
    if untitled && let Some(title) = m.title() {
        let stmt = c.prepare_cached("UPDATE threads SET title = $2 WHERE id = $1").await?;
        c.execute(&stmt, &[&m.thread, &title]).await?;
    }
    append_as(c, now, seq as u64, m, out).await
}

/// Inserts `m` with a seq already taken from the thread.
async fn append_as(c: &impl GenericClient, now: i64, seq: u64, m: NewMessage, out: &mut Outbox) -> DbResult<Message> {
    m.check_reply(seq)?;
    let run = m.run.as_ref().map(|r| serde_json::to_string(r).unwrap_or_default());
    let stmt = c
        .prepare_cached(
            "INSERT INTO messages
                 (thread_id, seq, sender, recipients, cc, reply_to, kind, body, round, created_at, run, replaces, refs, route, purpose)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .await?;
    c.execute(
        &stmt,
        &[
            &m.thread,
            &(seq as i64),
            &m.from,
            &json_list(&m.to),
            &json_list(&m.cc),
            &m.reply_to.map(|r| r as i64),
            &m.kind.as_str(),
            &m.body,
            &m.round.map(i64::from),
            &now,
            &run,
            &m.replaces.map(|r| r as i64),
            &json_list(&m.refs),
            &m.route.map(RouteType::as_str),
            &m.purpose.map(Purpose::as_str),
        ],
    )
    .await?;
    events::record(c, now, &m.event(seq)).await?;
    let message = m.into_message(seq, now);
    out.publish(&message.thread, ThreadEvent::Message { message: Box::new(message.clone()) });
    Ok(message)
}

/// Appends messages with their own times (an import); returns how many.
/// Their seqs are taken in one update.
pub(crate) async fn import(
    c: &impl GenericClient,
    thread: &str,
    messages: Vec<(i64, NewMessage)>,
    out: &mut Outbox,
) -> DbResult<usize> {
    let n = messages.len();
    if n == 0 {
        return Ok(0);
    }
    let last_at = messages.iter().map(|(at, _)| *at).max().unwrap_or(0).max(0);
    let stmt = c
        .prepare_cached(
            "UPDATE threads SET last_seq = last_seq + $2, last_activity_at = greatest(last_activity_at, $3)
             WHERE id = $1 RETURNING last_seq",
        )
        .await?;
    let Some(row) = c.query_opt(&stmt, &[&thread, &(n as i64), &last_at]).await? else {
        return Err(DbError::NotFound(format!("thread {thread}")));
    };
    let last: i64 = row.try_get(0)?;
    let first = (last - n as i64 + 1) as u64;
    for (i, (at, m)) in messages.into_iter().enumerate() {
        append_as(c, at, first + i as u64, m, out).await?;
    }
    Ok(n)
}

/// The columns [`from_row`] reads; `$5` says whether bodies are read.
const SELECT: &str =
    "SELECT thread_id, seq, sender, recipients, cc, reply_to, kind, CASE WHEN $5 THEN body ELSE '' END,
        round, created_at, run, replaces, refs, route, purpose
 FROM messages WHERE thread_id = $1 AND seq > $2 AND seq < $3";

/// Message `seq` of `thread`, if there is one.
pub(crate) async fn one(c: &impl GenericClient, thread: &str, seq: u64) -> DbResult<Option<Message>> {
    Ok(list(c, thread, Page::one(seq)).await?.pop())
}

/// A page of a thread's messages, in seq order.
pub(crate) async fn list(c: &impl GenericClient, thread: &str, page: Page) -> DbResult<Vec<Message>> {
    threads::get(c, thread).await?;
    let stmt = match page.from_end {
        true => c.prepare_cached(&format!("{SELECT} ORDER BY seq DESC LIMIT $4")).await?,
        false => c.prepare_cached(&format!("{SELECT} ORDER BY seq LIMIT $4")).await?,
    };
    let limit = page.limit.map(i64::from);
    let after = page.after.min(i64::MAX as u64) as i64;
    let before = page.before.map(|b| b.min(i64::MAX as u64) as i64).unwrap_or(i64::MAX);
    let params: [&(dyn ToSql + Sync); 5] = [&thread, &after, &before, &limit, &page.bodies];
    // Rows are read as they arrive and the read stops at the byte budget.
    let mut rows = std::pin::pin!(c.query_raw(&stmt, params).await?);
    let mut out = page.filling();
    while let Some(row) = rows.try_next().await? {
        if !out.keep(from_row(&row)?) {
            break;
        }
    }
    Ok(out.done())
}

pub(crate) fn from_row(r: &Row) -> DbResult<Message> {
    crate::db::messages::read(r)
}

impl Pg {
    pub async fn append_message(&self, m: NewMessage) -> DbResult<Message> {
        // Through the lanes, batched with other appends; a fenced write
        // alone (its lock is read in its transaction).
        if m.fence.is_none() {
            return self.lanes.append(m).await;
        }
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let msg = append(&tx, now_ms(), m, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(msg)
    }

    pub async fn messages(&self, thread: String, page: Page) -> DbResult<Vec<Message>> {
        list(&self.conn().await?, &thread, page).await
    }

    /// One message of a thread.
    pub async fn message(&self, thread: String, seq: u64) -> DbResult<Message> {
        one(&self.conn().await?, &thread, seq)
            .await?
            .ok_or_else(|| DbError::NotFound(format!("message {seq} of thread {thread}")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kd_proto::types::{Fence, MessageKind, ThreadStatus};

    use super::*;
    use crate::db::events::EventFilter;
    use crate::db::messages::ROW_BYTES;
    use crate::db::pg::testing;
    use crate::db::threads::NewThread;

    fn thread(workspace: &str) -> NewThread {
        NewThread::in_workspace(workspace)
    }

    fn king(thread: &str, body: &str) -> NewMessage {
        NewMessage::new(thread, "king", vec!["claude".into()], MessageKind::King, body.into())
    }

    #[tokio::test]
    async fn appends_from_32_tasks_to_one_thread_leave_seq_dense() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let pg = Arc::new(pg);
        let t = pg.create_thread(thread("/w")).await.unwrap();
        const TASKS: usize = 32;
        const EACH: usize = 8;
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let (pg, id) = (pg.clone(), t.id.clone());
                tokio::spawn(async move {
                    let mut seqs = Vec::new();
                    for j in 0..EACH {
                        seqs.push(pg.append_message(king(&id, &format!("{i}.{j}"))).await.unwrap().seq);
                    }
                    seqs
                })
            })
            .collect();
        let mut seqs = Vec::new();
        for task in tasks {
            seqs.extend(task.await.unwrap());
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=(TASKS * EACH) as u64).collect::<Vec<_>>());
        let stored = pg.messages(t.id.clone(), Page::all_after(0)).await.unwrap();
        assert_eq!(stored.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=(TASKS * EACH) as u64).collect::<Vec<_>>());
        assert_eq!(pg.thread(t.id).await.unwrap().last_seq, (TASKS * EACH) as u64);
    }

    #[tokio::test]
    async fn an_append_names_the_thread_publishes_after_commit_and_reads_back_the_same() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = pg.create_thread(thread("/w")).await.unwrap();
        let mut rx = pg.hub.subscribe(&t.id);
        let mut m = king(&t.id, "How should we name things?\n\nmore");
        m.cc = vec!["codex".into()];
        m.refs = vec!["src/a.rs".into()];
        m.round = Some(2);
        m.route = Some(RouteType::Multicast);
        m.correlation_id = Some("corr".into());
        let first = pg.append_message(m).await.unwrap();
        assert_eq!(first.seq, 1);
        assert!(rx.try_recv().is_ok(), "published after the commit");
        let stored = pg.thread(t.id.clone()).await.unwrap();
        assert_eq!(stored.title.as_deref(), Some("How should we name things?"));
        assert!(stored.last_activity_at_ms >= first.created_at_ms);
        assert_eq!(pg.message(t.id.clone(), 1).await.unwrap(), first);
        // A second King message does not rename it.
        pg.append_message(king(&t.id, "Another title?")).await.unwrap();
        assert_eq!(pg.thread(t.id.clone()).await.unwrap().title, stored.title);
        // The event log has the message, its body read from the message.
        let events =
            pg.events(EventFilter { kind: Some("message".into()), limit: 10, ..Default::default() }).await.unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data["body"], "How should we name things?\n\nmore");
        assert_eq!(events[0].data["seq"], 1);
        assert_eq!(events[0].correlation_id.as_deref(), Some("corr"));
        assert!(matches!(pg.message(t.id.clone(), 3).await, Err(DbError::NotFound(_))));
    }

    #[tokio::test]
    async fn refusals_unknown_thread_archived_thread_bad_reply_to_and_stale_fence() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let e = pg.append_message(king("nope", "hi")).await.unwrap_err();
        assert!(matches!(e, DbError::NotFound(ref w) if w == "thread nope"), "{e}");
        let t = pg.create_thread(thread("/w")).await.unwrap();
        let mut m = king(&t.id, "hi");
        m.reply_to = Some(1);
        let e = pg.append_message(m).await.unwrap_err();
        assert!(matches!(e, DbError::Invalid(_)), "{e}");
        // The refused append took no seq.
        assert_eq!(pg.append_message(king(&t.id, "hi")).await.unwrap().seq, 1);
        let mut m = king(&t.id, "fenced");
        m.fence = Some(Fence { resource: "r".into(), token: 7 });
        let e = pg.append_message(m).await.unwrap_err();
        assert!(matches!(e, DbError::StaleToken { token: 7, current: None, .. }), "{e}");

        let c = pg.conn().await.unwrap();
        c.execute("UPDATE threads SET status = 'archived' WHERE id = $1", &[&t.id]).await.unwrap();
        let e = pg.append_message(king(&t.id, "late")).await.unwrap_err();
        assert!(matches!(e, DbError::Archived(ref id) if *id == t.id), "{e}");
        // The end of a run in flight is still kept.
        let mut answer = NewMessage::new(&t.id, "claude", vec!["king".into()], MessageKind::Agent, "done".into());
        answer.run = Some(serde_json::from_value(serde_json::json!({"run_id": "r1", "backend": "claude"})).unwrap());
        assert_eq!(pg.append_message(answer).await.unwrap().seq, 2);
    }

    #[tokio::test]
    async fn a_message_revives_an_idle_thread() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = pg.create_thread(thread("/w")).await.unwrap();
        let c = pg.conn().await.unwrap();
        c.execute("UPDATE threads SET status = 'idle' WHERE id = $1", &[&t.id]).await.unwrap();
        let mut rx = pg.hub.subscribe(&t.id);
        pg.append_message(king(&t.id, "wake up")).await.unwrap();
        assert_eq!(pg.thread(t.id.clone()).await.unwrap().status, ThreadStatus::Active);
        let first = rx.try_recv().unwrap();
        assert!(first.seq.is_none() && first.json.get().contains("\"active\""), "{}", first.json.get());
        assert_eq!(rx.try_recv().unwrap().seq, Some(1));
        let revive = pg.events(EventFilter { kind: Some("thread.revive".into()), limit: 5, ..Default::default() });
        assert_eq!(revive.await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn pages_read_ranges_from_either_end_within_a_byte_budget() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = pg.create_thread(thread("/w")).await.unwrap();
        for i in 1..=10 {
            pg.append_message(king(&t.id, &"x".repeat(i * 10))).await.unwrap();
        }
        let seqs = |ms: Vec<Message>| ms.iter().map(|m| m.seq).collect::<Vec<_>>();
        let page = Page { after: 2, before: Some(8), limit: Some(3), ..Page::all_after(0) };
        assert_eq!(seqs(pg.messages(t.id.clone(), page).await.unwrap()), [3, 4, 5]);
        let page = Page { from_end: true, ..page };
        assert_eq!(seqs(pg.messages(t.id.clone(), page).await.unwrap()), [5, 6, 7]);
        let outline = pg.messages(t.id.clone(), Page { bodies: false, ..Page::all_after(0) }).await.unwrap();
        assert!(outline.iter().all(|m| m.body.is_empty()) && outline.len() == 10);
        // Budget: the first message always, then while the bytes fit.
        let budget = Page { budget: 10 + 20 + 2 * ROW_BYTES, ..Page::all_after(0) };
        assert_eq!(seqs(pg.messages(t.id.clone(), budget).await.unwrap()), [1, 2]);
        let tiny = Page { budget: 1, ..Page::all_after(0) };
        assert_eq!(seqs(pg.messages(t.id.clone(), tiny).await.unwrap()), [1]);
        assert!(matches!(pg.messages("nope".into(), Page::all_after(0)).await, Err(DbError::NotFound(_))));
    }

    #[tokio::test]
    async fn an_import_takes_consecutive_seqs_with_the_messages_own_times() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = pg.create_thread(thread("/w")).await.unwrap();
        pg.append_message(king(&t.id, "first")).await.unwrap();
        let mut c = pg.conn().await.unwrap();
        let tx = c.transaction().await.unwrap();
        let mut out = Outbox::default();
        let n = import(&tx, &t.id, vec![(5, king(&t.id, "a")), (9, king(&t.id, "b"))], &mut out).await.unwrap();
        pg.commit(tx, out).await.unwrap();
        assert_eq!(n, 2);
        let ms = pg.messages(t.id.clone(), Page::all_after(1)).await.unwrap();
        assert_eq!(ms.iter().map(|m| (m.seq, m.created_at_ms)).collect::<Vec<_>>(), [(2, 5), (3, 9)]);
        assert_eq!(pg.thread(t.id).await.unwrap().last_seq, 3);
    }
}
