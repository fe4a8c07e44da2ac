//! Line comments on SQLite: the SQL of [`crate::db::comments`]' operations.

use kd_proto::comment::{Comment, CommentState};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::db::comments::{COLUMNS, MAX_PER_WORK};
use crate::db::sqlite::Sqlite;
use crate::db::{DbError, DbResult};

fn row(r: &Row<'_>) -> rusqlite::Result<Comment> {
    let state: String = r.get(10)?;
    Ok(Comment {
        id: r.get(0)?,
        thread: r.get(1)?,
        member: r.get(2)?,
        author: r.get(3)?,
        path: r.get(4)?,
        line: r.get(5)?,
        end_line: r.get(6)?,
        commit: r.get(7)?,
        body: r.get(8)?,
        hunk: r.get(9)?,
        state: CommentState::parse(&state).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(10, rusqlite::types::Type::Text, format!("state {state}").into())
        })?,
        created_at_ms: r.get(11)?,
        sent_seq: r.get::<_, Option<i64>>(12)?.map(|s| s as u64),
        sent_at_ms: r.get(13)?,
        resolved_by: r.get(14)?,
        resolved_at_ms: r.get(15)?,
    })
}

fn get(c: &Connection, id: &str) -> DbResult<Option<Comment>> {
    Ok(c.prepare_cached(&format!("SELECT {COLUMNS} FROM work_comments WHERE id = ?1"))?
        .query_row([id], row)
        .optional()?)
}

impl Sqlite {
    /// Records a new comment (refused past [`MAX_PER_WORK`] on one work).
    pub async fn add_comment(&self, c: Comment) -> DbResult<()> {
        self.write(move |conn, _| {
            let n: i64 = conn
                .prepare_cached("SELECT count(*) FROM work_comments WHERE thread_id = ?1 AND member = ?2")?
                .query_row(params![c.thread, c.member], |r| r.get(0))?;
            if n >= i64::from(MAX_PER_WORK) {
                return Err(DbError::Invalid(format!(
                    "{}'s work has {MAX_PER_WORK} comments already: resolve or send some first",
                    c.member
                )));
            }
            conn.prepare_cached(&format!(
                "INSERT INTO work_comments ({COLUMNS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
            ))?
            .execute(params![
                c.id,
                c.thread,
                c.member,
                c.author,
                c.path,
                c.line,
                c.end_line,
                c.commit,
                c.body,
                c.hunk,
                c.state.as_str(),
                c.created_at_ms,
                c.sent_seq.map(|s| s as i64),
                c.sent_at_ms,
                c.resolved_by,
                c.resolved_at_ms,
            ])?;
            Ok(())
        })
        .await
    }

    /// One comment.
    pub async fn comment(&self, id: String) -> DbResult<Option<Comment>> {
        self.read(move |c| get(c, &id)).await
    }

    /// The comments on a thread's work (of one member), oldest first.
    pub async fn comments(&self, thread: String, member: Option<String>) -> DbResult<Vec<Comment>> {
        self.read(move |c| {
            let sql = format!(
                "SELECT {COLUMNS} FROM work_comments WHERE thread_id = ?1 AND (?2 IS NULL OR member = ?2) \
                 ORDER BY created_at, id {}",
                super::limit(Some(MAX_PER_WORK * 16))
            );
            let rows =
                c.prepare_cached(&sql)?.query_map(params![thread, member], row)?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Marks the pending comments `ids` sent in message `seq` at `at`;
    /// those it marked.
    pub async fn send_comments(&self, ids: Vec<String>, seq: u64, at: i64) -> DbResult<Vec<Comment>> {
        self.write(move |c, _| {
            let mut done = Vec::new();
            for id in &ids {
                let n = c
                    .prepare_cached(
                        "UPDATE work_comments SET state = 'sent', sent_seq = ?2, sent_at = ?3 \
                         WHERE id = ?1 AND state = 'pending'",
                    )?
                    .execute(params![id, seq as i64, at])?;
                if n == 1 {
                    done.extend(get(c, id)?);
                }
            }
            Ok(done)
        })
        .await
    }

    /// Resolves a comment (by the member's commit `by`, or the King's
    /// word) unless it is resolved already; the comment as it stands.
    pub async fn resolve_comment(&self, id: String, by: Option<String>, at: i64) -> DbResult<Comment> {
        self.write(move |c, _| {
            c.prepare_cached(
                "UPDATE work_comments SET state = 'resolved', resolved_by = ?2, resolved_at = ?3 \
                 WHERE id = ?1 AND state <> 'resolved'",
            )?
            .execute(params![id, by, at])?;
            get(c, &id)?.ok_or_else(|| DbError::NotFound(format!("comment {id}")))
        })
        .await
    }
}
