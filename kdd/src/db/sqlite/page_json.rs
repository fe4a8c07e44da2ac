//! The SQLite side of [`crate::db::page_json`]: its SQL and the engine's operations.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use kd_proto::types::{Messages, Purpose, RouteType};
use rusqlite::{Connection, Row, Rows, Statement, params};

use super::pool::ReadPool;
use super::threads;
use crate::db::messages::{Page, ROW_BYTES, parse_kind};
use crate::db::page_json::{RowJson, list_of};
use crate::db::{DbError, DbResult};

/// The query of `page`, its columns in `from_row`'s order.
fn sql(page: &Page) -> String {
    format!(
        "SELECT thread_id, seq, sender, recipients, cc, reply_to, kind, CASE WHEN ?4 THEN body ELSE '' END,
        round, created_at, run, replaces, refs, route, purpose
 FROM messages WHERE thread_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq {}",
        super::limit(page.limit)
    )
}

/// Messages from which a page is written by two threads at once.
const SPLIT_AT: u64 = 2_000;

/// A page read forwards (oldest first), as JSON, on a pooled connection.
/// A long page is written by two threads: a helper from tokio's blocking
/// pool renders the second half on another connection while this thread
/// writes the first. The halves are two reads, each of committed rows, of
/// the messages the thread had when the page was asked for.
pub(super) fn list(pool: &Arc<ReadPool>, thread: &str, page: &Page) -> DbResult<Messages> {
    list_split(pool, thread, page, SPLIT_AT)
}

fn list_split(pool: &Arc<ReadPool>, thread: &str, page: &Page, split_at: u64) -> DbResult<Messages> {
    pool.with(|conn| {
        let last = threads::get(conn, thread)?.last_seq;
        let end = page.before.unwrap_or(u64::MAX).min(last.saturating_add(1));
        let span = end.saturating_sub(page.after.saturating_add(1));
        if span < split_at.max(2) || page.limit.is_some_and(|l| u64::from(l) < span) {
            return write(conn, thread, page, None);
        }
        let mid = page.after + 1 + span / 2;
        let second = SecondHalf::start(pool, thread, Page { after: mid - 1, before: Some(end), ..*page });
        write(conn, thread, &Page { before: Some(mid), ..*page }, Some(&second))
    })
}

/// Rows written as JSON into one buffer, separated by commas, with each
/// row's end in it and its body's length (for the budget): the page takes
/// them with one copy.
#[derive(Default)]
struct Rendered {
    json: String,
    rows: Vec<(usize, usize)>,
}

/// The second half of a long page, rendered by whichever thread claims it
/// first: the helper, or the first half's writer once it is done (so a
/// busy blocking pool costs speed, never a wait).
struct SecondHalf {
    job: Arc<Job>,
    rendered: mpsc::Receiver<DbResult<Rendered>>,
}

struct Job {
    pool: Arc<ReadPool>,
    thread: String,
    page: Page,
    claimed: AtomicBool,
    /// Set when the page no longer needs it.
    abandoned: AtomicBool,
    /// Whether the helper rendered it (the writer did otherwise).
    helped: AtomicBool,
}

impl Job {
    fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }

    fn render(&self) -> DbResult<Rendered> {
        self.pool.with(|c| rendered(c, &self.thread, &self.page, &self.abandoned))
    }
}

impl SecondHalf {
    fn start(pool: &Arc<ReadPool>, thread: &str, page: Page) -> SecondHalf {
        let job = Arc::new(Job {
            pool: pool.clone(),
            thread: thread.to_string(),
            page,
            claimed: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            helped: AtomicBool::new(false),
        });
        let (tx, rendered) = mpsc::sync_channel(1);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let job = job.clone();
            runtime.spawn_blocking(move || {
                if job.claim() {
                    job.helped.store(true, Ordering::Release);
                    // The writer waits on the other end unless it is gone.
                    let _ = tx.send(job.render());
                }
            });
        }
        SecondHalf { job, rendered }
    }

    /// The rendered rows: the helper's, or rendered here if it has not
    /// started.
    fn take(&self) -> DbResult<Rendered> {
        if self.job.claim() {
            return self.job.render();
        }
        self.rendered.recv().unwrap_or_else(|_| Err(DbError::Internal("a page's second half was lost".into())))
    }
}

impl Drop for SecondHalf {
    /// A page the budget ended in its first half (or an error): a helper
    /// that has not started will not, one under way stops.
    fn drop(&mut self) {
        self.job.claim();
        self.job.abandoned.store(true, Ordering::Relaxed);
    }
}

