//! Thread lifecycle writes on PostgreSQL: the operations of
//! [`crate::db::lifecycle`]. A transition locks the thread's row first,
//! so the check "nothing changed since the reaper looked"
//! and the move are one step against appends, which lock the same row.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Thread, ThreadEvent, ThreadStatus};

use super::Pg;
use super::{events, threads};
use crate::db::events::NewEvent;
use crate::db::lifecycle::{Material, Summary, deleted, moved, refuse_delete, stale_age, summarised, titled};
use crate::db::threads::status_str;
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Locks thread `id`'s row until the transaction ends (`lock`: `FOR NO KEY
/// UPDATE`, the lock an append takes; `FOR UPDATE` for a delete, which
/// also waits for rows being added under the thread); NotFound when there
/// is none.
async fn lock_thread(c: &impl GenericClient, id: &str, lock: &str) -> DbResult<()> {
    let row = c
        .query_opt(&c.prepare_cached(&format!("SELECT 1 FROM threads WHERE id = $1 FOR {lock}")).await?, &[&id])
        .await?;
    match row {
        Some(_) => Ok(()),
        None => Err(DbError::NotFound(format!("thread {id}"))),
    }
}

/// Moves thread `id` to `to` for `reason` (`age`, `message`, `archive`,
/// `unarchive`), with `summary` when archiving. Nothing happens when it is
/// there already.
pub(crate) async fn set_status(
    c: &impl GenericClient,
    now: i64,
    id: &str,
    to: ThreadStatus,
    reason: &str,
    summary: Option<&Summary>,
    out: &mut Outbox,
) -> DbResult<Thread> {
    lock_thread(c, id, "NO KEY UPDATE").await?;
    let thread = threads::get(c, id).await?;
    if thread.status == to {
        return Ok(thread);
    }
    let sessions = match to {
        ThreadStatus::Idle => {
            c.execute(
                &c.prepare_cached(
                    "UPDATE sessions SET status = 'idle', holder = NULL, pid = NULL, last_active_at = $2
                         WHERE thread_id = $1 AND status = 'active'",
                )
                .await?,
                &[&id, &now],
            )
            .await?
        }
        ThreadStatus::Archived => {
            let archived = c
                .execute(
                    &c.prepare_cached(
                        "UPDATE sessions SET status = 'archived', holder = NULL, pid = NULL, last_active_at = $2
                         WHERE thread_id = $1 AND status != 'archived'",
                    )
                    .await?,
                    &[&id, &now],
                )
                .await?;
            if let Some(s) = summary {
                c.execute(
                    &c.prepare_cached("UPDATE threads SET summary = $2, summary_by = $3 WHERE id = $1").await?,
                    &[&id, &s.text, &s.by],
                )
                .await?;
            }
            archived
        }
        ThreadStatus::Active => 0,
    };
    let (kind, data) = moved(&thread, to, reason, now, sessions as u64, summary);
    if to == ThreadStatus::Active {
        // Opening a thread again is activity: it starts its idle time anew.
        c.execute(
            &c.prepare_cached("UPDATE threads SET last_activity_at = greatest(last_activity_at, $2) WHERE id = $1")
                .await?,
            &[&id, &now],
        )
        .await?;
    }
    c.execute(&c.prepare_cached("UPDATE threads SET status = $2 WHERE id = $1").await?, &[&id, &status_str(to)])
        .await?;
    events::record(c, now, &NewEvent { kind, thread: Some(id), data, ..Default::default() }).await?;
    out.publish(id, ThreadEvent::Status { status: to, reason: reason.to_string() });
    threads::get(c, id).await
}

/// Ages thread `id` to `to` only if it is as the reaper saw it: no activity
/// since `seen_activity`, no run in flight. Returns whether it moved.
pub(crate) async fn age(
    c: &impl GenericClient,
    now: i64,
    id: &str,
    seen_activity: i64,
    to: ThreadStatus,
    summary: Option<&Summary>,
    out: &mut Outbox,
) -> DbResult<bool> {
    lock_thread(c, id, "NO KEY UPDATE").await?;
    let thread = threads::get(c, id).await?;
    if stale_age(&thread, seen_activity, to, in_flight(c, id).await?) {
        return Ok(false);
    }
    set_status(c, now, id, to, "age", summary, out).await?;
    Ok(true)
}

