//! The SQLite side of [`crate::db::search`]: its SQL and the engine's operations.

use kd_proto::types::SearchHit;
use rusqlite::{Connection, params};

use super::threads;
use crate::db::search::{
    DEFAULT_HITS, Filter, INDEX_BATCH, INDEXED_CHARS, MAX_HITS, THREAD_HITS, no_index_has, unreadable,
};
use crate::db::{DbError, DbResult};

/// Indexes up to [`INDEX_BATCH`] messages written since the last run;
/// returns how many (fewer than the batch: nothing is left).
pub fn index_pending(conn: &Connection) -> DbResult<u32> {
    let done: i64 =
        conn.prepare_cached("SELECT value FROM counters WHERE name = 'search_indexed'")?.query_row([], |r| r.get(0))?;
    let last: Option<i64> = conn
        .prepare_cached(&format!(
            "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ?1 ORDER BY id LIMIT {INDEX_BATCH})"
        ))?
        .query_row(params![done], |r| r.get(0))?;
    let Some(last) = last else { return Ok(0) };
    let n = conn
        .prepare_cached(&format!(
            "INSERT INTO search_messages (rowid, body)
             SELECT id, substr(body, 1, {INDEXED_CHARS}) FROM messages WHERE id > ?1 AND id <= ?2"
        ))?
        .execute(params![done, last])?;
    conn.prepare_cached("UPDATE counters SET value = ?1 WHERE name = 'search_indexed'")?.execute([last])?;
    Ok(n as u32)
}

/// Searches both indexes: threads by title and summary (without a `from`
/// or `since` filter, which only messages have), then messages. A column
/// filter (`body:`, `title:`, `summary:`) names a column of one index: the
/// other has no such column and gives no hits, and only a query that no
/// index searched can read is refused.
pub fn query(conn: &Connection, q: &str, f: &Filter) -> DbResult<Vec<SearchHit>> {
    if let Some(t) = &f.thread {
        threads::get(conn, t)?;
    }
    let limit = f.limit.unwrap_or(DEFAULT_HITS).clamp(1, MAX_HITS);
    let with_threads = f.from.is_none() && f.since_ms.is_none();
    let mut hits = Vec::new();
    let mut not_here = Vec::new();
    if with_threads {
        match searched(thread_hits(conn, q, f, THREAD_HITS.min(limit)))? {
            Searched::Hits(h) => hits = h,
            Searched::NotHere(why) => not_here.push(why),
        }
    }
    let rest = limit - hits.len() as u32;
    match searched(message_hits(conn, q, f, rest))? {
        Searched::Hits(h) => hits.extend(h),
        Searched::NotHere(why) => not_here.push(why),
    }
    if not_here.len() == 1 + usize::from(with_threads) {
        return Err(no_index_has(&not_here[0], with_threads));
    }
    Ok(hits)
}

/// What one index made of a query.
enum Searched {
    Hits(Vec<SearchHit>),
    /// It names a column this index does not have.
    NotHere(String),
}

fn searched(result: rusqlite::Result<Vec<SearchHit>>) -> DbResult<Searched> {
    match result {
        Ok(hits) => Ok(Searched::Hits(hits)),
        Err(e) if e.to_string().contains("no such column") => Ok(Searched::NotHere(e.to_string())),
        Err(e) => Err(bad_query(e)),
    }
}

/// Threads whose title or summary match, best first.
fn thread_hits(conn: &Connection, q: &str, f: &Filter, limit: u32) -> rusqlite::Result<Vec<SearchHit>> {
    let mut stmt = conn.prepare_cached(
        "SELECT t.id, t.last_activity_at,
                CASE WHEN t.title IS NOT NULL AND instr(highlight(search_threads, 0, '«', '»'), '«') > 0
                     THEN 'title' ELSE 'summary' END,
                CASE WHEN t.title IS NOT NULL AND instr(highlight(search_threads, 0, '«', '»'), '«') > 0
                     THEN highlight(search_threads, 0, '«', '»')
                     ELSE snippet(search_threads, 1, '«', '»', '…', 16) END,
                search_threads.rank
         FROM search_threads JOIN threads t ON t.rowid = search_threads.rowid
         WHERE search_threads MATCH ?1 AND (?2 IS NULL OR t.id = ?2) AND (?4 IS NULL OR t.workspace = ?4)
         ORDER BY search_threads.rank LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![q, f.thread, limit, f.workspace], |r| {
        Ok(SearchHit {
            thread: r.get(0)?,
            seq: None,
            at_ms: r.get(1)?,
            from: r.get(2)?,
            snippet: r.get(3)?,
            rank: r.get(4)?,
        })
    })?;
    rows.collect()
}

