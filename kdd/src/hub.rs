//! Fan-out of thread events to subscribers.
//!
//! One `tokio::sync::broadcast` channel per thread that has subscribers.
//! A channel whose last subscriber left is kept for the thread's next one
//! (a few, [`IDLE_KEPT`]): `kd ask` subscribes to a thread at every
//! question, and making and dropping a channel of [`CAPACITY`] slots each
//! time (320 KiB, written whole) was a few per cent of kdd's work on an
//! ask (issue 31, item 17).
//! An event is serialised once, when published, and every subscriber sends
//! the same JSON. A subscriber that falls more than [`CAPACITY`] events
//! behind loses the oldest and is told how many (`lagged`); messages are
//! then re-read from the registry, so only transient items are lost (a
//! run's events before its message: `rpc::subscribe`).
//!
//! On a registry several nodes share, an engine installs a **relay**
//! ([`Hub::relay_to`]): everything published here also goes to it, for
//! the other nodes; what comes from them is published with
//! [`Hub::publish_here`], which reaches this node's subscribers only.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kd_proto::approval::ApprovalEvent;
use kd_proto::types::{RunStatus, ThreadEvent};
use serde_json::value::RawValue;
use tokio::sync::broadcast;

/// Events buffered per thread for the slowest subscriber.
pub const CAPACITY: usize = 8192;

/// Channels kept without a subscriber, for their threads' next: past it,
/// those without one are dropped when another thread's channel is made.
/// (A channel holds no event once every subscriber has read or left it.)
pub const IDLE_KEPT: usize = 4;

/// An event as published: its JSON, and what subscribers need to skip
/// what they already sent (the message seq, the run it concerns).
#[derive(Debug)]
pub struct Published {
    pub seq: Option<u64>,
    pub run: Option<RunMark>,
    pub json: Box<RawValue>,
}

/// The events of a run in flight, which a subscriber may already have
/// sent (from a snapshot of the run, or as its message, from the backlog).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunMark {
    Waiting {
        run: String,
        queued: bool,
    },
    Started(String),
    /// The run and its character count after the delta.
    Delta(String, u64),
    Activity(String),
}

impl RunMark {
    /// The run the event is of.
    pub fn run(&self) -> &str {
        match self {
            RunMark::Waiting { run, .. } | RunMark::Started(run) | RunMark::Delta(run, _) | RunMark::Activity(run) => {
                run
            }
        }
    }
}

/// Where every event published on this node also goes.
type Relay = Box<dyn Fn(Arc<str>, Arc<Published>) + Send + Sync>;

/// What looks at every event published on this node, before it is
/// serialised (the notifier): it must only glance and hand off.
type Tap = Box<dyn Fn(&str, &ThreadEvent) + Send + Sync>;

#[derive(Default)]
pub struct Hub {
    threads: Mutex<HashMap<String, broadcast::Sender<Arc<Published>>>>,
    relay: std::sync::OnceLock<Relay>,
    tap: std::sync::OnceLock<Tap>,
    subscriptions: AtomicU64,
    /// Told whenever a subscription ends.
    ended: tokio::sync::Notify,
    /// Every thread's approval events (`approval.subscribe`), whichever
    /// node published them.
    approvals: ApprovalFeed,
}

/// The approval events of every thread, for the King's clients.
pub struct ApprovalFeed(broadcast::Sender<Arc<ApprovalEvent>>);

impl Default for ApprovalFeed {
    fn default() -> ApprovalFeed {
        ApprovalFeed(broadcast::channel(1024).0)
    }
}

impl Hub {
    pub fn new() -> Hub {
        Hub::default()
    }

