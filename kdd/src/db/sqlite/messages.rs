//! The SQLite side of [`crate::db::messages`]: its SQL and the engine's operations.

use kd_proto::types::{Message, Purpose, RouteType, ThreadEvent, ThreadStatus};
use rusqlite::{Connection, Row, params};

use super::{events, lifecycle, locks, threads};
use crate::db::messages::{NewMessage, Page};
use crate::db::{DbError, DbResult, Outbox, json_list};

/// Appends a message with the thread's next seq, records it in the event
/// log and queues it for the thread's subscribers. A message revives an
/// idle thread; an archived one refuses it (but for the end of a run that
/// was in flight). The King's first message names
/// a thread that has no title.
pub fn append(conn: &Connection, now: i64, m: NewMessage, out: &mut Outbox) -> DbResult<Message> {
    if let Some(fence) = &m.fence {
        locks::check_fence(conn, now, fence)?;
    }
    // The next seq, taken unless the thread is archived (the end of a run
    // already in flight is kept; nothing new is). Two statements, not
    // UPDATE … RETURNING: RETURNING buffers its rows in an ephemeral table,
    // which costs more than the second lookup.
    let updated = conn
        .prepare_cached(
            "UPDATE threads SET last_seq = last_seq + 1, last_activity_at = ?2
             WHERE id = ?1 AND (status != 'archived' OR ?3)",
        )?
        .execute(params![m.thread, now, m.run.is_some()])?;
    if updated == 0 {
        return Err(match threads::exists(conn, &m.thread)? {
            true => DbError::Archived(m.thread.clone()),
            false => DbError::NotFound(format!("thread {}", m.thread)),
        });
    }
    let (seq, status, untitled): (i64, String, bool) = conn
        .prepare_cached("SELECT last_seq, status, title IS NULL FROM threads WHERE id = ?1")?
        .query_row([&m.thread], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    if status == "idle" {
        lifecycle::set_status(conn, now, &m.thread, ThreadStatus::Active, "message", None, out)?;
    }
    if untitled && let Some(title) = m.title() {
        conn.prepare_cached("UPDATE threads SET title = ?2 WHERE id = ?1")?.execute(params![m.thread, title])?;
    }
    let seq = seq as u64;
    append_as(conn, now, seq, m, out)
}

/// Inserts `m` with a seq already taken from the thread.
fn append_as(conn: &Connection, now: i64, seq: u64, m: NewMessage, out: &mut Outbox) -> DbResult<Message> {
    m.check_reply(seq)?;
    let run = m.run.as_ref().map(|r| serde_json::to_string(r).unwrap_or_default());
    conn.prepare_cached(
        "INSERT INTO messages
             (thread_id, seq, sender, recipients, cc, reply_to, kind, body, round, created_at, run, replaces, refs, route, purpose)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )?
    .execute(params![
        m.thread,
        seq as i64,
        m.from,
        json_list(&m.to),
        json_list(&m.cc),
        m.reply_to.map(|r| r as i64),
        m.kind.as_str(),
        m.body,
        m.round,
        now,
        run,
        m.replaces.map(|r| r as i64),
        json_list(&m.refs),
        m.route.map(RouteType::as_str),
        m.purpose.map(Purpose::as_str)
    ])?;
    events::record(conn, now, &m.event(seq))?;
    let message = m.into_message(seq, now);
    out.publish(&message.thread, ThreadEvent::Message { message: Box::new(message.clone()) });
    Ok(message)
}

/// Appends messages with their own times (an import); returns how many.
pub fn import(conn: &Connection, thread: &str, messages: Vec<(i64, NewMessage)>, out: &mut Outbox) -> DbResult<usize> {
    let n = messages.len();
    let mut last_at = 0;
    for (at, m) in messages {
        conn.prepare_cached("UPDATE threads SET last_seq = last_seq + 1 WHERE id = ?1")?.execute([thread])?;
        let seq: i64 =
            conn.prepare_cached("SELECT last_seq FROM threads WHERE id = ?1")?.query_row([thread], |r| r.get(0))?;
        append_as(conn, at, seq as u64, m, out)?;
        last_at = last_at.max(at);
    }
    if n > 0 {
        conn.prepare_cached("UPDATE threads SET last_activity_at = max(last_activity_at, ?2) WHERE id = ?1")?
            .execute(params![thread, last_at])?;
    }
    Ok(n)
}

/// Message `seq` of `thread`, if there is one.
pub fn one(conn: &Connection, thread: &str, seq: u64) -> DbResult<Option<Message>> {
    Ok(list(conn, thread, Page::one(seq))?.pop())
}

/// A page of a thread's messages, in seq order.
pub fn list(conn: &Connection, thread: &str, page: Page) -> DbResult<Vec<Message>> {
    let mut stmt = conn.prepare_cached(&list_sql(&page))?;
    let before = page.before.map(|b| b.min(i64::MAX as u64) as i64).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![thread, page.after as i64, before, page.bodies])?;
    let mut out = page.filling();
    while let Some(row) = rows.next()? {
        if !out.keep(from_row(row)?) {
            break;
        }
    }
    let out = out.done();
    // A thread that has messages is there (they go with it); an empty
    // page is of a thread, or of none.
    if out.is_empty() {
        threads::get(conn, thread)?;
    }
    Ok(out)
}

