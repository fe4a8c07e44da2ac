//! Full-text search (PostgreSQL; mirrors `db/search.rs`): generated
//! `tsvector` columns with GIN indexes over message bodies (their first
//! [`INDEXED_CHARS`] characters) and thread titles (weight A) and summaries
//! (weight B), written in the same statement as the row, so there is
//! nothing to index later ([`Pg::index_messages`] does nothing).
//!
//! The query language is FTS5's, read by [`search_query`] and written for
//! `to_tsquery('kd', …)`; the `kd` configuration stems English and drops
//! accents, with no stop words, as FTS5's tokenizer does. Ranking is
//! `ts_rank_cd` normalised by the document's length (FTS5's bm25 has no
//! equal: equal queries may order equal-looking hits differently); ranks
//! are negated so that lower is better, as FTS5's. Snippets are
//! `ts_headline`, computed for the hits kept only: a short text whole, a
//! long one as one fragment of about 16 words with `…` where it was cut.
//!
//! [`INDEXED_CHARS`]: crate::db::search::INDEXED_CHARS

use deadpool_postgres::GenericClient;
use kd_proto::types::SearchHit;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use super::search_query::{MESSAGES, Query, THREADS, Written};
use super::{Pg, threads};
use crate::db::search::{self, DEFAULT_HITS, Filter, MAX_HITS, THREAD_HITS};
use crate::db::{DbError, DbResult};

/// Options of the snippets: a short text whole, else one fragment.
const WHOLE: &str = "StartSel=«, StopSel=», HighlightAll=true";
const FRAGMENT: &str = "StartSel=«, StopSel=», MaxWords=16, MinWords=6, MaxFragments=1";

/// SQL of a snippet of text `x` for query `q`, and whether it begins and
/// ends where `x` does (else it is marked cut).
fn snippet(x: &str) -> String {
    format!(
        "CROSS JOIN LATERAL (SELECT CASE WHEN coalesce(array_length(regexp_split_to_array(btrim({x}), '\\s+'), 1), 0) <= 16
                                    THEN ts_headline('kd', {x}, q, '{WHOLE}')
                                    ELSE ts_headline('kd', {x}, q, '{FRAGMENT}') END AS h) h
         CROSS JOIN LATERAL (SELECT btrim(replace(replace(h.h, '«', ''), '»', '')) AS s) s"
    )
}

/// The snippet's columns: the marked text, whether it starts and ends the text.
fn snippet_columns(x: &str) -> String {
    format!("h.h, starts_with(btrim({x}), s.s), right(btrim({x}), length(s.s)) = s.s")
}

/// The snippet at columns `i`, `i + 1`, `i + 2`, with `…` where it was cut.
fn marked(r: &Row, i: usize) -> DbResult<String> {
    let h: String = r.try_get(i)?;
    let (whole_start, whole_end): (bool, bool) = (r.try_get(i + 1)?, r.try_get(i + 2)?);
    let h = h.trim();
    Ok(format!("{}{h}{}", if whole_start { "" } else { "…" }, if whole_end { "" } else { "…" }))
}

/// Searches both indexes: threads by title and summary (without a `from`
/// or `since` filter, which only messages have), then messages, as
/// `db::search::query` does.
pub(crate) async fn query(c: &impl GenericClient, q: &str, f: &Filter) -> DbResult<Vec<SearchHit>> {
    if let Some(t) = &f.thread {
        threads::get(c, t).await?;
    }
    let parsed = Query::parse(q).map_err(|e| search::unreadable(&e))?;
    let limit = f.limit.unwrap_or(DEFAULT_HITS).clamp(1, MAX_HITS);
    let with_threads = f.from.is_none() && f.since_ms.is_none();
    let mut hits = Vec::new();
    let mut not_here = Vec::new();
    if with_threads {
        match parsed.write(&THREADS) {
            Written::Text(text) => hits = thread_hits(c, &text, &parsed, f, THREAD_HITS.min(limit)).await?,
            Written::Nothing => {}
            Written::NoSuchColumn(why) => not_here.push(why),
        }
    }
    let rest = limit - hits.len() as u32;
    match parsed.write(&MESSAGES) {
        Written::Text(text) => hits.extend(message_hits(c, &text, f, rest).await?),
        Written::Nothing => {}
        Written::NoSuchColumn(why) => not_here.push(why),
    }
    if not_here.len() == 1 + usize::from(with_threads) {
        return Err(search::no_index_has(&not_here[0], with_threads));
    }
    Ok(hits)
}

