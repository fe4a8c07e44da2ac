//! Stand-ins for the foundation's table functions this branch needs before
//! they land (`events::record`, `threads::get`): the same signatures, so
//! switching to them is an import. Removed once they are merged.

pub(crate) mod events {
    use deadpool_postgres::GenericClient;

    use crate::db::events::NewEvent;
    use crate::db::{DbResult, json_list};

    pub(crate) async fn record(c: &impl GenericClient, at: i64, e: &NewEvent<'_>) -> DbResult<()> {
        c.execute(
            &c.prepare_cached(
                "INSERT INTO conversation_events
                     (at, kind, thread_id, session_id, agent, sender, recipients, correlation_id, data)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .await?,
            &[
                &at,
                &e.kind,
                &e.thread,
                &e.session,
                &e.agent,
                &e.from,
                &json_list(e.to),
                &e.correlation_id,
                &e.data.to_string(),
            ],
        )
        .await?;
        Ok(())
    }
}

pub(crate) mod threads {
    use deadpool_postgres::GenericClient;
    use kd_proto::types::{ContextMode, Lineage, Thread, ThreadStatus};

    use crate::db::{DbError, DbResult, parse_list};

    pub(crate) async fn get(c: &impl GenericClient, id: &str) -> DbResult<Thread> {
        let row = c
            .query_opt(
                &c.prepare_cached(
                    "SELECT id, workspace, branch, title, status, lineage, parent_id, members, created_at,
                            last_activity_at, last_seq, context_mode, origin, summary FROM threads WHERE id = $1",
                )
                .await?,
                &[&id],
            )
            .await?
            .ok_or_else(|| DbError::NotFound(format!("thread {id}")))?;
        let members: &str = row.try_get(7)?;
        Ok(Thread {
            id: row.try_get(0)?,
            workspace: row.try_get(1)?,
            branch: row.try_get(2)?,
            title: row.try_get(3)?,
            status: match row.try_get(4)? {
                "idle" => ThreadStatus::Idle,
                "archived" => ThreadStatus::Archived,
                _ => ThreadStatus::Active,
            },
            lineage: match row.try_get(5)? {
                "branch" => Lineage::Branch,
                _ => Lineage::Trunk,
            },
            parent: row.try_get(6)?,
            members: parse_list(members),
            created_at_ms: row.try_get(8)?,
            last_activity_at_ms: row.try_get(9)?,
            last_seq: row.try_get::<_, i64>(10)? as u64,
            context: match row.try_get(11)? {
                "resume" => ContextMode::Resume,
                _ => ContextMode::History,
            },
            origin: row.try_get(12)?,
            summary: row.try_get(13)?,
        })
    }
}
