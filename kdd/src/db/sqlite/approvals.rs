//! Approvals on SQLite: the SQL of [`crate::db::approvals`]' operations.

use kd_proto::approval::{Approval, ApprovalState, DecidedBy, Scope};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::db::approvals::{Decide, Decided, MAX_LIST, apply, from_json, json_of, record, told};
use crate::db::sqlite::Sqlite;
use crate::db::{DbError, DbResult, Outbox, now_ms};

const COLUMNS: &str = "id, thread_id, member, run_id, tool, scopes, state, decided_by, scope, message, requested_at, decided_at, \
     expires_at";

fn bad(i: usize, e: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into())
}

fn row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let text = |i: usize| r.get::<_, String>(i);
    let opt = |i: usize| r.get::<_, Option<String>>(i);
    let state = text(6)?;
    Ok(Approval {
        id: r.get(0)?,
        thread: r.get(1)?,
        member: r.get(2)?,
        run: r.get(3)?,
        tool: from_json(&text(4)?).map_err(|e| bad(4, e))?,
        scopes: from_json(&text(5)?).map_err(|e| bad(5, e))?,
        state: ApprovalState::parse(&state).ok_or_else(|| bad(6, format!("state {state}")))?,
        decided_by: opt(7)?.as_deref().and_then(DecidedBy::parse),
        scope: opt(8)?.as_deref().and_then(Scope::parse),
        message: r.get(9)?,
        requested_at_ms: r.get(10)?,
        decided_at_ms: r.get(11)?,
        expires_at_ms: r.get(12)?,
    })
}

fn get(conn: &Connection, id: &str) -> DbResult<Option<Approval>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM approvals WHERE id = ?1"))?
        .query_row([id], row)
        .optional()?)
}

/// The statement of [`super::Sqlite::approvals`]: the pending ones only
/// unless `all`, of the thread `?1` when `of_thread`. Only the conditions
/// that apply are written: `?1 OR state = 'pending'` kept SQLite from the
/// index of the pending approvals, and every client that subscribes to
/// them (a chat, a web page) read every approval ever asked. A thread's
/// pending ones are read through that index too: the thread's own
/// (`approvals_by_thread`) holds every approval the thread ever had.
fn list_sql(all: bool, of_thread: bool, limit: u32) -> String {
    let filter = match (all, of_thread) {
        (true, false) => "",
        (true, true) => "WHERE thread_id = ?1",
        (false, false) => "WHERE state = 'pending'",
        (false, true) => "INDEXED BY approvals_pending WHERE state = 'pending' AND thread_id = ?1",
    };
    format!(
        "SELECT {COLUMNS} FROM approvals {filter} ORDER BY requested_at DESC, id DESC {}",
        super::limit(Some(limit.min(MAX_LIST)))
    )
}

fn insert(conn: &Connection, a: &Approval, node: &str, out: &mut Outbox) -> DbResult<()> {
    conn.prepare_cached(
        "INSERT INTO approvals (id, thread_id, member, run_id, node_id, tool, scopes, state, decided_by, scope, \
         message, requested_at, decided_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        a.id,
        a.thread,
        a.member,
        a.run,
        node,
        json_of(&a.tool)?,
        json_of(&a.scopes)?,
        a.state.as_str(),
        a.decided_by.map(DecidedBy::as_str),
        a.scope.map(Scope::as_str),
        a.message,
        a.requested_at_ms,
        a.decided_at_ms,
        a.expires_at_ms,
    ])?;
    super::events::write(conn, a.requested_at_ms, &record(a))?;
    told(a, out);
    Ok(())
}

fn decide(conn: &Connection, now: i64, d: &Decide, out: &mut Outbox) -> DbResult<Decided> {
    let a = get(conn, &d.id)?.ok_or_else(|| DbError::NotFound(format!("approval {}", d.id)))?;
    if !a.state.is_pending() {
        return Ok(Decided::Already(a));
    }
    let new = apply(&a, d, now)?;
    conn.prepare_cached(
        "UPDATE approvals SET state = ?2, decided_by = ?3, scope = ?4, message = ?5, decided_at = ?6 \
         WHERE id = ?1 AND state = 'pending'",
    )?
    .execute(params![
        new.id,
        new.state.as_str(),
        new.decided_by.map(DecidedBy::as_str),
        new.scope.map(Scope::as_str),
        new.message,
        now
    ])?;
    super::events::write(conn, now, &record(&new))?;
    told(&new, out);
    Ok(Decided::Now(new))
}

