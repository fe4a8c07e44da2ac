//! The page's feed of notifications (`notify.subscribe`): every
//! notification the notifier makes, whether or not a sink is configured,
//! numbered and kept in memory (the newest [`KEPT`]) for a page that opens
//! or reconnects later, and broadcast to the subscribers live.
//!
//! Numbers start from the clock at kdd's start (in microseconds), so a
//! page that saw notification `n` before a restart asks `since: n` and gets
//! only what is new. Nothing here is stored: the registry keeps the
//! facts, and a notification is a view of them.
//!
//! Notifications are numbered and published in the order kd made them, not
//! the order their deliveries finished reading the thread and
//! configuration: the notifier takes a numbered [`Turn`] when it decides,
//! and a turn is published only after every earlier one was settled
//! (published, or given up when its delivery found nothing to tell or
//! ended; its number is then left unused).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;

use kd_proto::notify::{KEPT, Notification};
use tokio::sync::broadcast;

/// Live items queued per subscriber before it lags.
const LIVE: usize = 64;

pub struct Feed {
    inner: Arc<Mutex<Kept>>,
    live: broadcast::Sender<Notification>,
}

struct Kept {
    newest: VecDeque<Notification>,
    /// The next turn's number, and the first turn not yet settled.
    turns: u64,
    settled: u64,
    /// Settled turns waiting for an earlier one (`None`: nothing to publish).
    early: BTreeMap<u64, Option<Notification>>,
}

/// A place in the feed's order, taken when the notifier decides to tell.
/// Settled by [`Turn::publish`]; dropped unsettled, it gives its place up.
pub struct Turn {
    n: u64,
    feed: Arc<Mutex<Kept>>,
    live: broadcast::Sender<Notification>,
    settled: bool,
}

impl Feed {
    pub fn new(now_ms: i64) -> Feed {
        let first = u64::try_from(now_ms).unwrap_or(0).saturating_mul(1000).max(1);
        Feed {
            inner: Arc::new(Mutex::new(Kept {
                newest: VecDeque::with_capacity(KEPT),
                turns: first,
                settled: first,
                early: BTreeMap::new(),
            })),
            live: broadcast::channel(LIVE).0,
        }
    }

    /// The next place in the feed's order.
    pub fn turn(&self) -> Turn {
        let mut kept = lock(&self.inner);
        let n = kept.turns;
        kept.turns += 1;
        Turn { n, feed: self.inner.clone(), live: self.live.clone(), settled: false }
    }

    /// Numbers `n`, keeps it and hands it to every subscriber now (after
    /// the turns already taken that are settled).
    #[cfg(test)]
    pub fn publish(&self, n: Notification) -> Notification {
        self.turn().publish(n)
    }

    /// The kept notifications numbered after `since` (oldest first) and
    /// the live ones after them.
    pub fn subscribe(&self, since: Option<u64>) -> (Vec<Notification>, broadcast::Receiver<Notification>) {
        let kept = lock(&self.inner);
        let after = since.unwrap_or(0);
        (kept.newest.iter().filter(|n| n.id > after).cloned().collect(), self.live.subscribe())
    }
}

fn lock(kept: &Mutex<Kept>) -> std::sync::MutexGuard<'_, Kept> {
    kept.lock().unwrap_or_else(|e| e.into_inner())
}

impl Turn {
    /// Numbers `n` with this turn's number, and keeps it and hands it to
    /// every subscriber once the earlier turns are settled.
    pub fn publish(mut self, mut n: Notification) -> Notification {
        self.settled = true;
        n.id = self.n;
        self.settle(Some(n.clone()));
        n
    }

    /// Settles this turn with `n` (or none), and publishes every settled
    /// turn no earlier one holds back.
    fn settle(&self, n: Option<Notification>) {
        let mut kept = lock(&self.feed);
        kept.early.insert(self.n, n);
        loop {
            let next = kept.settled;
            let Some(n) = kept.early.remove(&next) else { break };
            kept.settled += 1;
            let Some(n) = n else { continue };
            if kept.newest.len() == KEPT {
                kept.newest.pop_front();
            }
            kept.newest.push_back(n.clone());
            // Sent under the lock: a subscriber gets each one once, either
            // in its kept list or live.
            let _ = self.live.send(n);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::notify::NotifyKind;

    fn note(title: &str) -> Notification {
        Notification {
            id: 0,
            kind: NotifyKind::Done,
            thread: Some("t-1".into()),
            title: title.into(),
            member: None,
            text: String::new(),
            link: None,
            workspace: None,
            exchange: None,
            approval: None,
            at_ms: 1,
        }
    }

    #[test]
    fn a_subscriber_gets_the_kept_ones_after_since_then_each_new_one_once() {
        let feed = Feed::new(5);
        let a = feed.publish(note("a"));
        let b = feed.publish(note("b"));
        assert_eq!((a.id, b.id), (5000, 5001));
        let (kept, mut live) = feed.subscribe(Some(a.id));
        assert_eq!(kept.iter().map(|n| n.title.as_str()).collect::<Vec<_>>(), ["b"]);
        feed.publish(note("c"));
        assert_eq!(live.try_recv().unwrap().title, "c");
        assert!(live.try_recv().is_err());
        let (all, _) = feed.subscribe(None);
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn notifications_are_numbered_in_the_order_of_their_turns_not_of_their_publishing() {
        let feed = Feed::new(5);
        let (first, second, third) = (feed.turn(), feed.turn(), feed.turn());
        let (_, mut live) = feed.subscribe(None);
        third.publish(note("third"));
        second.publish(note("second"));
        assert!(live.try_recv().is_err(), "nothing before the first turn settles");
        drop(first);
        let order: Vec<_> = std::iter::from_fn(|| live.try_recv().ok()).map(|n| (n.id, n.title)).collect();
        assert_eq!(order, [(5001, "second".to_string()), (5002, "third".to_string())]);
        assert_eq!(feed.publish(note("after")).id, 5003);
    }

    #[test]
    fn only_the_newest_are_kept_and_a_restart_numbers_past_them() {
        let feed = Feed::new(7);
        for i in 0..KEPT + 5 {
            feed.publish(note(&i.to_string()));
        }
        let (kept, _) = feed.subscribe(None);
        assert_eq!(kept.len(), KEPT);
        assert_eq!(kept[0].title, "5");
        let last = kept.last().unwrap().id;
        let later = Feed::new(8).publish(note("after a restart"));
        assert!(later.id > last, "{} > {last}", later.id);
    }
}