/// Threads whose title or summary match, best first.
async fn thread_hits(
    c: &impl GenericClient,
    tsquery: &str,
    parsed: &Query,
    f: &Filter,
    limit: u32,
) -> DbResult<Vec<SearchHit>> {
    let sql = format!(
        "SELECT t.id, t.last_activity_at, t.title IS NOT NULL,
                ts_headline('kd', coalesce(t.title, ''), q, '{WHOLE}'),
                -(ts_rank_cd(t.search, q, 1))::float8 AS rank, {}
         FROM threads t CROSS JOIN to_tsquery('kd', $1) q
         CROSS JOIN LATERAL (SELECT coalesce(t.summary, '') AS x) x
         {}
         WHERE t.search @@ q AND ($2::text IS NULL OR t.id = $2) AND ($4::text IS NULL OR t.workspace = $4)
         ORDER BY rank, t.rowid LIMIT $3",
        snippet_columns("x.x"),
        snippet("x.x"),
    );
    let rows = c.query(&sql, &[&tsquery, &f.thread, &i64::from(limit), &f.workspace]).await.map_err(bad_query)?;
    let title_possible = parsed.may_match("title");
    rows.iter()
        .map(|r| {
            let title: String = r.try_get(3)?;
            let by_title = title_possible && r.try_get::<_, bool>(2)? && title.contains('«');
            Ok(SearchHit {
                thread: r.try_get(0)?,
                seq: None,
                at_ms: r.try_get(1)?,
                from: if by_title { "title" } else { "summary" }.into(),
                snippet: if by_title { title } else { marked(r, 5)? },
                rank: r.try_get(4)?,
            })
        })
        .collect()
}

/// Messages whose body matches, best first; a snippet for those alone.
async fn message_hits(c: &impl GenericClient, tsquery: &str, f: &Filter, limit: u32) -> DbResult<Vec<SearchHit>> {
    let sql = format!(
        "WITH top AS (
             SELECT m.id, -(ts_rank_cd(m.search, q, 1))::float8 AS rank
             FROM messages m CROSS JOIN to_tsquery('kd', $1) q
             WHERE m.search @@ q AND ($2::text IS NULL OR m.thread_id = $2) AND ($3::text IS NULL OR m.sender = $3)
               AND ($4::bigint IS NULL OR m.created_at >= $4)
               AND ($6::text IS NULL OR m.thread_id IN (SELECT id FROM threads WHERE workspace = $6))
             ORDER BY rank, m.id LIMIT $5)
         SELECT m.thread_id, m.seq, m.sender, m.created_at, top.rank, {}
         FROM top JOIN messages m ON m.id = top.id
         CROSS JOIN to_tsquery('kd', $1) q
         CROSS JOIN LATERAL (SELECT left(m.body, {}) AS x) x
         {}
         ORDER BY top.rank, top.id",
        snippet_columns("x.x"),
        search::INDEXED_CHARS,
        snippet("x.x"),
    );
    let rows = c
        .query(&sql, &[&tsquery, &f.thread, &f.from, &f.since_ms, &i64::from(limit), &f.workspace])
        .await
        .map_err(bad_query)?;
    rows.iter()
        .map(|r| {
            Ok(SearchHit {
                thread: r.try_get(0)?,
                seq: Some(r.try_get::<_, i64>(1)? as u64),
                from: r.try_get(2)?,
                at_ms: r.try_get(3)?,
                rank: r.try_get(4)?,
                snippet: marked(r, 5)?,
            })
        })
        .collect()
}

/// `to_tsquery` refusing what the query became is the caller's error.
fn bad_query(e: tokio_postgres::Error) -> DbError {
    match e.code() {
        Some(code) if *code == SqlState::SYNTAX_ERROR => {
            search::unreadable(e.as_db_error().map(|d| d.message()).unwrap_or("syntax error"))
        }
        _ => e.into(),
    }
}

impl Pg {
    /// Searches every message written before (indexed as it was written).
    pub async fn search(&self, q: String, f: Filter) -> DbResult<Vec<SearchHit>> {
        query(&self.conn().await?, &q, &f).await
    }

