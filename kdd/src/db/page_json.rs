//! `thread.messages` written as JSON straight from the rows: no
//! [`Message`] is built, and the page is serialised once, in the reader
//! thread, instead of once into values and again by the server. The shape
//! is `Message`'s serde form, field for field (a test compares the two).

use std::borrow::Cow;
use std::cell::RefCell;

use kd_proto::types::{MessageKind, Messages, Purpose, RouteType, RunMeta};
use rusqlite::{Connection, Row, Rows, params};
use serde::ser::{Error as _, SerializeSeq};
use serde::{Serialize, Serializer};

use super::messages::{Page, ROW_BYTES, parse_kind};
use super::{DbError, DbResult, threads};

/// The columns, in `from_row`'s order.
const SQL: &str = "SELECT thread_id, seq, sender, recipients, cc, reply_to, kind, CASE WHEN ?5 THEN body ELSE '' END,
        round, created_at, run, replaces, refs, route, purpose
 FROM messages WHERE thread_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq LIMIT ?4";

/// A page read forwards (oldest first), as JSON.
pub fn list(conn: &Connection, thread: &str, page: &Page) -> DbResult<Messages> {
    threads::get(conn, thread)?;
    let mut stmt = conn.prepare_cached(SQL)?;
    let limit = page.limit.map(i64::from).unwrap_or(-1);
    let before = page.before.map(|b| b.min(i64::MAX as u64) as i64).unwrap_or(i64::MAX);
    let rows = stmt.query(params![thread, page.after as i64, before, limit, page.bodies])?;
    let all = AllRows { rows: RefCell::new(rows), budget: page.budget };
    // Written without a second pass: `to_raw_value` trusts serde_json's own
    // output, where `RawValue::from_string` would parse it again.
    let json =
        serde_json::value::to_raw_value(&all).map_err(|e| DbError::Invalid(format!("cannot write the page: {e}")))?;
    Ok(Messages::from_json(json))
}

/// The rows of the query as a JSON array, up to the byte budget (one row
/// at least, as [`super::messages::list`] counts it).
struct AllRows<'s> {
    rows: RefCell<Rows<'s>>,
    budget: usize,
}

impl Serialize for AllRows<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut rows = self.rows.try_borrow_mut().map_err(S::Error::custom)?;
        let mut seq = s.serialize_seq(None)?;
        let mut bytes = 0usize;
        let mut first = true;
        while let Some(row) = rows.next().map_err(S::Error::custom)? {
            let body = row.get_ref(7).and_then(|v| Ok(v.as_str()?)).map_err(S::Error::custom)?;
            bytes = bytes.saturating_add(body.len() + ROW_BYTES);
            if bytes > self.budget && !first {
                break;
            }
            first = false;
            seq.serialize_element(&RowJson::of(row).map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

/// A list column (`["all"]`), read without copying what needs no unescaping.
type List<'a> = Vec<Cow<'a, str>>;

fn list_of(text: &str) -> List<'_> {
    serde_json::from_str(text).unwrap_or_default()
}

/// One row in `Message`'s serde form, borrowed from the row.
#[derive(Serialize)]
struct RowJson<'a> {
    thread: &'a str,
    seq: u64,
    from: &'a str,
    to: List<'a>,
    cc: List<'a>,
    reply_to: Option<u64>,
    kind: MessageKind,
    body: &'a str,
    round: Option<u32>,
    created_at_ms: i64,
    run: Option<RunMeta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replaces: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    refs: List<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<RouteType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    purpose: Option<Purpose>,
}

