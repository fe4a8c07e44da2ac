//! The SQLite side of [`crate::db::events`]: its SQL and the engine's operations.

use kd_proto::types::Event;
use rusqlite::{Connection, Row, params};

use crate::db::events::{EventFilter, NewEvent, Record};
use crate::db::{DbResult, json_list};

pub fn record(conn: &Connection, at: i64, e: &NewEvent<'_>) -> DbResult<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO conversation_events
             (at, kind, thread_id, session_id, agent, sender, recipients, correlation_id, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    stmt.execute(params![
        at,
        e.kind,
        e.thread,
        e.session,
        e.agent,
        e.from,
        json_list(e.to),
        e.correlation_id,
        e.data.to_string()
    ])?;
    Ok(())
}

/// The events that pass the filter, oldest first: the first `limit` after
/// `since_id`, or without it the newest `limit` (before `before_id`, when
/// given — `tail`, paged back by the primary key). A `message` event
/// stores no body (the message has it, once); its `data.body` is read from
/// the message here, so that the log alone still rebuilds a thread.
pub fn list(conn: &Connection, f: &EventFilter) -> DbResult<Vec<Event>> {
    const SELECT: &str = "SELECT e.id, e.at, e.kind, e.thread_id, e.session_id, e.agent, e.sender, e.recipients,
                e.correlation_id, e.data, m.body
         FROM conversation_events e
         LEFT JOIN messages m
           ON e.kind = 'message' AND m.thread_id = e.thread_id AND m.seq = json_extract(e.data, '$.seq')
         WHERE e.id > ?1 AND e.id < ?7
           AND (?2 IS NULL OR e.thread_id = ?2)
           AND (?3 IS NULL OR e.kind = ?3 OR (?5 IS NOT NULL AND e.kind >= ?5 AND e.kind < ?6))
           AND (?4 IS NULL OR e.agent = ?4 OR e.sender = ?4
                OR EXISTS (SELECT 1 FROM json_each(e.recipients) WHERE value = ?4))";
    let newest = f.since_id.is_none();
    let mut stmt = match newest {
        true => conn.prepare_cached(&format!("{SELECT} ORDER BY e.id DESC {}", super::limit(Some(f.limit))))?,
        false => conn.prepare_cached(&format!("{SELECT} ORDER BY e.id {}", super::limit(Some(f.limit))))?,
    };
    // `race.*` is every kind of the family: the range [`race.`, `race/`).
    let family = f.kind.as_deref().and_then(|k| k.strip_suffix('*')).filter(|p| p.ends_with('.'));
    let upper = family.map(|p| format!("{}/", &p[..p.len() - 1]));
    let before = f.before_id.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
    let rows = stmt.query_map(
        params![f.since_id.unwrap_or(0) as i64, f.thread, f.kind, f.agent, family, upper, before],
        from_row,
    )?;
    let mut events: Vec<Event> = rows.collect::<Result<_, _>>()?;
    if newest {
        events.reverse();
    }
    Ok(events)
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    crate::db::events::read(r)
}

impl super::Sqlite {
    pub async fn events(&self, filter: EventFilter) -> DbResult<Vec<Event>> {
        self.read(move |c| list(c, &filter)).await
    }
}

/// A [`Record`], recorded.
pub fn write(conn: &Connection, at: i64, r: &Record) -> DbResult<()> {
    record(conn, at, &r.event())
}

impl super::Sqlite {
    /// Records events that change nothing else (decisions, warnings).
    pub async fn record(&self, events: Vec<Record>) -> DbResult<()> {
        self.write(move |c, _| {
            let now = crate::db::now_ms();
            events.iter().try_for_each(|e| write(c, now, e))
        })
        .await
    }
}