    /// Nothing to do: messages are indexed in the statement writing them.
    pub async fn index_messages(&self) -> DbResult<u64> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::MessageKind;

    use super::*;
    use crate::db::messages::NewMessage;
    use crate::db::pg::testing;
    use crate::db::threads::NewThread;

    async fn thread(pg: &Pg, workspace: &str) -> String {
        let t = NewThread { members: vec![], ..NewThread::in_workspace(workspace) };
        pg.create_thread(t).await.unwrap().id
    }

    async fn append(pg: &Pg, thread: &str, from: &str, body: &str) {
        let kind = if from == "king" { MessageKind::King } else { MessageKind::Agent };
        pg.append_message(NewMessage::new(thread, from, vec![], kind, body.into())).await.unwrap();
    }

    async fn set(pg: &Pg, thread: &str, column: &str, text: &str) {
        let c = pg.conn().await.unwrap();
        c.execute(&format!("UPDATE threads SET {column} = $2 WHERE id = $1"), &[&thread, &text]).await.unwrap();
    }

    fn all() -> Filter {
        Filter { limit: Some(MAX_HITS), ..Default::default() }
    }

    /// The e2e test `search_ranks_filters_and_marks_hits_and_follows_deletes`
    /// at the engine.
    #[tokio::test]
    async fn search_ranks_filters_and_marks_hits_like_fts5() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t1 = thread(&pg, "/repo").await;
        let t2 = thread(&pg, "/repo").await;
        append(&pg, &t1, "king", "How should we shard the orders table?").await;
        append(&pg, &t1, "claude", "Shard by tenant; shard keys must be stable. Sharding by date skews.").await;
        append(&pg, &t1, "codex", "An index on created_at comes first.").await;
        append(&pg, &t2, "claude", "The cache could shard later.").await;
        set(&pg, &t2, "title", "Cache sharding plan").await;

        let hits = pg.search("shard".into(), Filter::default()).await.unwrap();
        let found: Vec<(&str, Option<u64>, &str)> =
            hits.iter().map(|h| (h.thread.as_str(), h.seq, h.from.as_str())).collect();
        assert_eq!(
            found,
            [
                (t2.as_str(), None, "title"),
                (t1.as_str(), None, "title"),
                (t1.as_str(), Some(2), "claude"),
                (t2.as_str(), Some(1), "claude"),
                (t1.as_str(), Some(1), "king"),
            ],
            "{hits:#?}"
        );
        assert_eq!(hits[0].snippet, "Cache «sharding» plan");
        assert!(hits[2].snippet.contains("«Shard» by tenant; «shard» keys"), "{}", hits[2].snippet);
        assert!(hits.windows(2).skip(2).all(|w| w[0].rank <= w[1].rank), "best first");
        let only = Filter { thread: Some(t1.clone()), from: Some("king".into()), ..Default::default() };
        assert_eq!(pg.search("shard".into(), only).await.unwrap().iter().map(|h| h.seq).collect::<Vec<_>>(), [Some(1)]);
        let phrase = pg.search("\"orders table\"".into(), Filter::default()).await.unwrap();
        assert_eq!(phrase.iter().map(|h| h.seq).collect::<Vec<_>>(), [None, Some(1)], "the title and the question");
        let prefix = pg.search("creat*".into(), Filter::default()).await.unwrap();
        assert_eq!(prefix.iter().map(|h| h.seq).collect::<Vec<_>>(), [Some(3)]);
        let both = pg.search("index first".into(), Filter::default()).await.unwrap();
        assert_eq!(both.len(), 1);
        assert_eq!(both[0].snippet, "An «index» on created_at comes «first».");
        // No stop words: FTS5 finds "how".
        assert_eq!(pg.search("how".into(), all()).await.unwrap().len(), 2, "the title and the question");
        let e = pg.search("\"unclosed".into(), Filter::default()).await.unwrap_err();
        assert!(matches!(e, DbError::Invalid(ref m) if m.contains("cannot read the search query")), "{e}");
        assert!(matches!(
            pg.search("x".into(), Filter { thread: Some("nope".into()), ..all() }).await,
            Err(DbError::NotFound(_))
        ));

