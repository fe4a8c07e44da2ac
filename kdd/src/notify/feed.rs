//! The page's feed of notifications (`notify.subscribe`): every
//! notification the notifier makes, whether or not a sink is configured,
//! numbered and kept in memory (the newest [`KEPT`]) for a page that opens
//! or reconnects later, and broadcast to the subscribers live.
//!
//! Numbers start from the clock at kdd's start (in microseconds), so a
//! page that saw notification `n` before a restart asks `since: n` and gets
//! only what is new. Nothing here is stored: the registry keeps the
//! facts, and a notification is a view of them.

use std::collections::VecDeque;
use std::sync::Mutex;

use kd_proto::notify::{KEPT, Notification};
use tokio::sync::broadcast;

/// Live items queued per subscriber before it lags.
const LIVE: usize = 64;

pub struct Feed {
    inner: Mutex<Kept>,
    live: broadcast::Sender<Notification>,
}

struct Kept {
    next: u64,
    newest: VecDeque<Notification>,
}

impl Feed {
    pub fn new(now_ms: i64) -> Feed {
        let first = u64::try_from(now_ms).unwrap_or(0).saturating_mul(1000).max(1);
        Feed {
            inner: Mutex::new(Kept { next: first, newest: VecDeque::with_capacity(KEPT) }),
            live: broadcast::channel(LIVE).0,
        }
    }

    /// Numbers `n`, keeps it and hands it to every subscriber.
    pub fn publish(&self, mut n: Notification) -> Notification {
        let mut kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        n.id = kept.next;
        kept.next += 1;
        if kept.newest.len() == KEPT {
            kept.newest.pop_front();
        }
        kept.newest.push_back(n.clone());
        // Sent under the lock: a subscriber gets each one once, either in
        // its kept list or live.
        let _ = self.live.send(n.clone());
        n
    }

    /// The kept notifications numbered after `since` (oldest first) and
    /// the live ones after them.
    pub fn subscribe(&self, since: Option<u64>) -> (Vec<Notification>, broadcast::Receiver<Notification>) {
        let kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let after = since.unwrap_or(0);
        (kept.newest.iter().filter(|n| n.id > after).cloned().collect(), self.live.subscribe())
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
