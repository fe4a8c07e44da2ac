//! Line comments on PostgreSQL: the SQL of [`crate::db::comments`]'
//! operations. Adding a comment locks the work's row, so that two nodes
//! adding at once count each other.

use deadpool_postgres::GenericClient;
use kd_proto::comment::{Comment, CommentState};
use tokio_postgres::Row;

use super::Pg;
use crate::db::comments::{COLUMNS, MAX_PER_WORK};
use crate::db::{DbError, DbResult, Outbox};

fn row(r: &Row) -> DbResult<Comment> {
    let state: &str = r.try_get(10)?;
    let line = |i: usize| -> DbResult<u32> {
        let v: i64 = r.try_get(i)?;
        u32::try_from(v).map_err(|_| DbError::Internal(format!("a comment's line {v}")))
    };
    Ok(Comment {
        id: r.try_get(0)?,
        thread: r.try_get(1)?,
        member: r.try_get(2)?,
        author: r.try_get(3)?,
        path: r.try_get(4)?,
        line: line(5)?,
        end_line: line(6)?,
        commit: r.try_get(7)?,
        body: r.try_get(8)?,
        hunk: r.try_get(9)?,
        state: CommentState::parse(state).ok_or_else(|| DbError::Internal(format!("a comment's state {state}")))?,
        created_at_ms: r.try_get(11)?,
        sent_seq: r.try_get::<_, Option<i64>>(12)?.map(|s| s as u64),
        sent_at_ms: r.try_get(13)?,
        resolved_by: r.try_get(14)?,
        resolved_at_ms: r.try_get(15)?,
    })
}

async fn get(c: &impl GenericClient, id: &str) -> DbResult<Option<Comment>> {
    let sql = format!("SELECT {COLUMNS} FROM work_comments WHERE id = $1");
    c.query_opt(&c.prepare_cached(&sql).await?, &[&id]).await?.map(|r| row(&r)).transpose()
}

impl Pg {
    /// Records a new comment (refused past [`MAX_PER_WORK`] on one work).
    pub async fn add_comment(&self, cm: Comment) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        // One adder at a time per work: the count below is then exact.
        tx.execute(
            &tx.prepare_cached("SELECT 1 FROM worktrees WHERE thread_id = $1 AND member = $2 FOR UPDATE").await?,
            &[&cm.thread, &cm.member],
        )
        .await?;
        let n: i64 = tx
            .query_one(
                &tx.prepare_cached("SELECT count(*) FROM work_comments WHERE thread_id = $1 AND member = $2").await?,
                &[&cm.thread, &cm.member],
            )
            .await?
            .try_get(0)?;
        if n >= i64::from(MAX_PER_WORK) {
            return Err(DbError::Invalid(format!(
                "{}'s work has {MAX_PER_WORK} comments already: resolve or send some first",
                cm.member
            )));
        }
        let sql = format!(
            "INSERT INTO work_comments ({COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        );
        tx.execute(
            &tx.prepare_cached(&sql).await?,
            &[
                &cm.id,
                &cm.thread,
                &cm.member,
                &cm.author,
                &cm.path,
                &i64::from(cm.line),
                &i64::from(cm.end_line),
                &cm.commit,
                &cm.body,
                &cm.hunk,
                &cm.state.as_str(),
                &cm.created_at_ms,
                &cm.sent_seq.map(|s| s as i64),
                &cm.sent_at_ms,
                &cm.resolved_by,
                &cm.resolved_at_ms,
            ],
        )
        .await?;
        self.commit(tx, Outbox::default()).await
    }

    /// One comment.
    pub async fn comment(&self, id: String) -> DbResult<Option<Comment>> {
        get(&self.conn().await?, &id).await
    }

    /// The comments on a thread's work (of one member), oldest first.
    pub async fn comments(&self, thread: String, member: Option<String>) -> DbResult<Vec<Comment>> {
        let c = self.conn().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM work_comments WHERE thread_id = $1 AND ($2::TEXT IS NULL OR member = $2) \
             ORDER BY created_at, id LIMIT $3"
        );
        let limit = i64::from(MAX_PER_WORK * 16);
        c.query(&c.prepare_cached(&sql).await?, &[&thread, &member, &limit]).await?.iter().map(row).collect()
    }

    /// Marks the pending comments `ids` sent in message `seq` at `at`;
    /// those it marked.
    pub async fn send_comments(&self, ids: Vec<String>, seq: u64, at: i64) -> DbResult<Vec<Comment>> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let sql = format!(
            "UPDATE work_comments SET state = 'sent', sent_seq = $2, sent_at = $3 \
             WHERE id = $1 AND state = 'pending' RETURNING {COLUMNS}"
        );
        let stmt = tx.prepare_cached(&sql).await?;
        let mut done = Vec::new();
        for id in &ids {
            if let Some(r) = tx.query_opt(&stmt, &[id, &(seq as i64), &at]).await? {
                done.push(row(&r)?);
            }
        }
        self.commit(tx, Outbox::default()).await?;
        Ok(done)
    }

    /// Resolves a comment (by the member's commit `by`, or the King's
    /// word) unless it is resolved already; the comment as it stands.
    pub async fn resolve_comment(&self, id: String, by: Option<String>, at: i64) -> DbResult<Comment> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        tx.execute(
            &tx.prepare_cached(
                "UPDATE work_comments SET state = 'resolved', resolved_by = $2, resolved_at = $3 \
                 WHERE id = $1 AND state <> 'resolved'",
            )
            .await?,
            &[&id, &by, &at],
        )
        .await?;
        let found = get(&tx, &id).await?.ok_or_else(|| DbError::NotFound(format!("comment {id}")))?;
        self.commit(tx, Outbox::default()).await?;
        Ok(found)
    }
}
