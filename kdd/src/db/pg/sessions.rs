//! Agent sessions on PostgreSQL: the operations of [`crate::db::sessions`]
//! with its rules ([`candidates`], [`dead_holder`]). Single resume holds
//! across connections (and nodes) by locks taken before anything is read:
//! a start or resume first takes a transaction-scoped advisory lock on its
//! agent and thread, then — when the backend conversation is known — on its
//! agent and backend id (always in that order), then the session's row.
//! Whoever comes second waits, then reads what the first committed and is
//! refused. A refusal is an outcome: its events commit.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Session, SessionStatus};
use tokio_postgres::Row;

use super::Pg;
use super::{events, threads};
use crate::db::sessions::{
    NewSession, SessionEnd, Taken, candidates, dead_holder, end_events, reclaimed, refusal_events, refuse_active_end,
    refuse_archived, resumed, started,
};
use crate::db::{DbError, DbResult, now_ms, random_id};

const COLUMNS: &str =
    "id, thread_id, agent, backend_session_id, status, holder, pid, started_at, last_active_at, metadata, seen_seq";

pub(crate) type Alive<'a> = &'a (dyn Fn(u32) -> bool + Sync);

/// Serialises the starts and resumes of `agent` on `thread` (and, when
/// given, of the backend conversation `backend`) until the transaction
/// ends.
async fn serialise(c: &impl GenericClient, agent: &str, thread: &str, backend: Option<&str>) -> DbResult<()> {
    let lock = c.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))").await?;
    c.execute(&lock, &[&format!("kd.session:{agent}:{thread}")]).await?;
    if let Some(backend) = backend {
        c.execute(&lock, &[&format!("kd.session.backend:{agent}:{backend}")]).await?;
    }
    Ok(())
}

pub(crate) async fn start(c: &impl GenericClient, now: i64, s: NewSession, alive: Alive<'_>) -> DbResult<Taken> {
    threads::get(c, &s.thread).await?;
    let copy = s.backend_session_id.as_deref();
    serialise(c, &s.agent, &s.thread, copy).await?;
    if let Some(active) = blocking(c, now, &s.thread, &s.agent, copy, None, alive).await? {
        return refuse(c, now, &s.thread, None, &s.agent, active, s.holder.as_deref(), copy).await;
    }
    let id = format!("s-{}", random_id(10));
    c.execute(
        &c.prepare_cached(
            "INSERT INTO sessions (id, thread_id, agent, backend_session_id, status, holder, pid, started_at, last_active_at, metadata)
             VALUES ($1, $2, $3, $4, 'active', $5, $6, $7, $7, $8)",
        )
        .await?,
        &[&id, &s.thread, &s.agent, &s.backend_session_id, &s.holder, &s.pid.map(i64::from), &now, &s.metadata.to_string()],
    )
    .await?;
    events::record(c, now, &started(&s, &id)).await?;
    Ok(Taken::Allowed(get(c, &id).await?))
}

pub(crate) async fn resume(
    c: &impl GenericClient,
    now: i64,
    id: &str,
    holder: Option<&str>,
    pid: Option<u32>,
    alive: Alive<'_>,
) -> DbResult<Taken> {
    // Which locks to take: the session's agent and thread never change,
    // its backend id may (a run's end), so it is checked once locked.
    let seen = get(c, id).await?;
    serialise(c, &seen.agent, &seen.thread, seen.backend_session_id.as_deref()).await?;
    let session = get_locked(c, id).await?;
    if let Some(backend) = session.backend_session_id.as_deref()
        && seen.backend_session_id.as_deref() != Some(backend)
    {
        c.execute(
            &c.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))").await?,
            &[&format!("kd.session.backend:{}:{backend}", session.agent)],
        )
        .await?;
    }
    refuse_archived(&session)?;
    let copy = session.backend_session_id.as_deref();
    if let Some(active) = blocking(c, now, &session.thread, &session.agent, copy, Some(&session), alive).await? {
        return refuse(c, now, &session.thread, Some(id), &session.agent, active, holder, copy).await;
    }
    c.execute(
        &c.prepare_cached(
            "UPDATE sessions SET status = 'active', holder = $2, pid = $3, last_active_at = $4, \
             node_id = current_setting('kd.node', true) WHERE id = $1",
        )
        .await?,
        &[&id, &holder, &pid.map(i64::from), &now],
    )
    .await?;
    events::record(c, now, &resumed(&session, holder, pid)).await?;
    Ok(Taken::Allowed(get(c, id).await?))
}

