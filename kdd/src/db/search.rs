//! Full-text search (beyond every peer): FTS5 indexes over message bodies
//! (`search_messages`) and thread titles and summaries (`search_threads`),
//! kept in step inside every write: a new message by
//! [`super::messages`], the rest by the triggers of migration 0009.

use kd_proto::types::SearchHit;
use rusqlite::{Connection, params};

use super::{DbError, DbResult, threads};

/// Characters of a message the index holds (the same in migration 0009's
/// triggers and first fill).
pub const INDEXED_CHARS: usize = 100_000;

/// What of `body` is indexed: its first [`INDEXED_CHARS`] characters.
pub fn indexed(body: &str) -> &str {
    match body.char_indices().nth(INDEXED_CHARS) {
        Some((at, _)) => &body[..at],
        None => body,
    }
}

/// Most hits one query returns.
pub const MAX_HITS: u32 = 200;
/// Hits by default.
pub const DEFAULT_HITS: u32 = 20;
/// Threads found by title or summary listed at most, before the messages.
const THREAD_HITS: u32 = 5;

/// Which hits a query keeps.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub thread: Option<String>,
    pub from: Option<String>,
    pub since_ms: Option<i64>,
    pub limit: Option<u32>,
}

pub fn query(conn: &Connection, q: &str, f: &Filter) -> DbResult<Vec<SearchHit>> {
    if let Some(t) = &f.thread {
        threads::get(conn, t)?;
    }
    let limit = f.limit.unwrap_or(DEFAULT_HITS).clamp(1, MAX_HITS);
    let mut hits = Vec::new();
    if f.from.is_none() && f.since_ms.is_none() {
        let mut stmt = conn.prepare_cached(
            "SELECT t.id, t.last_activity_at,
                    CASE WHEN t.title IS NOT NULL AND instr(highlight(search_threads, 0, '«', '»'), '«') > 0
                         THEN 'title' ELSE 'summary' END,
                    CASE WHEN t.title IS NOT NULL AND instr(highlight(search_threads, 0, '«', '»'), '«') > 0
                         THEN highlight(search_threads, 0, '«', '»')
                         ELSE snippet(search_threads, 1, '«', '»', '…', 16) END,
                    search_threads.rank
             FROM search_threads JOIN threads t ON t.rowid = search_threads.rowid
             WHERE search_threads MATCH ?1 AND (?2 IS NULL OR t.id = ?2)
             ORDER BY search_threads.rank LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![q, f.thread, THREAD_HITS.min(limit)], |r| {
                Ok(SearchHit {
                    thread: r.get(0)?,
                    seq: None,
                    at_ms: r.get(1)?,
                    from: r.get(2)?,
                    snippet: r.get(3)?,
                    rank: r.get(4)?,
                })
            })
            .map_err(bad_query)?;
        for h in rows {
            hits.push(h.map_err(bad_query)?);
        }
    }
    let rest = limit - hits.len() as u32;
    // The best hits first, then a snippet for those alone: a snippet for
    // every match of a common word would cost more than the search.
    // Without a filter, the index alone ranks: no lookup of every match.
    let filtered = f.thread.is_some() || f.from.is_some() || f.since_ms.is_some();
    let top = if filtered {
        "SELECT search_messages.rowid AS id, search_messages.rank AS rank
         FROM search_messages JOIN messages m ON m.id = search_messages.rowid
         WHERE search_messages MATCH ?1 AND (?2 IS NULL OR m.thread_id = ?2) AND (?3 IS NULL OR m.sender = ?3)
           AND (?4 IS NULL OR m.created_at >= ?4)
         ORDER BY search_messages.rank LIMIT ?5"
    } else {
        "SELECT rowid AS id, rank FROM search_messages
         WHERE search_messages MATCH ?1 AND ?2 IS NULL AND ?3 IS NULL AND ?4 IS NULL
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
    let rows = stmt
        .query_map(params![q, f.thread, f.from, f.since_ms, rest], |r| {
            Ok(SearchHit {
                thread: r.get(0)?,
                seq: Some(r.get::<_, i64>(1)? as u64),
                from: r.get(2)?,
                at_ms: r.get(3)?,
                snippet: r.get(4)?,
                rank: r.get(5)?,
            })
        })
        .map_err(bad_query)?;
    for h in rows {
        hits.push(h.map_err(bad_query)?);
    }
    Ok(hits)
}

/// FTS5 refuses a query it cannot parse: that is the caller's error.
fn bad_query(e: rusqlite::Error) -> DbError {
    let text = e.to_string();
    if text.contains("fts5") || text.contains("no such column") || text.contains("unterminated string") {
        DbError::Invalid(format!("cannot read the search query: {text}"))
    } else {
        DbError::Sqlite(e)
    }
}

impl super::Db {
    pub async fn search(&self, q: String, f: Filter) -> DbResult<Vec<SearchHit>> {
        self.read(move |c| query(c, &q, &f)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_indexed_up_to_a_character_bound_on_a_char_boundary() {
        assert_eq!(indexed("short"), "short");
        let long = "é".repeat(INDEXED_CHARS + 3);
        let cut = indexed(&long);
        assert_eq!(cut.chars().count(), INDEXED_CHARS);
        assert!(long.starts_with(cut));
    }
}