    /// A receiver of every event published on `thread` from now on.
    pub fn subscribe(&self, thread: &str) -> broadcast::Receiver<Arc<Published>> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        match threads.get(thread) {
            Some(tx) => tx.subscribe(),
            None => {
                if threads.values().filter(|tx| tx.receiver_count() == 0).nth(IDLE_KEPT.saturating_sub(1)).is_some() {
                    threads.retain(|_, tx| tx.receiver_count() > 0);
                }
                let (tx, rx) = broadcast::channel(CAPACITY);
                threads.insert(thread.to_string(), tx);
                rx
            }
        }
    }

    /// Sends `event` to the thread's subscribers (and to the relay, when
    /// there is one); free when there are none.
    pub fn publish(&self, thread: &str, event: ThreadEvent) {
        if let Some(tap) = self.tap.get() {
            tap(thread, &event);
        }
        self.send(thread, event, self.relay.get());
    }

    /// Sends `event`, which came from another node, to this node's
    /// subscribers of the thread only.
    pub fn publish_here(&self, thread: &str, event: ThreadEvent) {
        self.send(thread, event, None);
    }

    /// From now on every event published on this node also goes to `relay`
    /// (set once: by the engine that shares the registry with other nodes).
    pub fn relay_to(&self, relay: impl Fn(Arc<str>, Arc<Published>) + Send + Sync + 'static) {
        if self.relay.set(Box::new(relay)).is_err() {
            tracing::error!("a second relay of the hub was refused");
        }
    }

    /// From now on `tap` sees every event published on this node (not what
    /// came from other nodes, which theirs see), whether or not anyone
    /// subscribes to its thread. Set once, by the notifier; it runs on the
    /// publisher's path, so it must not block.
    pub fn tap(&self, tap: impl Fn(&str, &ThreadEvent) + Send + Sync + 'static) {
        if self.tap.set(Box::new(tap)).is_err() {
            tracing::error!("a second tap of the hub was refused");
        }
    }

    /// A receiver of every thread's approval events from now on.
    pub fn subscribe_approvals(&self) -> broadcast::Receiver<Arc<ApprovalEvent>> {
        self.approvals.0.subscribe()
    }

    /// Whether a King's client can answer an approval of `thread` now: it
    /// follows every approval, or this thread.
    pub fn king_listens(&self, thread: &str) -> bool {
        self.approvals.0.receiver_count() > 0 || self.is_watched(thread)
    }

    /// The threads this node has subscribers of.
    pub fn watched(&self) -> Vec<String> {
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.iter().filter(|(_, tx)| tx.receiver_count() > 0).map(|(t, _)| t.clone()).collect()
    }

    /// Whether this node has subscribers of `thread`.
    pub fn is_watched(&self, thread: &str) -> bool {
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.get(thread).is_some_and(|tx| tx.receiver_count() > 0)
    }

    fn send(&self, thread: &str, event: ThreadEvent, relay: Option<&Relay>) {
        let approval = match &event {
            ThreadEvent::ApprovalRequested { approval } => {
                Some(ApprovalEvent::Requested { approval: approval.clone() })
            }
            ThreadEvent::ApprovalDecided { approval } => Some(ApprovalEvent::Decided { approval: approval.clone() }),
            _ => None,
        };
        if let Some(a) = approval
            && self.approvals.0.receiver_count() > 0
        {
            let _ = self.approvals.0.send(Arc::new(a));
        }
        let tx = {
            let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
            threads.get(thread).filter(|tx| tx.receiver_count() > 0).cloned()
        };
        if tx.is_none() && relay.is_none() {
            return;
        }
        // Serialised outside the map lock: other threads publish meanwhile.
        let seq = match &event {
            ThreadEvent::Message { message } => Some(message.seq),
            _ => None,
        };
        let run = match &event {
            ThreadEvent::RunWaiting { run } => {
                Some(RunMark::Waiting { run: run.id.clone(), queued: run.status == RunStatus::Queued })
            }
            ThreadEvent::RunStarted { run, .. } => Some(RunMark::Started(run.clone())),
            ThreadEvent::Delta { run, chars, .. } => Some(RunMark::Delta(run.clone(), *chars)),
            ThreadEvent::Activity { run, .. } => Some(RunMark::Activity(run.clone())),
            _ => None,
        };
        match serde_json::value::to_raw_value(&event) {
            Ok(json) => {
                let published = Arc::new(Published { seq, run, json });
                if let Some(relay) = relay {
                    relay(Arc::from(thread), published.clone());
                }
                if let Some(tx) = tx {
                    let _ = tx.send(published);
                }
            }
            Err(e) => tracing::error!("cannot serialise a thread event: {e}"),
        }
    }

    /// Counts an open subscription until the guard is dropped.
    pub fn track(self: &Arc<Self>) -> SubscriptionGuard {
        self.subscriptions.fetch_add(1, Ordering::Relaxed);
        SubscriptionGuard(self.clone())
    }

    pub fn subscription_count(&self) -> u64 {
        self.subscriptions.load(Ordering::Relaxed)
    }

    /// Resolves once no subscription is open.
    pub async fn all_ended(&self) {
        loop {
            let ended = self.ended.notified();
            if self.subscription_count() == 0 {
                return;
            }
            ended.await;
        }
    }
}