/// The live session that stops `agent` from taking a session of `thread`
/// (`own`, when resuming one), by [`candidates`]; a holder that died frees
/// it.
async fn blocking(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    agent: &str,
    backend: Option<&str>,
    own: Option<&Session>,
    alive: Alive<'_>,
) -> DbResult<Option<Session>> {
    let of_thread = active_for(c, thread, agent).await?;
    let mut copies = Vec::new();
    if let Some(backend) = backend {
        let rows = c
            .query(
                &c.prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM sessions WHERE agent = $1 AND backend_session_id = $2 AND status = 'active'"
                ))
                .await?,
                &[&agent, &backend],
            )
            .await?;
        copies = rows.iter().map(from_row).collect::<DbResult<_>>()?;
    }
    for active in candidates(own, of_thread, copies) {
        if !reclaim_if_dead(c, now, &active, alive).await? {
            return Ok(Some(active));
        }
    }
    Ok(None)
}

/// Refuses a start or resume (`session`) that `active` blocks: recorded as
/// `race.resume_conflict` (and `session.resume_rejected` for a resume).
#[allow(clippy::too_many_arguments)]
async fn refuse(
    c: &impl GenericClient,
    now: i64,
    thread: &str,
    session: Option<&str>,
    agent: &str,
    active: Session,
    requested_by: Option<&str>,
    backend: Option<&str>,
) -> DbResult<Taken> {
    for event in refusal_events(thread, session, agent, &active, requested_by, backend) {
        events::record(c, now, &event).await?;
    }
    let node = super::nodes::holder_node(c, "sessions", "id", &active.id).await?.map(|(node, _)| node);
    Ok(Taken::Rejected { session: active.id, holder: active.holder, pid: active.pid, node })
}

pub(crate) async fn end(c: &impl GenericClient, now: i64, e: &SessionEnd) -> DbResult<Session> {
    let (id, status) = (e.id.as_str(), e.status);
    refuse_active_end(e)?;
    let session = get_locked(c, id).await?;
    c.execute(
        &c.prepare_cached(
            "UPDATE sessions SET status = $2, holder = NULL, pid = NULL, last_active_at = $3,
                 backend_session_id = coalesce($4, backend_session_id), seen_seq = coalesce($5, seen_seq)
             WHERE id = $1",
        )
        .await?,
        &[&id, &status.as_str(), &now, &e.backend_session_id, &e.seen_seq.map(|s| s as i64)],
    )
    .await?;
    for event in end_events(&session, e) {
        events::record(c, now, &event).await?;
    }
    get(c, id).await
}

pub(crate) async fn get(c: &impl GenericClient, id: &str) -> DbResult<Session> {
    one(c, id, "").await
}

/// The session, its row locked until the transaction ends.
async fn get_locked(c: &impl GenericClient, id: &str) -> DbResult<Session> {
    one(c, id, " FOR UPDATE").await
}

async fn one(c: &impl GenericClient, id: &str, lock: &str) -> DbResult<Session> {
    let row = c
        .query_opt(&c.prepare_cached(&format!("SELECT {COLUMNS} FROM sessions WHERE id = $1{lock}")).await?, &[&id])
        .await?;
    row.as_ref().map(from_row).transpose()?.ok_or_else(|| DbError::NotFound(format!("session {id}")))
}

