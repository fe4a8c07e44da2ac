//! Attention (issue 33): kd tells the King when it is needed — an approval
//! waits, an exchange or a work task ended, a member failed or timed out, a
//! budget stopped an exchange, an emergency broadcast went unacknowledged —
//! through the sinks of the `notify` configuration ([`crate::config::notify`]).
//!
//! Nothing here is on a run's path. The notifier taps the hub
//! ([`crate::hub::Hub::tap`]): for each event published on this node,
//! [`what::glance`] keeps the few fields it needs and hands them to a
//! bounded queue with `try_send` (full: the event is dropped and counted,
//! never waited for). One task reads the queue and decides
//! ([`what::Attention`]: at most one notification per exchange and kind);
//! each notification is then delivered by a task of its own — the thread
//! and the configuration read, each sink called at once, each call bounded
//! by `notify.timeout` — and at most [`SLOTS`] deliveries run at a time
//! (past them, one is dropped and counted). A failing sink is logged.
//! Each notification is also numbered when it is decided, and kept in the
//! [`feed::Feed`] for `notify.subscribe` (kd web's attention view) in that
//! order, sinks or none.
//!
//! On a registry several nodes share, each node notifies what happened on
//! it (the tap sees no other node's events), so nothing is sent twice.

mod desktop;
pub mod feed;
mod sinks;
#[cfg(test)]
mod tests;
pub mod what;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kd_proto::notify::{Notification, NotifyKind, NotifyStats, NotifyTest, SinkAnswer};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::config::notify::Notify;
use crate::config::{ConfigError, Env};
use crate::db::Db;
use crate::hub::Hub;
use what::{Attention, Draft, Next, Seen};

/// Events waiting for the notifier's task.
pub const QUEUE: usize = 1024;
/// Deliveries (and emergency timers) at once.
pub const SLOTS: usize = 32;
/// How long a delivery may take to read its thread and configuration
/// before it is given up (the notifications after it wait for it).
const READ: std::time::Duration = std::time::Duration::from_secs(10);

pub struct Notifier {
    db: Arc<Db>,
    /// Every notification made, for `notify.subscribe`.
    pub feed: feed::Feed,
    /// The webhook client, made at the first webhook: a daemon without
    /// one never loads TLS and HTTP client code (idle memory, issue 31).
    http: std::sync::OnceLock<Result<sinks::Http, String>>,
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: Arc<AtomicU64>,
    slots: Arc<Semaphore>,
}

impl Notifier {
    pub fn new(db: Arc<Db>) -> Notifier {
        Notifier {
            db,
            feed: feed::Feed::new(crate::db::now_ms()),
            http: std::sync::OnceLock::new(),
            sent: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped: Arc::new(AtomicU64::new(0)),
            slots: Arc::new(Semaphore::new(SLOTS)),
        }
    }

    fn http(&self) -> &Result<sinks::Http, String> {
        self.http.get_or_init(|| {
            let http = sinks::http();
            if let Err(e) = &http {
                tracing::error!("{e}");
            }
            http
        })
    }

    pub fn stats(&self) -> NotifyStats {
        NotifyStats {
            sent: self.sent.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// Taps `hub` and runs the notifier until `shutdown`.
    pub fn start(self: &Arc<Self>, hub: &Hub, shutdown: CancellationToken) {
        let (tx, rx) = mpsc::channel::<(Arc<str>, Seen)>(QUEUE);
        let dropped = self.dropped.clone();
        hub.tap(move |thread, event| {
            if let Some(seen) = what::glance(event)
                && tx.try_send((Arc::from(thread), seen)).is_err()
            {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
        });
        tokio::spawn(self.clone().run(rx, shutdown));
    }

    async fn run(self: Arc<Self>, mut rx: mpsc::Receiver<(Arc<str>, Seen)>, shutdown: CancellationToken) {
        let mut attention = Attention::default();
        let (due_tx, mut due_rx) = mpsc::channel::<String>(SLOTS);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                got = rx.recv() => {
                    let Some((thread, seen)) = got else { return };
                    match attention.see(&thread, seen) {
                        Next::Nothing => {}
                        Next::Send(draft) => self.spawn_delivery(thread.to_string(), draft),
                        Next::Arm { broadcast } => self.arm(thread.to_string(), broadcast, due_tx.clone()),
                    }
                }
                Some(broadcast) = due_rx.recv() => {
                    if let Some((thread, draft)) = attention.due(&broadcast) {
                        self.spawn_delivery(thread, draft);
                    }
                }
            }
        }
    }

    /// Delivers `draft` in a task of its own, if a slot is free.
    fn spawn_delivery(self: &Arc<Self>, thread: String, draft: Draft) {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(thread, kind = draft.kind.as_str(), "a notification was dropped: too many in flight");
            return;
        };
        // Numbered here, in the order kd decided, not when the delivery
        // has read the thread and configuration.
        let turn = self.feed.turn();
        let me = self.clone();
        tokio::spawn(async move {
            me.deliver(&thread, draft, turn).await;
            drop(slot);
        });
    }