impl<'a> RowJson<'a> {
    fn of(r: &'a Row<'_>) -> rusqlite::Result<RowJson<'a>> {
        let text = |i: usize| -> rusqlite::Result<&'a str> { Ok(r.get_ref(i)?.as_str()?) };
        let opt_text = |i: usize| -> rusqlite::Result<Option<&'a str>> { Ok(r.get_ref(i)?.as_str_or_null()?) };
        Ok(RowJson {
            thread: text(0)?,
            seq: r.get::<_, i64>(1)? as u64,
            from: text(2)?,
            to: list_of(text(3)?),
            cc: list_of(text(4)?),
            reply_to: r.get::<_, Option<i64>>(5)?.map(|v| v as u64),
            kind: parse_kind(text(6)?),
            body: text(7)?,
            round: r.get(8)?,
            created_at_ms: r.get(9)?,
            // A run that does not read as JSON is left out, as when read
            // into a `Message`.
            run: opt_text(10)?.and_then(|s| serde_json::from_str(s).ok()),
            replaces: r.get::<_, Option<i64>>(11)?.map(|v| v as u64),
            refs: list_of(text(12)?),
            route: opt_text(13)?.and_then(RouteType::parse),
            purpose: opt_text(14)?.and_then(Purpose::parse),
        })
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::{Message, RunMeta};
    use rusqlite::Connection;

    use super::super::messages::{self, NewMessage, Page};
    use super::super::{DbResult, Outbox, schema};
    use super::*;

    fn page(budget: usize) -> Page {
        Page { after: 0, before: None, limit: None, from_end: false, bodies: true, budget }
    }

    /// Messages of every shape: escapes and controls in bodies and names,
    /// runs, refs, routes, purposes, replies, retries, cc.
    fn varied(conn: &Connection) -> DbResult<()> {
        conn.execute_batch(
            "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t', '/w', 1, 1)",
        )?;
        let mut out = Outbox::default();
        let bodies = ["plain", "quote \" backslash \\ tab \t nl \n", "\u{1b}[31mred\u{7} é 漢 🦀", ""];
        for (i, body) in bodies.iter().enumerate() {
            let mut m = NewMessage::new("t", "king", vec!["all".into()], MessageKind::King, body.to_string());
            if i % 2 == 1 {
                m.from = "claude".into();
                m.to = vec!["king".into(), "co\"dex".into()];
                m.cc = vec!["gemini".into()];
                m.kind = MessageKind::Agent;
                m.reply_to = Some(1);
                m.round = Some(2);
                m.run = Some(RunMeta {
                    cost_usd: Some(0.25),
                    usage: Some(serde_json::json!({"input_tokens": 3})),
                    run_id: Some("r1".into()),
                    ..Default::default()
                });
                m.refs = vec!["src/a.rs".into()];
                m.route = Some(RouteType::Multicast);
                m.purpose = Some(Purpose::Ballot);
                m.replaces = Some(1);
            }
            messages::append(conn, 1_000 + i as i64, m, &mut out)?;
        }
        Ok(())
    }

    fn open() -> DbResult<(tempfile::TempDir, Connection)> {
        let dir = tempfile::tempdir().map_err(|e| DbError::Internal(e.to_string()))?;
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path)?;
        schema::configure(&conn)?;
        schema::migrate(&mut conn, &path)?;
        Ok((dir, conn))
    }

    #[test]
    fn the_written_page_is_the_messages_serde_form_byte_for_byte() -> DbResult<()> {
        let (_dir, conn) = open()?;
        varied(&conn)?;
        for budget in [usize::MAX, 1, 300] {
            let values: Vec<Message> = messages::list(&conn, "t", page(budget))?;
            let written = list(&conn, "t", &page(budget))?;
            assert_eq!(
                serde_json::to_string(&written).map_err(|e| DbError::Internal(e.to_string()))?,
                serde_json::to_string(&values).map_err(|e| DbError::Internal(e.to_string()))?,
                "budget {budget}"
            );
        }
        Ok(())
    }

    #[test]
    fn an_unknown_thread_is_not_found() -> DbResult<()> {
        let (_dir, conn) = open()?;
        assert!(matches!(list(&conn, "nope", &page(usize::MAX)), Err(DbError::NotFound(_))));
        Ok(())
    }
}