/// Runs of the thread still waiting or streaming.
pub(crate) async fn in_flight(c: &impl GenericClient, id: &str) -> DbResult<u32> {
    let n: i64 = c
        .query_one(
            &c.prepare_cached(
                "SELECT count(*) FROM runs WHERE thread_id = $1 AND (status = 'waiting' OR status = 'streaming')",
            )
            .await?,
            &[&id],
        )
        .await?
        .try_get(0)?;
    Ok(n as u32)
}

/// At most `questions` King messages and the last answer of each member.
pub(crate) async fn material(c: &impl GenericClient, id: &str, questions: u32) -> DbResult<Material> {
    let rows = c
        .query(
            &c.prepare_cached("SELECT body FROM messages WHERE thread_id = $1 AND kind = 'king' ORDER BY seq LIMIT $2")
                .await?,
            &[&id, &i64::from(questions)],
        )
        .await?;
    let questions = rows.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
    let rows = c
        .query(
            &c.prepare_cached(
                "SELECT m.sender, m.body FROM messages m
                 JOIN (SELECT sender, max(seq) AS seq FROM messages WHERE thread_id = $1 AND kind = 'agent' AND purpose IS NULL
                       GROUP BY sender) last ON last.sender = m.sender AND last.seq = m.seq
                 WHERE m.thread_id = $1 ORDER BY m.seq",
            )
            .await?,
            &[&id],
        )
        .await?;
    let last_answers = rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<DbResult<_>>()?;
    Ok(Material { questions, last_answers })
}

/// Keeps `summary` as the thread's summary (its status is unchanged).
pub(crate) async fn set_summary(c: &impl GenericClient, now: i64, id: &str, summary: &Summary) -> DbResult<Thread> {
    threads::get(c, id).await?;
    c.execute(
        &c.prepare_cached("UPDATE threads SET summary = $2, summary_by = $3 WHERE id = $1").await?,
        &[&id, &summary.text, &summary.by],
    )
    .await?;
    events::record(c, now, &summarised(id, &summary.by)).await?;
    threads::get(c, id).await
}

/// Names the thread.
pub(crate) async fn set_title(c: &impl GenericClient, now: i64, id: &str, title: &str) -> DbResult<Thread> {
    threads::get(c, id).await?;
    c.execute(&c.prepare_cached("UPDATE threads SET title = $2 WHERE id = $1").await?, &[&id, &title]).await?;
    events::record(c, now, &titled(id, title)).await?;
    threads::get(c, id).await
}

/// Deletes the thread with everything it holds; its branches lose their
/// parent. Refused while runs are in flight. Returns how many messages went.
pub(crate) async fn delete(c: &impl GenericClient, now: i64, id: &str, out: &mut Outbox) -> DbResult<u64> {
    lock_thread(c, id, "UPDATE").await?;
    let running = in_flight(c, id).await?;
    refuse_delete(id, running)?;
    let messages: i64 = c
        .query_one(&c.prepare_cached("SELECT count(*) FROM messages WHERE thread_id = $1").await?, &[&id])
        .await?
        .try_get(0)?;
    c.execute(&c.prepare_cached("DELETE FROM conversation_events WHERE thread_id = $1").await?, &[&id]).await?;
    // Messages, runs (and their partial text), sessions, inbox, participants,
    // acknowledgements and the current-thread entry go by cascade.
    c.execute(&c.prepare_cached("DELETE FROM threads WHERE id = $1").await?, &[&id]).await?;
    events::record(c, now, &deleted(id, messages)).await?;
    out.threads_added -= 1;
    Ok(messages as u64)
}