impl Sqlite {
    /// Records an approval (pending, or decided by the policy) asked by a
    /// run of `node`, and tells the thread.
    pub async fn add_approval(&self, a: Approval, node: String) -> DbResult<()> {
        self.write(move |c, out| insert(c, &a, &node, out)).await
    }

    /// One approval.
    pub async fn approval(&self, id: String) -> DbResult<Option<Approval>> {
        self.read(move |c| get(c, &id)).await
    }

    /// Approvals, newest first: pending ones only unless `all`; of one
    /// thread or all.
    pub async fn approvals(&self, all: bool, thread: Option<String>, limit: u32) -> DbResult<Vec<Approval>> {
        self.read(move |c| {
            let sql = list_sql(all, thread.is_some(), limit);
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(&thread), row)?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Ends a pending approval as `d` says (see [`Decided`]).
    pub async fn decide_approval(&self, d: Decide) -> DbResult<Decided> {
        self.write(move |c, out| decide(c, now_ms(), &d, out)).await
    }

    /// The approvals of `member` on `thread` the King granted for the
    /// thread, or for the run `run`.
    pub async fn approvals_granted(
        &self,
        thread: String,
        member: String,
        run: Option<String>,
    ) -> DbResult<Vec<Approval>> {
        self.read(move |c| {
            let sql = format!(
                "SELECT {COLUMNS} FROM approvals WHERE thread_id = ?1 AND member = ?2 AND state = 'approved' \
                 AND (scope = 'thread' OR (scope = 'run' AND run_id = ?3)) ORDER BY requested_at LIMIT 1000"
            );
            let rows =
                c.prepare_cached(&sql)?.query_map(params![thread, member, run], row)?.collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Cancels every pending approval asked by a run of `node` (which
    /// starts again: its runs died with it); returns them.
    pub async fn cancel_node_approvals(&self, node: String, message: String) -> DbResult<Vec<Approval>> {
        self.write(move |c, out| {
            let ids: Vec<String> = c
                .prepare_cached("SELECT id FROM approvals WHERE node_id = ?1 AND state = 'pending'")?
                .query_map([&node], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            let now = now_ms();
            let mut done = Vec::new();
            for id in ids {
                let d = Decide {
                    id,
                    state: ApprovalState::Cancelled,
                    by: None,
                    scope: None,
                    message: Some(message.clone()),
                };
                if let Decided::Now(a) = decide(c, now, &d, out)? {
                    done.push(a);
                }
            }
            Ok(done)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pending_approvals_are_read_by_their_index_not_among_every_one_ever_asked() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let add = |id: String, state: &str, at: i64| {
            conn.execute(
                "INSERT INTO approvals (id, thread_id, member, node_id, tool, scopes, state, requested_at)
                 VALUES (?1, 't1', 'claude', 'n', '{}', '[]', ?2, ?3)",
                params![id, state, at],
            )
            .unwrap();
        };
        for at in 0..300 {
            add(format!("ap-{at}"), "approved", at);
        }
        add("ap-p1".into(), "pending", 400);
        add("ap-p2".into(), "pending", 401);
        let ids = |sql: &str, thread: Option<&str>| {
            let mut stmt = conn.prepare(sql).unwrap();
            let ids: Vec<String> =
                stmt.query_map(rusqlite::params_from_iter(thread), |r| r.get(0)).unwrap().map(Result::unwrap).collect();
            (ids, stmt.get_status(rusqlite::StatementStatus::VmStep))
        };
        let (pending, steps) = ids(&list_sql(false, false, 50), None);
        assert_eq!(pending, ["ap-p2", "ap-p1"], "newest first");
        assert!(steps < 200, "{steps} virtual machine steps for 2 pending approvals among 302");
        let (of_thread, steps) = ids(&list_sql(false, true, 50), Some("t1"));
        assert_eq!(of_thread, ["ap-p2", "ap-p1"]);
        assert!(steps < 200, "{steps} virtual machine steps for a thread's 2 pending approvals among its 302");
        assert!(ids(&list_sql(false, true, 50), Some("t2")).0.is_empty());
        assert_eq!(ids(&list_sql(true, true, 1000), Some("t1")).0.len(), 302);
        assert_eq!(ids(&list_sql(true, false, 10), None).0.len(), 10, "the limit");
    }
}