        let c = pg.conn().await.unwrap();
        c.execute("DELETE FROM threads WHERE id = $1", &[&t1]).await.unwrap();
        let after = pg.search("shard".into(), Filter::default()).await.unwrap();
        assert!(after.iter().all(|h| h.thread == t2), "{after:#?}");
        assert!(pg.search("tenant".into(), Filter::default()).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_column_filter_searches_the_index_that_has_it_and_a_bare_star_is_refused() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = thread(&pg, "/repo").await;
        append(&pg, &t, "king", "How should we shard the orders table?").await;
        append(&pg, &t, "claude", "Shard by tenant.").await;
        let b = thread(&pg, "/repo").await;
        set(&pg, &b, "title", "Cache plan").await;
        set(&pg, &b, "summary", "The shard map lives in the cache service, read by every node at start.").await;
        append(&pg, &b, "king", "Where does the shard map live?").await;

        let found = |hits: Vec<SearchHit>| -> Vec<(String, Option<u64>, String)> {
            let mut v: Vec<_> = hits.into_iter().map(|h| (h.thread, h.seq, h.from)).collect();
            v.sort();
            v
        };
        let search = |q: &str| pg.search(q.into(), Filter::default());
        let mut expected = vec![
            (t.clone(), Some(1), "king".to_string()),
            (t.clone(), Some(2), "claude".to_string()),
            (b.clone(), Some(1), "king".to_string()),
        ];
        expected.sort();
        assert_eq!(found(search("body:shard").await.unwrap()), expected, "only messages");
        assert_eq!(found(search("title:shard").await.unwrap()), [(t.clone(), None, "title".to_string())]);
        let summary = search("summary:shard").await.unwrap();
        assert_eq!(found(summary.clone()), [(b.clone(), None, "summary".to_string())]);
        assert!(summary[0].snippet.contains("«shard» map"), "{}", summary[0].snippet);
        assert_eq!(found(search("{title summary}:cache").await.unwrap()), [(b.clone(), None, "title".to_string())]);
        let in_t = pg.search("title:shard".into(), Filter { thread: Some(t.clone()), ..Default::default() });
        assert_eq!(found(in_t.await.unwrap()), [(t.clone(), None, "title".to_string())]);
        let e = pg.search("title:shard".into(), Filter { from: Some("king".into()), ..Default::default() });
        let e = e.await.unwrap_err();
        assert!(e.to_string().contains("only message bodies are searched"), "{e}");
        for bad in ["*", "nosuch:shard", "body:shard OR title:shard", "AND"] {
            let e = search(bad).await.unwrap_err();
            assert!(matches!(e, DbError::Invalid(ref m) if m.contains("cannot read the search query")), "{bad}: {e}");
        }
        // NEAR and NOT; workspace and since filters.
        let near = found(search("NEAR(shard table, 2)").await.unwrap());
        assert_eq!(near, [(t.clone(), None, "title".to_string()), (t.clone(), Some(1), "king".to_string())]);
        let not = found(search("body:shard NOT tenant NOT map").await.unwrap());
        assert_eq!(not, [(t.clone(), Some(1), "king".to_string())]);
        let other = thread(&pg, "/elsewhere").await;
        append(&pg, &other, "king", "shard elsewhere").await;
        let here = Filter { workspace: Some("/repo".into()), ..all() };
        assert!(pg.search("shard".into(), here).await.unwrap().iter().all(|h| h.thread != other));
        let later = Filter { since_ms: Some(i64::MAX), ..all() };
        assert!(pg.search("shard".into(), later).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_long_body_is_cut_to_a_marked_fragment_and_indexed_up_to_its_bound() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let t = thread(&pg, "/w").await;
        let long =
            format!("{} needle in the middle {} tail", "word ".repeat(30), "word ".repeat(search::INDEXED_CHARS / 5));
        append(&pg, &t, "claude", &long).await;
        let hits = pg.search("needle".into(), all()).await.unwrap();
        assert_eq!(hits.len(), 1);
        assert!(hits[0].snippet.starts_with('…') && hits[0].snippet.ends_with('…'), "{}", hits[0].snippet);
        assert!(hits[0].snippet.contains("«needle»"), "{}", hits[0].snippet);
        assert!(pg.search("tail".into(), all()).await.unwrap().is_empty(), "past the bound");
        assert_eq!(pg.index_messages().await.unwrap(), 0);
    }
}