pub(crate) async fn list(
    c: &impl GenericClient,
    thread: Option<&str>,
    agent: Option<&str>,
    status: Option<SessionStatus>,
) -> DbResult<Vec<Session>> {
    let rows = c
        .query(
            &c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM sessions
                 WHERE ($1::text IS NULL OR thread_id = $1) AND ($2::text IS NULL OR agent = $2)
                   AND ($3::text IS NULL OR status = $3)
                 ORDER BY started_at DESC, rowid DESC"
            ))
            .await?,
            &[&thread, &agent, &status.map(SessionStatus::as_str)],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

pub(super) async fn active_for(c: &impl GenericClient, thread: &str, agent: &str) -> DbResult<Option<Session>> {
    let row = c
        .query_opt(
            &c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM sessions WHERE thread_id = $1 AND agent = $2 AND status = 'active'"
            ))
            .await?,
            &[&thread, &agent],
        )
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// If the active session's holder process is dead, expires it and returns
/// true; a session without a pid is never reclaimed. Expired only if it is
/// still as read (active, that pid): one that another transaction released
/// meanwhile is free too, and its release is recorded once.
async fn reclaim_if_dead(c: &impl GenericClient, now: i64, s: &Session, alive: Alive<'_>) -> DbResult<bool> {
    // A holder on another node lives as long as its node does.
    let elsewhere = super::nodes::holder_node(c, "sessions", "id", &s.id).await?;
    let node_alive = elsewhere.as_ref().map(|(_, live)| *live);
    let by_node = |_: u32| node_alive.unwrap_or(false);
    let alive: Alive<'_> = if node_alive.is_some() { &by_node } else { alive };
    let Some(pid) = dead_holder(s, alive) else { return Ok(false) };
    let expired = c
        .execute(
            &c.prepare_cached(
                "UPDATE sessions SET status = 'expired', holder = NULL, pid = NULL, last_active_at = $2
                 WHERE id = $1 AND status = 'active' AND pid = $3",
            )
            .await?,
            &[&s.id, &now, &i64::from(pid)],
        )
        .await?;
    if expired == 0 {
        return Ok(true);
    }
    events::record(c, now, &reclaimed(s, pid)).await?;
    Ok(true)
}

fn from_row(r: &Row) -> DbResult<Session> {
    crate::db::sessions::read(r)
}