/// Messages whose body matches, best first.
fn message_hits(conn: &Connection, q: &str, f: &Filter, limit: u32) -> rusqlite::Result<Vec<SearchHit>> {
    // The best hits first, then a snippet for those alone: a snippet for
    // every match of a common word would cost more than the search.
    // Without a filter, the index alone ranks: no lookup of every match.
    let filtered = f.thread.is_some() || f.from.is_some() || f.since_ms.is_some() || f.workspace.is_some();
    let top = if filtered {
        "SELECT search_messages.rowid AS id, search_messages.rank AS rank
         FROM search_messages JOIN messages m ON m.id = search_messages.rowid
         WHERE search_messages MATCH ?1 AND (?2 IS NULL OR m.thread_id = ?2) AND (?3 IS NULL OR m.sender = ?3)
           AND (?4 IS NULL OR m.created_at >= ?4)
           AND (?6 IS NULL OR m.thread_id IN (SELECT id FROM threads WHERE workspace = ?6))
         ORDER BY search_messages.rank LIMIT ?5"
    } else {
        "SELECT rowid AS id, rank FROM search_messages
         WHERE search_messages MATCH ?1 AND ?2 IS NULL AND ?3 IS NULL AND ?4 IS NULL AND ?6 IS NULL
         ORDER BY rank LIMIT ?5"
    };
    let mut stmt = conn.prepare_cached(&format!(
        "WITH top AS ({top})
         SELECT m.thread_id, m.seq, m.sender, m.created_at, snippet(search_messages, 0, '«', '»', '…', 16), top.rank
         FROM top
         JOIN search_messages ON search_messages.rowid = top.id
         JOIN messages m ON m.id = top.id
         WHERE search_messages MATCH ?1
         ORDER BY top.rank"
    ))?;
    let rows = stmt.query_map(params![q, f.thread, f.from, f.since_ms, limit, f.workspace], |r| {
        Ok(SearchHit {
            thread: r.get(0)?,
            seq: Some(r.get::<_, i64>(1)? as u64),
            from: r.get(2)?,
            at_ms: r.get(3)?,
            snippet: r.get(4)?,
            rank: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// FTS5 refuses a query it cannot parse: that is the caller's error.
fn bad_query(e: rusqlite::Error) -> DbError {
    let text = e.to_string();
    let unreadable = ["fts5", "no such column", "unterminated string", "unknown special query"];
    if unreadable.iter().any(|u| text.contains(u)) { self::unreadable(&text) } else { DbError::from(e) }
}

impl super::Sqlite {
    /// Searches, after indexing every message written before.
    pub async fn search(&self, q: String, f: Filter) -> DbResult<Vec<SearchHit>> {
        self.index_messages().await?;
        self.read(move |c| query(c, &q, &f)).await
    }

    /// Indexes the messages not yet indexed, a batch per write job.
    pub async fn index_messages(&self) -> DbResult<u64> {
        let mut total = 0;
        loop {
            let n = self.write(|c, _| index_pending(c)).await?;
            total += u64::from(n);
            if n < INDEX_BATCH {
                return Ok(total);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_messages_are_indexed_in_batches_and_a_long_body_up_to_its_bound() -> DbResult<()> {
        let dir = tempfile::tempdir().map_err(|e| DbError::Internal(e.to_string()))?;
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path)?;
        super::super::schema::configure(&conn)?;
        super::super::schema::migrate(&mut conn, &path)?;
        conn.execute_batch(
            "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t', '/w', 1, 1)",
        )?;
        let long = format!("{} tail", "word ".repeat(INDEXED_CHARS / 5));
        let total = INDEX_BATCH as usize + 5;
        for i in 1..=total {
            let body = if i == 1 { long.clone() } else { format!("needle {i}") };
            conn.execute(
                "INSERT INTO messages (thread_id, seq, sender, recipients, kind, body, created_at)
                 VALUES ('t', ?1, 'king', '[]', 'king', ?2, 1)",
                params![i as i64, body],
            )?;
        }
        let find = |q: &str| query(&conn, q, &Filter { limit: Some(MAX_HITS), ..Default::default() }).map(|h| h.len());
        assert_eq!(find("needle")?, 0, "not indexed yet");
        assert_eq!(index_pending(&conn)?, INDEX_BATCH);
        assert_eq!(index_pending(&conn)?, 5);
        assert_eq!(index_pending(&conn)?, 0);
        assert_eq!(find("needle")?, MAX_HITS as usize);
        assert_eq!(find("word")?, 1);
        assert_eq!(find("tail")?, 0, "past the bound");
        // A deleted message leaves the index (and one never indexed is skipped).
        conn.execute(
            "INSERT INTO messages (thread_id, seq, sender, recipients, kind, body, created_at)
                      VALUES ('t', 9999, 'king', '[]', 'king', 'fresh needle', 1)",
            [],
        )?;
        conn.execute("DELETE FROM threads WHERE id = 't'", [])?;
        assert_eq!(find("needle")?, 0);
        conn.execute_batch("INSERT INTO search_messages (search_messages) VALUES ('integrity-check')")?;
        Ok(())
    }
}