fn write(conn: &Connection, thread: &str, page: &Page, rest: Option<&SecondHalf>) -> DbResult<Messages> {
    let mut stmt = conn.prepare_cached(&sql(page))?;
    let mut rows = query(&mut stmt, thread, page)?;
    let mut budget = Budget { budget: page.budget, bytes: 0, count: 0 };
    let mut out = String::from("[");
    let mut full = false;
    while let Some(row) = rows.next()? {
        let body = row.get_ref(7).and_then(|v| Ok(v.as_str()?))?;
        if !budget.fits(body.len()) {
            full = true;
            break;
        }
        if out.len() > 1 {
            out.push(',');
        }
        RowJson::of(row)?.write(&mut out).map_err(cannot_write)?;
    }
    if let Some(rest) = rest.filter(|_| !full) {
        let rendered = rest.take()?;
        let fit = rendered.rows.iter().take_while(|(_, body)| budget.fits(*body)).count();
        if let Some((end, _)) = fit.checked_sub(1).and_then(|last| rendered.rows.get(last)) {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(rendered.json.get(..*end).unwrap_or_default());
        }
    }
    out.push(']');
    Ok(Messages::written(out))
}

/// The page's byte budget, as [`super::messages::list`] counts it: one
/// row at least, then while the bodies and [`ROW_BYTES`] each fit.
struct Budget {
    budget: usize,
    bytes: usize,
    count: usize,
}

impl Budget {
    fn fits(&mut self, body: usize) -> bool {
        self.bytes = self.bytes.saturating_add(body + ROW_BYTES);
        self.count += 1;
        self.count == 1 || self.bytes <= self.budget
    }
}

fn cannot_write(e: serde_json::Error) -> DbError {
    DbError::Invalid(format!("cannot write the page: {e}"))
}

fn query<'s>(stmt: &'s mut Statement<'_>, thread: &str, page: &Page) -> DbResult<Rows<'s>> {
    let before = page.before.map(|b| b.min(i64::MAX as u64) as i64).unwrap_or(i64::MAX);
    Ok(stmt.query(params![thread, page.after as i64, before, page.bodies])?)
}

