//! Threads, their members, and each workspace+branch's current thread
//! (PostgreSQL; mirrors `db/threads.rs`).
//!
//! One trunk per workspace and git branch: `create` takes a transaction
//! advisory lock on the workspace and branch before it reads the trunk, so
//! a concurrent first thread (on this node or another) waits and then
//! branches off the new trunk, as SQLite's serial writer decides; the
//! `one_trunk` index stays the backstop. A fresh id is inserted with `ON
//! CONFLICT (id) DO NOTHING` and drawn again when taken.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Lineage, Thread, ThreadStatus};
use tokio_postgres::Row;

use super::{Pg, events};
use crate::db::threads::{
    ID_ATTEMPTS, NewThread, candidate_id, created, lineage_of, lineage_str, made_current, no_free_id, status_str,
};
use crate::db::{DbError, DbResult, Outbox, json_list, now_ms};

const COLUMNS: &str = "id, workspace, branch, title, status, lineage, parent_id, members, created_at, last_activity_at, last_seq, context_mode, origin, summary";

/// The trunk thread of a workspace and git branch (F-L1), if it has one.
pub(crate) async fn trunk(c: &impl GenericClient, workspace: &str, branch: Option<&str>) -> DbResult<Option<String>> {
    let stmt = c
        .prepare_cached(
            "SELECT id FROM threads WHERE workspace = $1 AND coalesce(branch, '') = $2 AND lineage = 'trunk'",
        )
        .await?;
    Ok(c.query_opt(&stmt, &[&workspace, &branch.unwrap_or("")]).await?.map(|r| r.try_get(0)).transpose()?)
}

pub(crate) async fn create(c: &impl GenericClient, now: i64, mut t: NewThread, out: &mut Outbox) -> DbResult<Thread> {
    if let Some(parent) = &t.parent {
        get(c, parent).await?;
    }
    // Whoever creates a thread of this workspace and branch waits here until
    // the other commits: the trunk read next is then the committed one.
    let lock = c
        .prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended('kd.trunk:' || json_build_array($1::text, $2::text)::text, 0))")
        .await?;
    c.execute(&lock, &[&t.workspace, &t.branch.as_deref().unwrap_or("")]).await?;
    let trunk = trunk(c, &t.workspace, t.branch.as_deref()).await?;
    let lineage = lineage_of(&t, &trunk)?;
    if lineage == Lineage::Branch && t.parent.is_none() {
        t.parent = trunk;
    }
    let insert = c
        .prepare_cached(
            "INSERT INTO threads (id, workspace, branch, title, lineage, parent_id, members, created_at, last_activity_at, context_mode, origin)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10)
             ON CONFLICT (id) DO NOTHING",
        )
        .await?;
    let members = json_list(&t.members);
    let (given, attempts) = match &t.id {
        Some(id) => (Some(id.clone()), 1),
        None => (None, ID_ATTEMPTS),
    };
    let mut id = None;
    for attempt in 0..attempts {
        let candidate = given.clone().unwrap_or_else(|| candidate_id(attempt));
        let inserted = c
            .execute(
                &insert,
                &[
                    &candidate,
                    &t.workspace,
                    &t.branch,
                    &t.title,
                    &lineage_str(lineage),
                    &t.parent,
                    &members,
                    &now,
                    &t.context.as_str(),
                    &t.origin,
                ],
            )
            .await?;
        if inserted == 1 {
            id = Some(candidate);
            break;
        }
    }
    let id = match (id, given) {
        (Some(id), _) => id,
        (None, Some(given)) => return Err(DbError::AlreadyExists(format!("thread {given}"))),
        (None, None) => return Err(no_free_id()),
    };
    events::record(c, now, &created(&t, &id, lineage)).await?;
    out.threads_added += 1;
    if t.set_current {
        set_current(c, now, &t.workspace, t.branch.as_deref(), &id).await?;
    }
    get(c, &id).await
}

pub(crate) async fn exists(c: &impl GenericClient, id: &str) -> DbResult<bool> {
    let stmt = c.prepare_cached("SELECT 1 FROM threads WHERE id = $1").await?;
    Ok(c.query_opt(&stmt, &[&id]).await?.is_some())
}

/// The thread imported from `origin`, if any.
pub(crate) async fn by_origin(c: &impl GenericClient, origin: &str) -> DbResult<Option<String>> {
    let stmt = c.prepare_cached("SELECT id FROM threads WHERE origin = $1").await?;
    Ok(c.query_opt(&stmt, &[&origin]).await?.map(|r| r.try_get(0)).transpose()?)
}