pub struct SubscriptionGuard(Arc<Hub>);

impl Drop for SubscriptionGuard {
    fn drop(&mut self) {
        self.0.subscriptions.fetch_sub(1, Ordering::Relaxed);
        self.0.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::types::Message;

    fn message(seq: u64) -> ThreadEvent {
        ThreadEvent::Message { message: Box::new(Message::new("t", seq, "king", "hi")) }
    }

    #[test]
    fn subscribers_of_a_thread_get_its_events_once_serialised() {
        let hub = Hub::new();
        let mut a = hub.subscribe("t");
        let mut b = hub.subscribe("t");
        let mut other = hub.subscribe("u");
        hub.publish("t", message(1));
        let (ea, eb) = (a.try_recv(), b.try_recv());
        assert!(matches!(&ea, Ok(p) if p.seq == Some(1) && p.json.get().contains("\"seq\":1")));
        assert!(matches!((ea, eb), (Ok(x), Ok(y)) if Arc::ptr_eq(&x, &y)));
        assert!(other.try_recv().is_err());
    }

    #[test]
    fn a_few_threads_without_subscribers_are_kept_for_their_next_one() {
        let hub = Hub::new();
        let kept = |hub: &Hub| {
            let mut t: Vec<String> = hub.threads.lock().unwrap().keys().cloned().collect();
            t.sort();
            t
        };
        let mut first = hub.subscribe("t");
        hub.publish("t", message(1));
        drop(first);
        hub.publish("t", message(2));
        assert_eq!(kept(&hub), ["t"], "kept for the thread's next subscriber");
        // The next subscriber has the same channel, and nothing of before.
        first = hub.subscribe("t");
        assert!(first.try_recv().is_err(), "nothing of before");
        hub.publish("t", message(3));
        assert_eq!(first.try_recv().unwrap().seq, Some(3));
        assert!(!hub.is_watched("u") && hub.watched() == ["t"]);
        // Past the bound, those without a subscriber go as a thread's is made.
        for t in ["a", "b", "c", "d"] {
            drop(hub.subscribe(t));
        }
        assert_eq!(kept(&hub), ["a", "b", "c", "d", "t"]);
        drop(hub.subscribe("e"));
        assert_eq!(kept(&hub), ["e", "t"], "the watched thread stays");
        drop(first);
        assert!(hub.watched().is_empty());
    }

    #[test]
    fn a_slow_subscriber_is_told_it_lagged() {
        let hub = Hub::new();
        let mut rx = hub.subscribe("t");
        for seq in 0..(CAPACITY as u64 + 5) {
            hub.publish("t", message(seq));
        }
        assert!(matches!(rx.try_recv(), Err(broadcast::error::TryRecvError::Lagged(5))));
    }

    #[test]
    fn the_relay_gets_what_is_published_here_and_not_what_came_from_elsewhere() {
        let hub = Hub::new();
        let relayed = Arc::new(Mutex::new(Vec::new()));
        let into = relayed.clone();
        hub.relay_to(move |thread, p| into.lock().unwrap().push((thread.to_string(), p.seq)));
        let mut rx = hub.subscribe("t");
        // Relayed even with no subscriber here: other nodes may have some.
        hub.publish("unwatched", message(1));
        hub.publish("t", message(2));
        hub.publish_here("t", message(3));
        assert_eq!(*relayed.lock().unwrap(), vec![("unwatched".to_string(), Some(1)), ("t".to_string(), Some(2))]);
        assert_eq!(rx.try_recv().unwrap().seq, Some(2));
        assert_eq!(rx.try_recv().unwrap().seq, Some(3), "another node's event reaches this node's subscribers");
        assert_eq!(hub.watched(), vec!["t".to_string()]);
        assert!(hub.is_watched("t") && !hub.is_watched("unwatched"));
    }

    #[test]
    fn the_tap_sees_every_event_published_here_watched_or_not() {
        let hub = Hub::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        hub.tap(move |thread, e| {
            if let ThreadEvent::Message { message } = e {
                into.lock().unwrap().push((thread.to_string(), message.seq))
            }
        });
        hub.publish("unwatched", message(1));
        hub.publish_here("t", message(2));
        assert_eq!(*seen.lock().unwrap(), vec![("unwatched".to_string(), 1)]);
    }
}