/// The rows of `page`, each written as JSON, up to its byte budget (one
/// row at least; rows past it could not join the page), or until the page
/// is `abandoned`.
fn rendered(conn: &Connection, thread: &str, page: &Page, abandoned: &AtomicBool) -> DbResult<Rendered> {
    let mut stmt = conn.prepare_cached(&sql(page))?;
    let mut rows = query(&mut stmt, thread, page)?;
    let mut out = Rendered::default();
    let mut bytes = 0usize;
    while let Some(row) = rows.next()? {
        let json = RowJson::of(row)?;
        bytes = bytes.saturating_add(json.body.len() + ROW_BYTES);
        if (bytes > page.budget && !out.rows.is_empty()) || abandoned.load(Ordering::Relaxed) {
            break;
        }
        if !out.rows.is_empty() {
            out.json.push(',');
        }
        json.write(&mut out.json).map_err(cannot_write)?;
        out.rows.push((out.json.len(), json.body.len()));
    }
    Ok(out)
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

impl super::Sqlite {
    /// A page for `thread.messages`: read forwards, it is written as JSON
    /// from the rows (this module); from the end, it is a list.
    pub async fn messages_page(&self, thread: String, page: Page) -> DbResult<kd_proto::types::Messages> {
        if page.from_end {
            return Ok(self.messages(thread, page).await?.into());
        }
        self.read_pooled(move |pool| list(pool, &thread, &page)).await
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::Message;
    use rusqlite::Connection;
    use serde::Serialize;

    use super::*;
    use crate::db::fixtures::varied_messages;
    use crate::db::messages::Page;
    use crate::db::sqlite::messages;
    use crate::db::sqlite::{DbResult, Outbox, schema};

    fn page(budget: usize) -> Page {
        Page { after: 0, before: None, limit: None, from_end: false, bodies: true, budget }
    }

    /// Thread `t` with the messages of [`varied_messages`].
    fn varied(conn: &Connection, rounds: usize) -> DbResult<()> {
        conn.execute_batch(
            "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t', '/w', 1, 1)",
        )?;
        let mut out = Outbox::default();
        for (i, m) in varied_messages("t", rounds).into_iter().enumerate() {
            messages::append(conn, 1_000 + i as i64, m, &mut out)?;
        }
        Ok(())
    }

    fn open() -> DbResult<(tempfile::TempDir, Connection, Arc<ReadPool>)> {
        let dir = tempfile::tempdir().map_err(|e| DbError::Internal(e.to_string()))?;
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path)?;
        schema::configure(&conn)?;
        schema::migrate(&mut conn, &path)?;
        Ok((dir, conn, Arc::new(ReadPool::new(path))))
    }

    fn json(v: &impl Serialize) -> DbResult<String> {
        serde_json::to_string(v).map_err(|e| DbError::Internal(e.to_string()))
    }

    #[test]
    fn the_written_page_is_the_messages_serde_form_byte_for_byte() -> DbResult<()> {
        let (_dir, conn, pool) = open()?;
        varied(&conn, 1)?;
        for budget in [usize::MAX, 1, 300] {
            let values: Vec<Message> = messages::list(&conn, "t", page(budget))?;
            let written = list(&pool, "t", &page(budget))?;
            assert_eq!(json(&written)?, json(&values)?, "budget {budget}");
        }
        Ok(())
    }

    /// Written in two halves (here without a runtime, so the writer renders
    /// the second half itself), a page is the same page: every budget,
    /// limit and range, cut inside either half.
    #[test]
    fn a_page_written_in_halves_is_the_same_page() -> DbResult<()> {
        let (_dir, conn, pool) = open()?;
        varied(&conn, 25)?;
        let mut compared = 0;
        for budget in [usize::MAX, 1, 2_000, 20_000] {
            for limit in [None, Some(100), Some(1_000)] {
                for (after, before) in [(0, None), (7, Some(90)), (50, None), (99, None)] {
                    let page = Page { after, before, limit, ..page(budget) };
                    let values: Vec<Message> = messages::list(&conn, "t", page)?;
                    let halves = list_split(&pool, "t", &page, 2)?;
                    let whole = list_split(&pool, "t", &page, u64::MAX)?;
                    assert_eq!(json(&halves)?, json(&values)?, "{page:?}");
                    assert_eq!(json(&whole)?, json(&values)?, "{page:?}");
                    compared += values.len();
                }
            }
        }
        assert!(compared > 1_000, "the pages hold messages: {compared}");
        Ok(())
    }

    /// Under tokio, a helper from the blocking pool renders the second
    /// half, and the page is the same.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_second_half_is_rendered_by_a_helper() -> DbResult<()> {
        let (_dir, conn, pool) = open()?;
        varied(&conn, 10)?;
        let all = page(usize::MAX);
        let expected = json(&messages::list(&conn, "t", all)?)?;
        let second = SecondHalf::start(&pool, "t", Page { after: 20, ..all });
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while !second.job.claimed.load(Ordering::Acquire) {
                tokio::task::yield_now().await;
            }
        })
        .await
        .map_err(|_| DbError::Internal("the helper never started".into()))?;
        let rows = tokio::task::block_in_place(|| second.take())?;
        assert!(second.job.helped.load(Ordering::Acquire), "rendered by the helper");
        assert_eq!(rows.rows.len(), 20);
        let pool2 = pool.clone();
        let page = tokio::task::spawn_blocking(move || list_split(&pool2, "t", &all, 2))
            .await
            .map_err(|e| DbError::Internal(e.to_string()))??;
        assert_eq!(json(&page)?, expected);
        Ok(())
    }

    /// The second half holds no more than the page's budget (one row at
    /// least), however long the thread: rows past it could not be sent.
    #[test]
    fn the_second_half_is_rendered_within_the_budget() -> DbResult<()> {
        let (_dir, conn, _pool) = open()?;
        varied(&conn, 100)?;
        let rows = |budget| rendered(&conn, "t", &Page { after: 10, ..page(budget) }, &AtomicBool::new(false));
        assert_eq!(rows(usize::MAX)?.rows.len(), 390);
        assert_eq!(rows(1)?.rows.len(), 1);
        let some = rows(10 * ROW_BYTES)?.rows;
        assert!(!some.is_empty() && some.iter().map(|(_, b)| b + ROW_BYTES).sum::<usize>() <= 10 * ROW_BYTES);
        assert!(some.len() < 10, "{}", some.len());
        let abandoned = rendered(&conn, "t", &Page { after: 10, ..page(usize::MAX) }, &AtomicBool::new(true))?;
        assert!(abandoned.rows.is_empty(), "a page that ended without it stops the helper");
        Ok(())
    }

    #[test]
    fn an_unknown_thread_is_not_found() -> DbResult<()> {
        let (_dir, _conn, pool) = open()?;
        assert!(matches!(list(&pool, "nope", &page(usize::MAX)), Err(DbError::NotFound(_))));
        Ok(())
    }
}