pub(crate) async fn get(c: &impl GenericClient, id: &str) -> DbResult<Thread> {
    let stmt = c.prepare_cached(&format!("SELECT {COLUMNS} FROM threads WHERE id = $1")).await?;
    match c.query_opt(&stmt, &[&id]).await? {
        Some(row) => from_row(&row),
        None => Err(DbError::NotFound(format!("thread {id}"))),
    }
}

pub(crate) async fn count(c: &impl GenericClient) -> DbResult<u64> {
    let n: i64 = c.query_one("SELECT count(*) FROM threads", &[]).await?.try_get(0)?;
    Ok(n as u64)
}

pub(crate) async fn list(
    c: &impl GenericClient,
    workspace: Option<&str>,
    status: Option<ThreadStatus>,
    limit: Option<u32>,
) -> DbResult<Vec<Thread>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM threads
             WHERE ($1::text IS NULL OR workspace = $1) AND ($2::text IS NULL OR status = $2)
             ORDER BY last_activity_at DESC, rowid DESC
             LIMIT $3"
        ))
        .await?;
    let limit = limit.map(i64::from);
    let rows = c.query(&stmt, &[&workspace, &status.map(status_str), &limit]).await?;
    rows.iter().map(from_row).collect()
}

pub(crate) async fn current(c: &impl GenericClient, workspace: &str, branch: Option<&str>) -> DbResult<Option<Thread>> {
    let stmt = c.prepare_cached("SELECT thread_id FROM current_threads WHERE workspace = $1 AND branch = $2").await?;
    let id: Option<String> =
        c.query_opt(&stmt, &[&workspace, &branch.unwrap_or("")]).await?.map(|r| r.try_get(0)).transpose()?;
    match id {
        Some(id) => Ok(Some(get(c, &id).await?)),
        None => Ok(None),
    }
}

pub(crate) async fn set_current(
    c: &impl GenericClient,
    now: i64,
    workspace: &str,
    branch: Option<&str>,
    id: &str,
) -> DbResult<Thread> {
    let thread = get(c, id).await?;
    let stmt = c
        .prepare_cached(
            "INSERT INTO current_threads (workspace, branch, thread_id) VALUES ($1, $2, $3)
             ON CONFLICT (workspace, branch) DO UPDATE SET thread_id = excluded.thread_id",
        )
        .await?;
    c.execute(&stmt, &[&workspace, &branch.unwrap_or(""), &id]).await?;
    events::record(c, now, &made_current(id, workspace, branch)).await?;
    Ok(thread)
}

/// Replaces the thread's member list (the council as configured now).
pub(crate) async fn set_members(c: &impl GenericClient, id: &str, members: &[String]) -> DbResult<()> {
    let stmt = c.prepare_cached("UPDATE threads SET members = $2 WHERE id = $1").await?;
    c.execute(&stmt, &[&id, &json_list(members)]).await?;
    Ok(())
}

/// A row of [`COLUMNS`].
pub(crate) fn from_row(r: &Row) -> DbResult<Thread> {
    crate::db::threads::read(r)
}

impl Pg {
    pub async fn create_thread(&self, t: NewThread) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let thread = create(&tx, now_ms(), t, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(thread)
    }

    pub async fn thread(&self, id: String) -> DbResult<Thread> {
        get(&self.conn().await?, &id).await
    }

    pub async fn threads(
        &self,
        workspace: Option<String>,
        status: Option<ThreadStatus>,
        limit: Option<u32>,
    ) -> DbResult<Vec<Thread>> {
        list(&self.conn().await?, workspace.as_deref(), status, limit).await
    }

    pub async fn current_thread(&self, workspace: String, branch: Option<String>) -> DbResult<Option<Thread>> {
        current(&self.conn().await?, &workspace, branch.as_deref()).await
    }

