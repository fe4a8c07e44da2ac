//! The whole of a thread kept from one round to the next, for the prompts
//! that give an agent all of it (history mode): a round reads what was
//! written since the last one, not the thread again (issue 31, item 17: a
//! history-mode thread of 200 messages took about a millisecond to read
//! and parse at each question, on the way to the agents' start).
//!
//! A message is never changed or removed once written and a thread's seqs
//! are dense and committed in order, so the thread up to seq N, once read,
//! stays what it is. What is kept is checked against the thread's row at
//! each use: the same thread (made at the same moment: one deleted and
//! made again under the same id is read afresh) and at least as long.
//! What came since is read in small pages on the caller's thread
//! ([`Page::small`]), or, when it is more than a few, whole. Bounded: a
//! few threads, none of more than [`MAX_BYTES`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use kd_proto::types::Message;

use crate::db::messages::{Page, ROW_BYTES};
use crate::db::{Db, DbResult};

/// Threads kept at most; the least recently read goes first.
const THREADS: usize = 4;
/// The largest thread kept, its messages counted as in a page (body and
/// [`ROW_BYTES`] each).
pub const MAX_BYTES: usize = 2 * 1024 * 1024;
/// Small pages read for what came since, at most; past them the rest is
/// read in one go.
const SMALL_PAGES: usize = 2;

/// A thread read whole: made when, and its messages.
struct Kept {
    thread: String,
    created_at_ms: i64,
    messages: Arc<Vec<Message>>,
}

/// Threads read whole, the most recently read last.
#[derive(Default)]
pub struct ThreadCache {
    kept: Mutex<VecDeque<Kept>>,
}

impl ThreadCache {
    fn kept(&self) -> MutexGuard<'_, VecDeque<Kept>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every message of `thread`: what is kept of it and what came since,
    /// or all of it read afresh.
    pub async fn whole(&self, db: &Db, thread: &str) -> DbResult<Arc<Vec<Message>>> {
        let row = db.thread(thread.to_string()).await?;
        let same = |k: &Kept| k.created_at_ms == row.created_at_ms;
        // Kept as it stands (another member of the round read it a moment
        // ago): shared, not copied.
        if let Some(current) = self.current(thread, |k| same(k) && last_seq(k) == row.last_seq) {
            return Ok(current);
        }
        let kept = self.take(thread).filter(|k| same(k) && last_seq(k) <= row.last_seq);
        let mut all = match kept {
            Some(k) => Arc::unwrap_or_clone(k.messages),
            None => Vec::new(),
        };
        let mut small = 0;
        loop {
            let after = all.last().map_or(0, |m| m.seq);
            if after >= row.last_seq {
                break;
            }
            let page = if small < SMALL_PAGES && !all.is_empty() { Page::small(after) } else { Page::all_after(after) };
            small += 1;
            let more = db.messages(thread.to_string(), page).await?;
            // The thread's seqs are dense: anything else is a thread that
            // changed under its id (deleted and made again); read afresh.
            if more.first().is_none_or(|m| m.seq != after + 1) {
                all = db.messages(thread.to_string(), Page::all_after(0)).await?;
                break;
            }
            all.extend(more);
        }
        Ok(self.keep(thread, row.created_at_ms, all))
    }

    /// What is kept of `thread` when it is `whole`, as the most recently
    /// read.
    fn current(&self, thread: &str, whole: impl Fn(&Kept) -> bool) -> Option<Arc<Vec<Message>>> {
        let mut kept = self.kept();
        let at = kept.iter().position(|k| k.thread == thread && whole(k))?;
        let k = kept.remove(at)?;
        let messages = k.messages.clone();
        kept.push_back(k);
        Some(messages)
    }

    /// Takes `thread` out: a round's read has it alone, and extends it in
    /// place (a copy, when a run still holds what was kept).
    fn take(&self, thread: &str) -> Option<Kept> {
        let mut kept = self.kept();
        let at = kept.iter().position(|k| k.thread == thread)?;
        kept.remove(at)
    }

    /// Keeps `all` as `thread` unless it is too large or a longer read of
    /// it is kept already (two reads at once); the least recently read
    /// thread goes past [`THREADS`].
    fn keep(&self, thread: &str, created_at_ms: i64, all: Vec<Message>) -> Arc<Vec<Message>> {
        let all = Arc::new(all);
        let bytes: usize = all.iter().map(|m| m.body.len() + ROW_BYTES).sum();
        if bytes > MAX_BYTES {
            return all;
        }
        let mut kept = self.kept();
        match kept.iter().position(|k| k.thread == thread) {
            Some(at) if kept[at].messages.len() >= all.len() => return all,
            Some(at) => {
                kept.remove(at);
            }
            None => {}
        }
        kept.push_back(Kept { thread: thread.to_string(), created_at_ms, messages: all.clone() });
        while kept.len() > THREADS {
            kept.pop_front();
        }
        all
    }

    #[cfg(test)]
    fn threads(&self) -> Vec<String> {
        self.kept().iter().map(|k| k.thread.clone()).collect()
    }
}

/// The last seq of what is kept (0: nothing).
fn last_seq(k: &Kept) -> u64 {
    k.messages.last().map_or(0, |m| m.seq)
}

#[cfg(test)]
mod tests;
