//! The event log (F-R6), written in the same transaction as the change it
//! records (PostgreSQL; mirrors `db/events.rs`).

use deadpool_postgres::GenericClient;
use kd_proto::types::Event;
use tokio_postgres::Row;

use super::Pg;
use crate::db::events::{EventFilter, NewEvent, Record};
use crate::db::{DbResult, Outbox, json_list, now_ms};

pub(crate) async fn record(c: &impl GenericClient, at: i64, e: &NewEvent<'_>) -> DbResult<()> {
    let stmt = c
        .prepare_cached(
            "INSERT INTO conversation_events
                 (at, kind, thread_id, session_id, agent, sender, recipients, correlation_id, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .await?;
    c.execute(
        &stmt,
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

/// A [`Record`], recorded.
pub(crate) async fn write(c: &impl GenericClient, at: i64, r: &Record) -> DbResult<()> {
    record(c, at, &r.event()).await
}

/// The events that pass the filter, oldest first (see `db::events::list`):
/// the first `limit` after `since_id`, or without it the newest `limit`
/// before `before_id`; a `message` event's body is read from its message.
pub(crate) async fn list(c: &impl GenericClient, f: &EventFilter) -> DbResult<Vec<Event>> {
    const SELECT: &str = "SELECT e.id, e.at, e.kind, e.thread_id, e.session_id, e.agent, e.sender, e.recipients,
                e.correlation_id, e.data, m.body
         FROM conversation_events e
         LEFT JOIN messages m
           ON e.kind = 'message' AND m.thread_id = e.thread_id
          AND m.seq = CASE WHEN e.kind = 'message' THEN (e.data::jsonb ->> 'seq')::bigint END
         WHERE e.id > $1 AND e.id < $8
           AND ($2::text IS NULL OR e.thread_id = $2)
           AND ($3::text IS NULL OR e.kind = $3 OR ($6::text IS NOT NULL AND e.kind >= $6 AND e.kind < $7::text))
           AND ($4::text IS NULL OR e.agent = $4 OR e.sender = $4
                OR EXISTS (SELECT 1 FROM json_array_elements_text(e.recipients::json) r WHERE r = $4))";
    let newest = f.since_id.is_none();
    let stmt = match newest {
        true => c.prepare_cached(&format!("{SELECT} ORDER BY e.id DESC LIMIT $5")).await?,
        false => c.prepare_cached(&format!("{SELECT} ORDER BY e.id LIMIT $5")).await?,
    };
    // `race.*` is every kind of the family: the range [`race.`, `race/`).
    let family = f.kind.as_deref().and_then(|k| k.strip_suffix('*')).filter(|p| p.ends_with('.'));
    let upper = family.map(|p| format!("{}/", &p[..p.len() - 1]));
    let before = f.before_id.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
    let since = f.since_id.unwrap_or(0).min(i64::MAX as u64) as i64;
    let rows =
        c.query(&stmt, &[&since, &f.thread, &f.kind, &f.agent, &i64::from(f.limit), &family, &upper, &before]).await?;
    let mut events = rows.iter().map(from_row).collect::<DbResult<Vec<_>>>()?;
    if newest {
        events.reverse();
    }
    Ok(events)
}

/// The newest event id (0 when the log is empty).
#[cfg(test)]
pub(crate) async fn last_id(c: &impl GenericClient) -> DbResult<u64> {
    let id: Option<i64> = c.query_one("SELECT max(id) FROM conversation_events", &[]).await?.try_get(0)?;
    Ok(id.unwrap_or(0) as u64)
}

fn from_row(r: &Row) -> DbResult<Event> {
    crate::db::events::read(r)
}

impl Pg {
    pub async fn events(&self, filter: EventFilter) -> DbResult<Vec<Event>> {
        list(&self.conn().await?, &filter).await
    }

    /// Records events that change nothing else (decisions, warnings).
    pub async fn record(&self, events: Vec<Record>) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let now = now_ms();
        for e in &events {
            write(&tx, now, e).await?;
        }
        self.commit(tx, Outbox::default()).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::db::pg::testing;

    fn rec(kind: &str, thread: Option<&str>, agent: Option<&str>, to: &[&str]) -> Record {
        Record {
            kind: kind.into(),
            thread: thread.map(Into::into),
            agent: agent.map(Into::into),
            to: to.iter().map(|s| s.to_string()).collect(),
            data: json!({"n": kind}),
            ..Default::default()
        }
    }

    fn kinds(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    #[tokio::test]
    async fn events_filter_by_thread_kind_family_and_agent_and_page_from_either_end() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        pg.record(vec![
            rec("race.detected", Some("t"), Some("claude"), &[]),
            rec("race.resume_conflict", Some("u"), None, &["codex"]),
            rec("racer", Some("t"), None, &[]),
            rec("lock.acquire", None, None, &[]),
            rec("race.x", Some("t"), None, &["claude", "gemini"]),
        ])
        .await
        .unwrap();
        let all = |f: EventFilter| {
            let pg = &pg;
            async move { pg.events(EventFilter { limit: 100, ..f }).await.unwrap() }
        };
        let every = all(EventFilter::default()).await;
        assert_eq!(kinds(&every), ["race.detected", "race.resume_conflict", "racer", "lock.acquire", "race.x"]);
        assert_eq!(every[0].data, json!({"n": "race.detected"}));
        assert_eq!(
            kinds(&all(EventFilter { kind: Some("race.*".into()), ..Default::default() }).await),
            ["race.detected", "race.resume_conflict", "race.x"]
        );
        assert_eq!(kinds(&all(EventFilter { kind: Some("racer".into()), ..Default::default() }).await), ["racer"]);
        assert_eq!(
            kinds(&all(EventFilter { thread: Some("t".into()), ..Default::default() }).await),
            ["race.detected", "racer", "race.x"]
        );
        assert_eq!(
            kinds(&all(EventFilter { agent: Some("claude".into()), ..Default::default() }).await),
            ["race.detected", "race.x"]
        );
        // Newest `limit`, oldest first; then the first after an id; before an id.
        let newest = pg.events(EventFilter { limit: 2, ..Default::default() }).await.unwrap();
        assert_eq!(kinds(&newest), ["lock.acquire", "race.x"]);
        let after =
            pg.events(EventFilter { since_id: Some(every[1].id), limit: 2, ..Default::default() }).await.unwrap();
        assert_eq!(kinds(&after), ["racer", "lock.acquire"]);
        let before =
            pg.events(EventFilter { before_id: Some(every[3].id), limit: 2, ..Default::default() }).await.unwrap();
        assert_eq!(kinds(&before), ["race.resume_conflict", "racer"]);
        assert_eq!(last_id(&pg.conn().await.unwrap()).await.unwrap(), every[4].id);
    }
}