impl Pg {
    /// Starts a session; a refusal is [`DbError::SessionActive`] (and is
    /// recorded in the event log).
    pub async fn start_session(&self, s: NewSession) -> DbResult<Session> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let taken = start(&tx, now_ms(), s, &crate::proc::pid_alive).await?;
        self.commit(tx, Default::default()).await?;
        taken.into()
    }

    /// Resumes a session; a rejection is [`DbError::SessionActive`] (and is
    /// recorded in the event log).
    pub async fn resume_session(&self, id: String, holder: Option<String>, pid: Option<u32>) -> DbResult<Session> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let taken = resume(&tx, now_ms(), &id, holder.as_deref(), pid, &crate::proc::pid_alive).await?;
        self.commit(tx, Default::default()).await?;
        taken.into()
    }

    pub async fn end_session(&self, e: SessionEnd) -> DbResult<Session> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let ended = end(&tx, now_ms(), &e).await?;
        self.commit(tx, Default::default()).await?;
        Ok(ended)
    }

    /// Sessions, newest first. Active ones whose holder process has died
    /// are released (expired) first, so none is listed as held by the dead.
    pub async fn sessions(
        &self,
        thread: Option<String>,
        agent: Option<String>,
        status: Option<SessionStatus>,
    ) -> DbResult<Vec<Session>> {
        let listed = list(&self.conn().await?, thread.as_deref(), agent.as_deref(), status).await?;
        if !self.release_dead_holders(&listed).await? {
            return Ok(listed);
        }
        list(&self.conn().await?, thread.as_deref(), agent.as_deref(), status).await
    }

    /// One session, released first when its holder has died.
    pub async fn session(&self, id: String) -> DbResult<Session> {
        let s = get(&self.conn().await?, &id).await?;
        if !self.release_dead_holders(std::slice::from_ref(&s)).await? {
            return Ok(s);
        }
        get(&self.conn().await?, &id).await
    }

    /// Expires the active sessions among `sessions` whose holder process is
    /// gone (checked again with each row locked); true when there were any.
    async fn release_dead_holders(&self, sessions: &[Session]) -> DbResult<bool> {
        let alive = &crate::proc::pid_alive;
        let mut dead: Vec<&str> = sessions
            .iter()
            .filter(|s| s.status == SessionStatus::Active && dead_holder(s, alive).is_some())
            .map(|s| s.id.as_str())
            .collect();
        if dead.is_empty() {
            return Ok(false);
        }
        // Rows locked in one order: two listings never wait on each other.
        dead.sort_unstable();
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let now = now_ms();
        for id in dead {
            let current = get_locked(&tx, id).await?;
            if current.status == SessionStatus::Active {
                reclaim_if_dead(&tx, now, &current, alive).await?;
            }
        }
        self.commit(tx, Default::default()).await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::sync::Arc;

    use kd_proto::types::ThreadStatus;

    use super::*;
    use crate::db::pg::test_rows::{dead_pid, events, thread};
    use crate::db::pg::testing;

    fn new(thread: &str, agent: &str, backend: Option<&str>, holder: &str, pid: Option<u32>) -> NewSession {
        NewSession {
            thread: thread.into(),
            agent: agent.into(),
            backend_session_id: backend.map(String::from),
            holder: Some(holder.into()),
            pid,
            metadata: json!({}),
        }
    }

    fn ended(id: &str, status: SessionStatus, backend: Option<&str>) -> SessionEnd {
        SessionEnd { id: id.into(), status, backend_session_id: backend.map(String::from), seen_seq: None }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn eight_concurrent_resumes_of_one_session_let_exactly_one_in() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let s = pg.start_session(new("t", "claude", Some("b-1"), "setup", None)).await.unwrap();
        pg.end_session(ended(&s.id, SessionStatus::Idle, None)).await.unwrap();
        let pg = Arc::new(pg);
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (pg, id) = (pg.clone(), s.id.clone());
                tokio::spawn(async move {
                    pg.resume_session(id, Some(format!("client-{i}")), Some(std::process::id())).await
                })
            })
            .collect();
        let (mut allowed, mut refused) = (Vec::new(), Vec::new());
        for t in tasks {
            match t.await.unwrap() {
                Ok(s) => allowed.push(s),
                Err(DbError::SessionActive { session, holder, pid, .. }) => refused.push((session, holder, pid)),
                Err(e) => panic!("neither allowed nor refused: {e}"),
            }
        }
        assert_eq!(allowed.len(), 1, "exactly one resume is allowed");
        let winner = &allowed[0];
        assert_eq!(winner.status, SessionStatus::Active);
        assert_eq!(refused.len(), 7);
        assert!(refused.iter().all(|r| *r == (s.id.clone(), winner.holder.clone(), Some(std::process::id()))));
        // Each refusal committed its events, naming the winner.
        let rejected = events(&pg, "session.resume_rejected").await;
        assert_eq!(rejected.len(), 7);
        assert!(rejected.iter().all(|d| d["holder"] == json!(winner.holder)));
        assert_eq!(events(&pg, "race.resume_conflict").await.len(), 7);
        assert_eq!(events(&pg, "session.resume").await.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn eight_concurrent_starts_of_one_agent_on_a_thread_let_exactly_one_in() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let pg = Arc::new(pg);
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let pg = pg.clone();
                tokio::spawn(async move {
                    pg.start_session(new("t", "claude", None, &format!("client-{i}"), Some(std::process::id()))).await
                })
            })
            .collect();
        let mut allowed = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => allowed += 1,
                Err(DbError::SessionActive { .. }) => {}
                Err(e) => panic!("neither allowed nor refused: {e}"),
            }
        }
        assert_eq!(allowed, 1);
        assert_eq!(events(&pg, "race.resume_conflict").await.len(), 7);
    }

    #[tokio::test]
    async fn one_active_session_per_thread_and_agent_and_a_dead_holder_frees_it() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let dead = dead_pid();
        let first = pg.start_session(new("t", "claude", None, "a", Some(dead))).await.unwrap();
        let held = pg.start_session(new("t", "codex", None, "a", Some(std::process::id()))).await.unwrap();
        match pg.start_session(new("t", "codex", None, "b", None)).await {
            Err(DbError::SessionActive { session, holder, pid, .. }) => {
                assert_eq!((session, holder.as_deref(), pid), (held.id.clone(), Some("a"), Some(std::process::id())))
            }
            other => panic!("not refused: {other:?}"),
        }
        // The holder of claude's session is gone: the session can be taken.
        let resumed = pg.resume_session(first.id.clone(), Some("b".into()), None).await.unwrap();
        assert_eq!((resumed.status, resumed.holder.as_deref()), (SessionStatus::Active, Some("b")));
        let reclaimed = events(&pg, "session.reclaimed").await;
        assert_eq!(reclaimed.len(), 1);
        assert_eq!(reclaimed[0]["dead_pid"], json!(dead));
        // A session without a pid is never reclaimed.
        assert!(matches!(
            pg.resume_session(first.id.clone(), Some("c".into()), None).await,
            Err(DbError::SessionActive { .. })
        ));
        assert!(matches!(pg.session("s-nope".into()).await, Err(DbError::NotFound(_))));
        assert!(matches!(pg.start_session(new("nope", "claude", None, "a", None)).await, Err(DbError::NotFound(_))));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_dead_holders_session_released_by_two_at_once_is_released_once() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let dead = pg.start_session(new("t", "claude", None, "a", Some(dead_pid()))).await.unwrap();
        // A listing releasing it, not yet committed…
        let mut c = pg.conn().await.unwrap();
        let tx = c.transaction().await.unwrap();
        let s = get_locked(&tx, &dead.id).await.unwrap();
        assert!(reclaim_if_dead(&tx, now_ms(), &s, &crate::proc::pid_alive).await.unwrap());
        // …while a start finds it blocking and waits for its row.
        let pg = Arc::new(pg);
        let start = tokio::spawn({
            let pg = pg.clone();
            async move { pg.start_session(new("t", "claude", None, "b", None)).await }
        });
        let watcher = pg.conn().await.unwrap();
        while watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            tokio::task::yield_now().await;
        }
        pg.commit(tx, Default::default()).await.unwrap();
        let started = start.await.unwrap().unwrap();
        assert_eq!((started.status, started.holder.as_deref()), (SessionStatus::Active, Some("b")));
        assert_eq!(events(&pg, "session.reclaimed").await.len(), 1);
        assert_eq!(pg.session(dead.id).await.unwrap().status, SessionStatus::Expired);
    }

    #[tokio::test]
    async fn a_backend_conversation_active_on_another_thread_blocks_its_copy() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t1").await;
        thread(&pg, "t2").await;
        let s1 = pg.start_session(new("t1", "claude", Some("conv"), "a", Some(std::process::id()))).await.unwrap();
        match pg.start_session(new("t2", "claude", Some("conv"), "b", None)).await {
            Err(DbError::SessionActive { session, .. }) => assert_eq!(session, s1.id),
            other => panic!("a copy was started: {other:?}"),
        }
        // Another agent's conversation of the same id is not a copy.
        pg.start_session(new("t2", "codex", Some("conv"), "b", None)).await.unwrap();
        pg.end_session(ended(&s1.id, SessionStatus::Idle, None)).await.unwrap();
        pg.start_session(new("t2", "claude", Some("conv"), "b", None)).await.unwrap();
        // Now s1 resumed would be the copy.
        assert!(matches!(pg.resume_session(s1.id.clone(), None, None).await, Err(DbError::SessionActive { .. })));
        let conflict = events(&pg, "race.resume_conflict").await;
        assert_eq!(conflict.len(), 2);
        assert_eq!(conflict[1]["active_thread"], "t2");
    }

    #[tokio::test]
    async fn ending_keeps_the_backend_id_and_another_one_is_recorded_as_a_fork() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let s = pg.start_session(new("t", "claude", Some("b-1"), "a", None)).await.unwrap();
        assert!(matches!(pg.end_session(ended(&s.id, SessionStatus::Active, None)).await, Err(DbError::Invalid(_))));
        let e = SessionEnd { seen_seq: Some(4), ..ended(&s.id, SessionStatus::Idle, None) };
        let idle = pg.end_session(e).await.unwrap();
        assert_eq!(
            (idle.status, idle.holder, idle.backend_session_id.as_deref(), idle.seen_seq),
            (SessionStatus::Idle, None, Some("b-1"), Some(4))
        );
        assert!(events(&pg, "race.session_fork").await.is_empty());
        let done = pg.end_session(ended(&s.id, SessionStatus::Completed, Some("b-2"))).await.unwrap();
        assert_eq!((done.backend_session_id.as_deref(), done.seen_seq), (Some("b-2"), Some(4)));
        let fork = events(&pg, "race.session_fork").await;
        assert_eq!((&fork[0]["expected"], &fork[0]["got"]), (&json!("b-1"), &json!("b-2")));
        let ends = events(&pg, "session.end").await;
        assert_eq!(ends[1], json!({"status": "completed", "previous": "idle"}));
    }

    #[tokio::test]
    async fn sessions_are_listed_newest_first_with_dead_holders_released() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        thread(&pg, "u").await;
        let a = pg.start_session(new("t", "a", None, "h", Some(dead_pid()))).await.unwrap();
        let b = pg.start_session(new("t", "b", None, "h", Some(std::process::id()))).await.unwrap();
        let c = pg.start_session(new("u", "a", None, "h", None)).await.unwrap();
        let listed = pg.sessions(None, None, None).await.unwrap();
        assert_eq!(listed.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [&c.id, &b.id, &a.id]);
        assert_eq!(
            (listed[2].status, listed[2].pid, listed[2].holder.as_deref()),
            (SessionStatus::Expired, None, None)
        );
        let of_t = pg.sessions(Some("t".into()), None, Some(SessionStatus::Active)).await.unwrap();
        assert_eq!(of_t.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [&b.id]);
        let of_a = pg.sessions(None, Some("a".into()), None).await.unwrap();
        assert_eq!(of_a.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [&c.id, &a.id]);
        assert_eq!(events(&pg, "session.reclaimed").await.len(), 1);
        // `session` releases the one it reads.
        let d = pg.start_session(new("u", "b", None, "h", Some(dead_pid()))).await.unwrap();
        assert_eq!(pg.session(d.id).await.unwrap().status, SessionStatus::Expired);
    }

    #[tokio::test]
    async fn a_session_archived_with_its_thread_cannot_be_resumed() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        thread(&pg, "t").await;
        let s = pg.start_session(new("t", "claude", None, "a", None)).await.unwrap();
        pg.set_thread_status("t".into(), ThreadStatus::Archived, "archive", None).await.unwrap();
        assert_eq!(pg.session(s.id.clone()).await.unwrap().status, SessionStatus::Archived);
        assert!(matches!(pg.resume_session(s.id, None, None).await, Err(DbError::Invalid(_))));
    }
}
