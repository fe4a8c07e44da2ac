//! A thread read once for the runs that want it at the same moment: the
//! members of a round each read the thread up to the message they answer
//! as they start — the same read, begun within a millisecond of each other
//! (issue 31, item 17: in history mode, the whole thread, read and parsed
//! once per member). A read asked while the same one is under way takes
//! its result; once it is done the next is read afresh. Taking a read
//! begun a moment before is as if it had been asked then: nothing orders
//! it after a write that comes meanwhile anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, WeakShared};
use kd_proto::types::Message;

/// What a shared read comes to: the messages, or why not.
pub type Read = Result<Arc<Vec<Message>>, Arc<str>>;

/// A read: the thread, from which seq, for the message answered.
type Key = (String, u64, Option<u64>);

/// The reads under way, held weakly: a read every waiter gave up (its
/// runs stopped) is dropped with them, not kept for a later run to
/// resume.
#[derive(Default)]
pub struct SharedReads {
    under_way: Mutex<HashMap<Key, WeakShared<BoxFuture<'static, Read>>>>,
}

impl SharedReads {
    /// The messages of `thread` after `from`, for a run answering
    /// `reply_to`: those of the same read under way, else of `read`.
    pub async fn read(&self, thread: &str, from: u64, reply_to: Option<u64>, read: BoxFuture<'static, Read>) -> Read {
        let key: Key = (thread.to_string(), from, reply_to);
        let shared = {
            let mut under_way = self.under_way.lock().unwrap_or_else(|e| e.into_inner());
            // A read done, or given up by all its waiters, is no longer
            // under way.
            under_way.retain(|_, read| read.upgrade().is_some());
            match under_way.get(&key).and_then(WeakShared::upgrade) {
                Some(joined) => joined,
                None => {
                    let shared = read.shared();
                    if let Some(weak) = shared.downgrade() {
                        under_way.insert(key, weak);
                    }
                    shared
                }
            }
        };
        shared.await
    }

    #[cfg(test)]
    fn under_way(&self) -> usize {
        self.under_way.lock().unwrap_or_else(|e| e.into_inner()).values().filter(|r| r.upgrade().is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counted(reads: &Arc<AtomicUsize>, gate: tokio::sync::watch::Receiver<bool>) -> BoxFuture<'static, Read> {
        let reads = reads.clone();
        async move {
            reads.fetch_add(1, Ordering::SeqCst);
            let mut gate = gate;
            let _ = gate.wait_for(|open| *open).await;
            Ok(Arc::new(Vec::new()))
        }
        .boxed()
    }

    #[tokio::test]
    async fn reads_under_way_together_are_one_and_a_later_one_is_new() {
        let shared = Arc::new(SharedReads::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let (open, gate) = tokio::sync::watch::channel(false);
        let mut members = Vec::new();
        for _ in 0..3 {
            let (shared, fut) = (shared.clone(), counted(&reads, gate.clone()));
            members.push(tokio::spawn(async move { shared.read("t1", 0, Some(7), fut).await }));
        }
        // Another message answered, another thread: reads of their own.
        let other = tokio::spawn({
            let (shared, fut) = (shared.clone(), counted(&reads, gate.clone()));
            async move { shared.read("t1", 0, Some(8), fut).await }
        });
        while shared.under_way() < 2 {
            tokio::task::yield_now().await;
        }
        open.send(true).unwrap();
        for m in members {
            assert!(m.await.unwrap().is_ok());
        }
        assert!(other.await.unwrap().is_ok());
        assert_eq!(reads.load(Ordering::SeqCst), 2, "one read for the three, one for the other");
        assert_eq!(shared.under_way(), 0, "nothing kept once done");
        let again = shared.read("t1", 0, Some(7), counted(&reads, gate.clone())).await;
        assert!(again.is_ok());
        assert_eq!(reads.load(Ordering::SeqCst), 3, "a read after the first is done is new");
    }

    /// A read all its waiters gave up is not kept for a later run to take.
    #[tokio::test]
    async fn a_read_given_up_by_every_waiter_is_not_resumed() {
        let shared = Arc::new(SharedReads::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let (open, gate) = tokio::sync::watch::channel(false);
        let waiter = tokio::spawn({
            let (shared, fut) = (shared.clone(), counted(&reads, gate.clone()));
            async move { shared.read("t1", 0, Some(7), fut).await }
        });
        while shared.under_way() < 1 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(shared.under_way(), 0, "given up");
        open.send(true).unwrap();
        assert!(shared.read("t1", 0, Some(7), counted(&reads, gate.clone())).await.is_ok());
        assert_eq!(reads.load(Ordering::SeqCst), 2, "read afresh");
    }
}