impl Pg {
    pub async fn set_thread_status(
        &self,
        id: String,
        to: ThreadStatus,
        reason: &'static str,
        summary: Option<Summary>,
    ) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let thread = set_status(&tx, now_ms(), &id, to, reason, summary.as_ref(), &mut out).await?;
        self.commit(tx, out).await?;
        Ok(thread)
    }

    pub async fn age_thread(
        &self,
        id: String,
        seen_activity: i64,
        to: ThreadStatus,
        summary: Option<Summary>,
    ) -> DbResult<bool> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let moved = age(&tx, now_ms(), &id, seen_activity, to, summary.as_ref(), &mut out).await?;
        self.commit(tx, out).await?;
        Ok(moved)
    }

    pub async fn summary_material(&self, id: String, questions: u32) -> DbResult<Material> {
        material(&self.conn().await?, &id, questions).await
    }

    pub async fn set_thread_summary(&self, id: String, summary: Summary) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let thread = set_summary(&tx, now_ms(), &id, &summary).await?;
        self.commit(tx, Default::default()).await?;
        Ok(thread)
    }

    pub async fn set_thread_title(&self, id: String, title: String) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let thread = set_title(&tx, now_ms(), &id, &title).await?;
        self.commit(tx, Default::default()).await?;
        Ok(thread)
    }

    pub async fn delete_thread(&self, id: String) -> DbResult<u64> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let messages = delete(&tx, now_ms(), &id, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(messages)
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::SessionStatus;
    use serde_json::json;

    use super::*;
    use crate::db::pg::test_rows::{events, message, run, thread};
    use crate::db::pg::testing;
    use crate::db::sessions::NewSession;

    async fn session(pg: &Pg, thread: &str, agent: &str) -> String {
        let s = NewSession {
            thread: thread.into(),
            agent: agent.into(),
            backend_session_id: None,
            holder: Some("h".into()),
            pid: None,
            metadata: json!({}),
        };
        pg.start_session(s).await.unwrap().id
    }

    #[tokio::test]
    async fn idle_suspends_sessions_archive_archives_them_with_a_summary_and_unarchive_opens_the_thread_again() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let s = session(&pg, "t", "claude").await;
        let mut rx = pg.hub.subscribe("t");
        let idle = pg.set_thread_status("t".into(), ThreadStatus::Idle, "age", None).await.unwrap();
        assert_eq!(idle.status, ThreadStatus::Idle);
        assert_eq!(pg.session(s.clone()).await.unwrap().status, SessionStatus::Idle);
        assert_eq!(events(&pg, "thread.idle").await[0]["sessions_suspended"], 1);
        let told: serde_json::Value = serde_json::from_str(rx.try_recv().unwrap().json.get()).unwrap();
        assert_eq!(told["reason"], "age");
        // There already: nothing happens, nothing is told.
        pg.set_thread_status("t".into(), ThreadStatus::Idle, "age", None).await.unwrap();
        assert!(rx.try_recv().is_err());
        assert_eq!(events(&pg, "thread.idle").await.len(), 1);
        let summary = Summary { text: "what came of it".into(), by: "kd".into() };
        let archived =
            pg.set_thread_status("t".into(), ThreadStatus::Archived, "archive", Some(summary)).await.unwrap();
        assert_eq!((archived.status, archived.summary.as_deref()), (ThreadStatus::Archived, Some("what came of it")));
        assert_eq!(pg.session(s).await.unwrap().status, SessionStatus::Archived);
        assert_eq!(events(&pg, "thread.archive").await[0]["summary_by"], "kd");
        let open = pg.set_thread_status("t".into(), ThreadStatus::Active, "unarchive", None).await.unwrap();
        assert_eq!(open.status, ThreadStatus::Active);
        assert!(open.last_activity_at_ms > 1, "opening a thread again is activity");
        assert_eq!(events(&pg, "thread.unarchive").await[0]["from"], "archived");
        assert!(matches!(
            pg.set_thread_status("nope".into(), ThreadStatus::Idle, "age", None).await,
            Err(DbError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_thread_ages_only_as_the_reaper_saw_it() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        assert!(!pg.age_thread("t".into(), 2, ThreadStatus::Idle, None).await.unwrap(), "activity since");
        run(&pg, "r1", "t", "claude", "streaming").await;
        assert!(!pg.age_thread("t".into(), 1, ThreadStatus::Idle, None).await.unwrap(), "a run in flight");
        pg.conn().await.unwrap().execute("UPDATE runs SET status = 'done'", &[]).await.unwrap();
        assert!(pg.age_thread("t".into(), 1, ThreadStatus::Idle, None).await.unwrap());
        assert!(!pg.age_thread("t".into(), 1, ThreadStatus::Idle, None).await.unwrap(), "there already");
        assert_eq!(pg.thread_status("t").await, ThreadStatus::Idle);
        assert_eq!(events(&pg, "thread.idle").await[0]["reason"], "age");
    }

    #[tokio::test]
    async fn summary_material_is_the_first_questions_and_each_members_last_answer() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        for (seq, from, kind, body) in [
            (1, "king", "king", "q1"),
            (2, "claude", "agent", "c1"),
            (3, "codex", "agent", "x1"),
            (4, "king", "king", "q2"),
            (5, "claude", "agent", "c2"),
            (6, "king", "king", "q3"),
        ] {
            message(&pg, "t", seq, from, kind, body).await;
        }
        let m = pg.summary_material("t".into(), 2).await.unwrap();
        assert_eq!(m.questions, ["q1", "q2"]);
        assert_eq!(m.last_answers, [("codex".to_string(), "x1".to_string()), ("claude".into(), "c2".into())]);
        let t = pg.set_thread_summary("t".into(), Summary { text: "s".into(), by: "claude".into() }).await.unwrap();
        assert_eq!((t.summary.as_deref(), t.status), (Some("s"), ThreadStatus::Active));
        assert_eq!(pg.set_thread_title("t".into(), "named".into()).await.unwrap().title.as_deref(), Some("named"));
        assert_eq!(events(&pg, "thread.title").await, [json!({"title": "named"})]);
        assert!(matches!(pg.set_thread_title("nope".into(), "x".into()).await, Err(DbError::NotFound(_))));
    }

    #[tokio::test]
    async fn a_thread_is_deleted_with_all_it_holds_but_not_while_runs_are_in_flight() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        thread(&pg, "u").await;
        message(&pg, "t", 1, "king", "king", "q").await;
        message(&pg, "t", 2, "claude", "agent", "a").await;
        session(&pg, "t", "claude").await;
        run(&pg, "r1", "t", "claude", "waiting").await;
        match pg.delete_thread("t".into()).await {
            Err(DbError::Invalid(why)) => assert!(why.contains("1 run in flight; cancel it"), "{why}"),
            other => panic!("deleted with a run in flight: {other:?}"),
        }
        pg.conn().await.unwrap().execute("UPDATE runs SET status = 'cancelled'", &[]).await.unwrap();
        // Counted at open (0: these threads were written directly), kept by deletes.
        let before = pg.thread_count();
        assert_eq!(pg.delete_thread("t".into()).await.unwrap(), 2);
        assert_eq!(pg.thread_count(), before.wrapping_sub(1));
        let c = pg.conn().await.unwrap();
        for table in ["threads", "messages", "runs", "sessions"] {
            let n: i64 = c
                .query_one(
                    &format!(
                        "SELECT count(*) FROM {table} WHERE {} = 't'",
                        if table == "threads" { "id" } else { "thread_id" }
                    ),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(n, 0, "{table}");
        }
        let left: i64 =
            c.query_one("SELECT count(*) FROM conversation_events WHERE thread_id = 't'", &[]).await.unwrap().get(0);
        assert_eq!(left, 0);
        assert_eq!(events(&pg, "thread.delete").await, [json!({"thread": "t", "messages": 2})]);
        assert!(matches!(pg.delete_thread("t".into()).await, Err(DbError::NotFound(_))));
    }

    impl Pg {
        async fn thread_status(&self, id: &str) -> ThreadStatus {
            threads::get(&self.conn().await.unwrap(), id).await.unwrap().status
        }
    }
}