    /// After the workspace's `notify.ack_within`, tells the loop to look at
    /// the broadcast again.
    fn arm(self: &Arc<Self>, thread: String, broadcast: String, due: mpsc::Sender<String>) {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let after = match me.config_of(&thread).await {
                Some((_, config)) => config.ack_within,
                None => return,
            };
            tokio::time::sleep(after).await;
            let _ = due.send(broadcast).await;
            drop(slot);
        });
    }

    /// The thread and its workspace's sinks (none: logged).
    async fn config_of(&self, thread: &str) -> Option<(kd_proto::types::Thread, Notify)> {
        let t = match self.db.thread(thread.to_string()).await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(thread, "no notification: cannot read the thread: {e}");
                return None;
            }
        };
        let workspace = t.workspace.clone();
        let loaded =
            tokio::task::spawn_blocking(move || crate::config::notify::load(Path::new(&workspace), &Env::process()))
                .await;
        match loaded {
            Ok(Ok(config)) => Some((t, config)),
            Ok(Err(e)) => {
                tracing::warn!(thread, "no notification: {e}");
                None
            }
            Err(e) => {
                tracing::warn!(thread, "no notification: {e}");
                None
            }
        }
    }

    /// Delivers `draft` in its `turn` of the feed (given up if nothing is
    /// told).
    async fn deliver(&self, thread: &str, draft: Draft, turn: feed::Turn) {
        // Bounded: a later notification waits for this one's turn.
        let Ok(Some((t, config))) = tokio::time::timeout(READ, self.config_of(thread)).await else { return };
        if !config.kinds.contains(&draft.kind) {
            return;
        }
        let about = t.title.as_deref().map(|s| what::clip(s, 80)).unwrap_or_else(|| t.id.clone());
        let n = Notification {
            id: 0,
            kind: draft.kind,
            thread: Some(t.id.clone()),
            title: what::clip(&format!("kd: {} — {about}", draft.title), 200),
            member: draft.member,
            text: what::clip(&draft.text, 1000),
            link: config.link.as_ref().map(|l| l.replace("{thread}", &t.id)),
            workspace: Some(t.workspace.clone()),
            exchange: draft.exchange,
            approval: draft.approval,
            at_ms: crate::db::now_ms(),
        };
        let n = turn.publish(n);
        if !config.has_sinks() {
            return;
        }
        for a in self.call_all(&config, &n).await {
            if !a.ok {
                tracing::warn!(thread, kind = n.kind.as_str(), sink = a.sink, target = a.target, "{}", a.answer);
            }
        }
    }

    /// Calls every sink of `config` with `n` at once; their answers.
    async fn call_all(&self, config: &Notify, n: &Notification) -> Vec<SinkAnswer> {
        let mut calls: Vec<std::pin::Pin<Box<dyn Future<Output = SinkAnswer> + Send + '_>>> = Vec::new();
        for url in &config.webhooks {
            calls.push(Box::pin(sinks::webhook(self.http().as_ref(), url, n, config.timeout)));
        }
        for argv in &config.commands {
            calls.push(Box::pin(sinks::command(argv, n, config.timeout)));
        }
        if config.desktop {
            calls.push(Box::pin(desktop::desktop(n, config.timeout)));
        }
        let answers = futures_util::future::join_all(calls).await;
        for a in &answers {
            let counter = if a.ok { &self.sent } else { &self.failed };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        answers
    }

    /// `notify.test`: one `test` notification to each sink of `workspace`,
    /// about its most recently active thread if it has one (so that the
    /// link names it).
    pub async fn test(&self, workspace: &Path) -> Result<NotifyTest, ConfigError> {
        let ws = workspace.to_path_buf();
        let config = tokio::task::spawn_blocking(move || crate::config::notify::load(&ws, &Env::process()))
            .await
            .map_err(|e| ConfigError { file: None, key: "notify".into(), message: e.to_string() })??;
        let newest = self.db.threads(Some(workspace.display().to_string()), None, Some(1));
        let thread = match tokio::time::timeout(READ, newest).await {
            Ok(Ok(threads)) => threads.into_iter().next().map(|t| t.id),
            _ => None,
        };
        let n = Notification {
            id: 0,
            kind: NotifyKind::Test,
            thread: thread.clone(),
            title: "kd: a test notification".into(),
            member: None,
            text: format!("kd notify test from {}: the sinks of this workspace work.", workspace.display()),
            link: config.link.as_ref().map(|l| l.replace("{thread}", thread.as_deref().unwrap_or_default())),
            workspace: Some(workspace.display().to_string()),
            exchange: None,
            approval: None,
            at_ms: crate::db::now_ms(),
        };
        let sinks = self.call_all(&config, &n).await;
        Ok(NotifyTest { sent: n, sinks, stats: self.stats() })
    }
}
