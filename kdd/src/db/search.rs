//! Full-text search (beyond every peer): FTS5 indexes over message bodies
//! (`search_messages`) and thread titles and summaries (`search_threads`).
//! Titles, summaries and deletes are kept in step by the triggers of
//! migration 0009 inside every write. New messages are indexed in batches
//! after they are written ([`index_pending`], by the indexer task and
//! before every search): an append stays as cheap as before, and a search
//! still sees every message written before it.

use super::DbError;

/// Characters of a message the index holds (the same in migration 0009's
/// triggers and first fill).
pub const INDEXED_CHARS: usize = 100_000;
/// Messages indexed in one write job at most: appends wait no longer.
pub const INDEX_BATCH: u32 = 2_000;
/// How often the indexer task looks for new messages.
pub const INDEX_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Most hits one query returns.
pub const MAX_HITS: u32 = 200;
/// Hits by default.
pub const DEFAULT_HITS: u32 = 20;
/// Threads found by title or summary listed at most, before the messages.
pub(crate) const THREAD_HITS: u32 = 5;

/// Which hits a query keeps.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub thread: Option<String>,
    /// Only threads of this workspace (a member searches its own).
    pub workspace: Option<String>,
    pub from: Option<String>,
    pub since_ms: Option<i64>,
    pub limit: Option<u32>,
}

/// A query naming columns no searched index has (`why`: the first index's
/// words): the caller's error.
pub(crate) fn no_index_has(why: &str, with_threads: bool) -> DbError {
    let only = if with_threads { "" } else { " (with from or since, only message bodies are searched)" };
    DbError::Invalid(format!(
        "cannot read the search query: {why}{only}; the columns are body, title and summary, one index at a time"
    ))
}

/// A query the engine cannot read (`text`: its words): the caller's error.
pub(crate) fn unreadable(text: &str) -> DbError {
    DbError::Invalid(format!(
        "cannot read the search query: {text}; give words, \"a phrase\", a prefix*, AND, OR, NOT, \
         or a column: body:, title:, summary:"
    ))
}

/// Indexes new messages every `interval` until `stop`, so that a search
/// has little left to do.
pub fn spawn_indexer(
    db: std::sync::Arc<super::Db>,
    interval: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = db.index_messages().await {
                tracing::warn!("search: cannot index new messages: {e}");
            }
        }
    });
}
