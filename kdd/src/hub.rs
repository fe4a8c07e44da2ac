//! Fan-out of thread events to subscribers.
//!
//! One `tokio::sync::broadcast` channel per thread that has subscribers.
//! An event is serialised once, when published, and every subscriber sends
//! the same JSON. A subscriber that falls more than [`CAPACITY`] events
//! behind loses the oldest and is told how many (`lagged`); messages are
//! then re-read from the registry, so only transient items are lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kd_proto::types::{RunStatus, ThreadEvent};
use serde_json::value::RawValue;
use tokio::sync::broadcast;

/// Events buffered per thread for the slowest subscriber.
pub const CAPACITY: usize = 8192;

/// An event as published: its JSON, and what subscribers need to skip
/// what they already sent (the message seq, the run it concerns).
#[derive(Debug)]
pub struct Published {
    pub seq: Option<u64>,
    pub run: Option<RunMark>,
    pub json: Box<RawValue>,
}

/// The run events a subscriber may already have sent from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunMark {
    Waiting {
        run: String,
        queued: bool,
    },
    Started(String),
    /// The run and its character count after the delta.
    Delta(String, u64),
}

#[derive(Default)]
pub struct Hub {
    threads: Mutex<HashMap<String, broadcast::Sender<Arc<Published>>>>,
    subscriptions: AtomicU64,
    /// Told whenever a subscription ends.
    ended: tokio::sync::Notify,
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
                let (tx, rx) = broadcast::channel(CAPACITY);
                threads.insert(thread.to_string(), tx);
                rx
            }
        }
    }

    /// Sends `event` to the thread's subscribers; free when there are none.
    pub fn publish(&self, thread: &str, event: ThreadEvent) {
        let tx = {
            let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
            let Some(tx) = threads.get(thread) else { return };
            if tx.receiver_count() == 0 {
                threads.remove(thread);
                return;
            }
            tx.clone()
        };
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
            _ => None,
        };
        match serde_json::value::to_raw_value(&event) {
            Ok(json) => {
                let _ = tx.send(Arc::new(Published { seq, run, json }));
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
    fn a_thread_without_subscribers_is_forgotten() {
        let hub = Hub::new();
        drop(hub.subscribe("t"));
        hub.publish("t", message(1));
        assert!(hub.threads.lock().map(|t| t.is_empty()).unwrap_or(false));
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
}