/// [`list`]'s query of `page`.
fn list_sql(page: &Page) -> String {
    let order = if page.from_end { "DESC" } else { "" };
    format!(
        "SELECT thread_id, seq, sender, recipients, cc, reply_to, kind, CASE WHEN ?4 THEN body ELSE '' END,
                round, created_at, run, replaces, refs, route, purpose
         FROM messages WHERE thread_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq {order} {}",
        super::limit(page.limit)
    )
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<Message> {
    crate::db::messages::read(r)
}

impl super::Sqlite {
    pub async fn append_message(&self, m: NewMessage) -> DbResult<Message> {
        self.write(move |c, out| append(c, crate::db::now_ms(), m, out)).await
    }

    /// A [`Page::is_small`] page is read on the caller's thread.
    pub async fn messages(&self, thread: String, page: Page) -> DbResult<Vec<Message>> {
        if page.is_small() {
            return self.read_now(|c| list(c, &thread, page));
        }
        self.read(move |c| list(c, &thread, page)).await
    }

    /// One message of a thread.
    pub async fn message(&self, thread: String, seq: u64) -> DbResult<Message> {
        self.read(move |c| {
            one(c, &thread, seq)?.ok_or_else(|| DbError::NotFound(format!("message {seq} of thread {thread}")))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement whose LIMIT is a bound parameter is prepared again at
    /// every run (SQLite plans with the value): a thread read again and
    /// again — each run's history, each page — reuses its statement.
    #[test]
    fn reading_a_thread_again_does_not_prepare_its_statement_again() {
        let conn = super::super::schema::in_memory_with_thread("t1");
        let limited = Page { limit: Some(10), ..Page::all_after(0) };
        let pages = [Page::all_after(0), limited, Page { from_end: true, ..limited }];
        for after in 0..3 {
            for page in pages {
                list(&conn, "t1", Page { after, ..page }).unwrap();
            }
        }
        for page in pages {
            let stmt = conn.prepare_cached(&list_sql(&page)).unwrap();
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::Run), 3, "the cached statement, run three times");
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0, "{}", list_sql(&page));
        }
    }

    /// The thread is looked up only for an empty page (issue 31, item
    /// 17): a page of a thread that is not there is still an error, an
    /// empty page of one that is, no error.
    #[test]
    fn a_page_of_a_thread_not_there_is_not_found_and_an_empty_one_is_empty() {
        let conn = super::super::schema::in_memory_with_thread("t1");
        assert!(list(&conn, "t1", Page::all_after(0)).unwrap().is_empty());
        assert!(matches!(list(&conn, "t2", Page::all_after(0)), Err(DbError::NotFound(_))));
        let mut out = Outbox::default();
        append(
            &conn,
            1,
            NewMessage::new("t1", "king", vec![], kd_proto::types::MessageKind::King, "hi".into()),
            &mut out,
        )
        .unwrap();
        assert_eq!(list(&conn, "t1", Page::all_after(0)).unwrap().len(), 1);
        assert!(list(&conn, "t1", Page::all_after(1)).unwrap().is_empty(), "after the last");
        assert!(matches!(list(&conn, "t2", Page::all_after(1)), Err(DbError::NotFound(_))));
    }
}
