//! `thread.messages` written as JSON straight from the rows (PostgreSQL;
//! mirrors `db/page_json.rs`): no [`kd_proto::types::Message`] is built.
//! Each row is written in `Message`'s serde form by the same [`RowJson`] as
//! SQLite's, into one buffer, as it arrives from the server (the network overlaps the
//! rendering, so no second reader is needed), until the page's byte budget.

use deadpool_postgres::GenericClient;
use futures_util::TryStreamExt;
use kd_proto::types::{Messages, Purpose, RouteType};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::{Pg, threads};
use crate::db::messages::{Page, ROW_BYTES, parse_kind};
use crate::db::page_json::{RowJson, list_of};
use crate::db::{DbError, DbResult};

/// The columns, in [`row_json`]'s order.
const SQL: &str = "SELECT thread_id, seq, sender, recipients, cc, reply_to, kind, CASE WHEN $5 THEN body ELSE '' END,
        round, created_at, run, replaces, refs, route, purpose
 FROM messages WHERE thread_id = $1 AND seq > $2 AND seq < $3 ORDER BY seq LIMIT $4";

/// A page read forwards (oldest first), as JSON.
pub(crate) async fn list(c: &impl GenericClient, thread: &str, page: &Page) -> DbResult<Messages> {
    threads::get(c, thread).await?;
    let stmt = c.prepare_cached(SQL).await?;
    let limit = page.limit.map(i64::from);
    let after = page.after.min(i64::MAX as u64) as i64;
    let before = page.before.map(|b| b.min(i64::MAX as u64) as i64).unwrap_or(i64::MAX);
    let params: [&(dyn ToSql + Sync); 5] = [&thread, &after, &before, &limit, &page.bodies];
    let mut rows = std::pin::pin!(c.query_raw(&stmt, params).await?);
    let mut out = String::from("[");
    let mut bytes = 0usize;
    let mut count = 0usize;
    while let Some(row) = rows.try_next().await? {
        let json = row_json(&row)?;
        // One row at least, then while the page's budget holds them.
        bytes = bytes.saturating_add(json.body.len() + ROW_BYTES);
        if bytes > page.budget && count > 0 {
            break;
        }
        if count > 0 {
            out.push(',');
        }
        json.write(&mut out).map_err(cannot_write)?;
        count += 1;
    }
    out.push(']');
    Ok(Messages::written(out))
}

fn cannot_write(e: serde_json::Error) -> DbError {
    DbError::Invalid(format!("cannot write the page: {e}"))
}

/// One row in `Message`'s serde form, borrowed from the row.
fn row_json(r: &Row) -> DbResult<RowJson<'_>> {
    let run: Option<&str> = r.try_get(10)?;
    Ok(RowJson {
        thread: r.try_get(0)?,
        seq: r.try_get::<_, i64>(1)? as u64,
        from: r.try_get(2)?,
        to: list_of(r.try_get(3)?),
        cc: list_of(r.try_get(4)?),
        reply_to: r.try_get::<_, Option<i64>>(5)?.map(|v| v as u64),
        kind: parse_kind(r.try_get(6)?),
        body: r.try_get(7)?,
        round: r.try_get::<_, Option<i64>>(8)?.map(|v| v as u32),
        created_at_ms: r.try_get(9)?,
        // A run that does not read as JSON is left out, as when read into
        // a `Message`.
        run: run.and_then(|s| serde_json::from_str(s).ok()),
        replaces: r.try_get::<_, Option<i64>>(11)?.map(|v| v as u64),
        refs: list_of(r.try_get(12)?),
        route: r.try_get::<_, Option<&str>>(13)?.and_then(RouteType::parse),
        purpose: r.try_get::<_, Option<&str>>(14)?.and_then(Purpose::parse),
    })
}

impl Pg {
    /// A page for `thread.messages`: read forwards, it is written as JSON
    /// from the rows (this module); from the end, it is a list.
    pub async fn messages_page(&self, thread: String, page: Page) -> DbResult<Messages> {
        if page.from_end {
            return Ok(self.messages(thread, page).await?.into());
        }
        list(&self.conn().await?, &thread, &page).await
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::Message;
    use serde::Serialize;

    use super::*;
    use crate::db::fixtures::varied_messages;
    use crate::db::pg::testing;
    use crate::db::threads::NewThread;

    fn page(budget: usize) -> Page {
        Page { after: 0, before: None, limit: None, from_end: false, bodies: true, budget }
    }

    /// A thread with the messages of [`varied_messages`]; its id.
    async fn varied(pg: &Pg, rounds: usize) -> String {
        let t = pg.create_thread(NewThread { members: vec![], ..NewThread::in_workspace("/w") }).await.unwrap();
        for m in varied_messages(&t.id, rounds) {
            pg.append_message(m).await.unwrap();
        }
        t.id
    }

    fn json(v: &impl Serialize) -> String {
        serde_json::to_string(v).unwrap()
    }

    #[tokio::test]
    async fn the_written_page_is_the_messages_serde_form_byte_for_byte() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = varied(&pg, 3).await;
        for budget in [usize::MAX, 1, 300, 2_000] {
            for limit in [None, Some(5)] {
                for (after, before) in [(0, None), (3, Some(9)), (11, None), (12, None)] {
                    let page = Page { after, before, limit, ..page(budget) };
                    let values: Vec<Message> = pg.messages(t.clone(), page).await.unwrap();
                    let written = pg.messages_page(t.clone(), page).await.unwrap();
                    assert_eq!(json(&written), json(&values), "{page:?}");
                }
            }
        }
        let outline = Page { bodies: false, ..page(usize::MAX) };
        let values: Vec<Message> = pg.messages(t.clone(), outline).await.unwrap();
        assert_eq!(json(&pg.messages_page(t.clone(), outline).await.unwrap()), json(&values));
        let from_end = Page { from_end: true, limit: Some(3), ..page(usize::MAX) };
        let values: Vec<Message> = pg.messages(t.clone(), from_end).await.unwrap();
        assert_eq!(json(&pg.messages_page(t, from_end).await.unwrap()), json(&values));
    }

    #[tokio::test]
    async fn an_unknown_thread_is_not_found() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        assert!(matches!(pg.messages_page("nope".into(), page(usize::MAX)).await, Err(DbError::NotFound(_))));
    }
}