    pub async fn set_current_thread(&self, workspace: String, branch: Option<String>, id: String) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let thread = set_current(&tx, now_ms(), &workspace, branch.as_deref(), &id).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(thread)
    }

    /// The trunk thread of a workspace and git branch, if it has one.
    pub async fn trunk(&self, workspace: String, branch: Option<String>) -> DbResult<Option<String>> {
        trunk(&self.conn().await?, &workspace, branch.as_deref()).await
    }

    pub async fn set_thread_members(&self, id: String, members: Vec<String>) -> DbResult<()> {
        set_members(&self.conn().await?, &id, &members).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::pg::testing;

    fn new(workspace: &str, branch: Option<&str>, lineage: Option<Lineage>) -> NewThread {
        NewThread { branch: branch.map(Into::into), members: vec![], lineage, ..NewThread::in_workspace(workspace) }
    }

    #[tokio::test]
    async fn threads_created_together_in_one_workspace_make_one_trunk_and_branches_of_it() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let pg = std::sync::Arc::new(pg);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let pg = pg.clone();
                tokio::spawn(async move { pg.create_thread(new("/w", None, None)).await })
            })
            .collect();
        let mut made = Vec::new();
        for t in tasks {
            made.push(t.await.unwrap().unwrap());
        }
        let trunks: Vec<_> = made.iter().filter(|t| t.lineage == Lineage::Trunk).collect();
        assert_eq!(trunks.len(), 1);
        for t in made.iter().filter(|t| t.lineage == Lineage::Branch) {
            assert_eq!(t.parent.as_deref(), Some(trunks[0].id.as_str()));
        }
        assert_eq!(pg.thread_count(), 8);
    }

    #[tokio::test]
    async fn a_given_id_is_refused_when_taken_and_a_branch_needs_a_parent() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = pg.create_thread(NewThread { id: Some("mine".into()), ..new("/w", None, None) }).await.unwrap();
        assert_eq!(t.id, "mine");
        let e = pg.create_thread(NewThread { id: Some("mine".into()), ..new("/x", None, None) }).await.unwrap_err();
        assert!(matches!(e, DbError::AlreadyExists(ref what) if what == "thread mine"), "{e}");
        let e = pg.create_thread(new("/y", None, Some(Lineage::Branch))).await.unwrap_err();
        assert!(matches!(e, DbError::Invalid(_)), "{e}");
        let e = pg.create_thread(NewThread { parent: Some("nope".into()), ..new("/y", None, None) }).await.unwrap_err();
        assert!(matches!(e, DbError::NotFound(_)), "{e}");
        assert_eq!(pg.thread_count(), 1);
    }

    #[tokio::test]
    async fn current_threads_members_and_listing_order() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        assert!(pg.current_thread("/w".into(), None).await.unwrap().is_none());
        let a = pg.create_thread(NewThread { set_current: true, ..new("/w", None, None) }).await.unwrap();
        assert_eq!(pg.current_thread("/w".into(), None).await.unwrap().map(|t| t.id), Some(a.id.clone()));
        let b = pg.create_thread(new("/w", None, None)).await.unwrap();
        pg.set_current_thread("/w".into(), None, b.id.clone()).await.unwrap();
        assert_eq!(pg.current_thread("/w".into(), None).await.unwrap().map(|t| t.id), Some(b.id.clone()));
        assert!(pg.current_thread("/w".into(), Some("dev".into())).await.unwrap().is_none());
        let e = pg.set_current_thread("/w".into(), None, "nope".into()).await.unwrap_err();
        assert!(matches!(e, DbError::NotFound(_)));

        pg.set_thread_members(a.id.clone(), vec!["claude".into(), "codex".into()]).await.unwrap();
        assert_eq!(pg.thread(a.id.clone()).await.unwrap().members, ["claude", "codex"]);

        // Same activity time: the later created first (SQLite's rowid DESC).
        let c = pg.create_thread(new("/v", None, None)).await.unwrap();
        let conn = pg.conn().await.unwrap();
        conn.execute("UPDATE threads SET last_activity_at = 5", &[]).await.unwrap();
        let ids: Vec<String> = pg.threads(None, None, None).await.unwrap().into_iter().map(|t| t.id).collect();
        assert_eq!(ids, [c.id.clone(), b.id.clone(), a.id.clone()]);
        let ids: Vec<String> =
            pg.threads(Some("/w".into()), None, Some(1)).await.unwrap().into_iter().map(|t| t.id).collect();
        assert_eq!(ids, [b.id.as_str()]);
        conn.execute("UPDATE threads SET status = 'idle' WHERE id = $1", &[&a.id]).await.unwrap();
        let idle = pg.threads(None, Some(ThreadStatus::Idle), None).await.unwrap();
        assert_eq!(idle.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [a.id.as_str()]);
        assert!(matches!(pg.thread("nope".into()).await, Err(DbError::NotFound(_))));
        assert_eq!(count(&conn).await.unwrap(), 3);
    }
}
