//! The runs in flight, in memory: who runs where, the text streamed so
//! far, and the handle to stop each. The registry guarantees that one
//! member never runs twice at once on one thread (F-C5).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kd_proto::types::{Message, Purpose, RunInfo, RunStatus, ThreadEvent};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::ClientId;
use crate::hub::Hub;

/// Why a run is being stopped before it finished on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A client asked (`run.cancel`, interrupt).
    Cancelled,
    /// Its timeout passed.
    TimedOut,
    /// Its answer passed `council.max_answer_bytes`.
    TooLong,
    /// The daemon is shutting down.
    Shutdown,
}

struct State {
    status: RunStatus,
    pid: Option<u32>,
    text: String,
    chars: u64,
    stop: Option<StopReason>,
    /// The message the run ended with, once written.
    message: Option<Arc<Message>>,
}

/// One run in flight.
pub struct Run {
    pub id: String,
    /// Start order: fixes the answer's place in the thread (`kd_proto::order`).
    pub ordinal: u64,
    pub thread: String,
    pub member: String,
    pub backend: String,
    pub started_at_ms: i64,
    pub reply_to: Option<u64>,
    pub round: Option<u32>,
    /// The King's message whose exchange it belongs to.
    pub exchange: Option<u64>,
    /// The failed message it retries.
    pub replaces: Option<u64>,
    pub purpose: Option<Purpose>,
    /// The client whose request started it.
    pub client: Option<ClientId>,
    state: Mutex<State>,
    cancel: CancellationToken,
    done: watch::Sender<bool>,
}

/// Where a run stands in the conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place {
    /// The message it answers (the history it sees ends there).
    pub reply_to: Option<u64>,
    pub round: Option<u32>,
    pub exchange: Option<u64>,
    pub replaces: Option<u64>,
    /// What it writes for a multicast completion (a ballot, a synthesis).
    pub purpose: Option<Purpose>,
}

/// A run as a subscriber joining mid-run first sees it.
pub struct Snapshot {
    pub info: RunInfo,
    pub text: String,
}

impl Run {
    pub fn new(
        id: String,
        ordinal: u64,
        thread: String,
        member: String,
        backend: &str,
        place: Place,
        client: Option<ClientId>,
    ) -> Run {
        Run {
            id,
            ordinal,
            thread,
            member,
            backend: backend.to_string(),
            started_at_ms: crate::db::now_ms(),
            reply_to: place.reply_to,
            round: place.round,
            exchange: place.exchange,
            replaces: place.replaces,
            purpose: place.purpose,
            client,
            state: Mutex::new(State {
                status: RunStatus::Waiting,
                pid: None,
                text: String::new(),
                chars: 0,
                stop: None,
                message: None,
            }),
            cancel: CancellationToken::new(),
            done: watch::channel(false).0,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn info(&self) -> RunInfo {
        let s = self.state();
        self.info_of(&s)
    }

    fn info_of(&self, s: &State) -> RunInfo {
        RunInfo {
            id: self.id.clone(),
            thread: self.thread.clone(),
            member: self.member.clone(),
            backend: self.backend.clone(),
            status: s.status,
            pid: s.pid,
            started_at_ms: self.started_at_ms,
            chars: s.chars,
            reply_to: self.reply_to,
            round: self.round,
            exchange: self.exchange,
            replaces: self.replaces,
            ordinal: self.ordinal,
            purpose: self.purpose,
        }
    }

    /// Its state and text, taken atomically with respect to deltas.
    pub fn snapshot(&self) -> Snapshot {
        let s = self.state();
        Snapshot { info: self.info_of(&s), text: s.text.clone() }
    }

    pub fn is_in_flight(&self) -> bool {
        !self.state().status.is_finished()
    }

    pub fn text(&self) -> String {
        self.state().text.clone()
    }

    /// Bytes of text streamed so far.
    pub fn text_len(&self) -> usize {
        self.state().text.len()
    }

    /// The text streamed after byte `offset`, and the length it brings the
    /// text to.
    pub fn text_since(&self, offset: usize) -> (String, usize) {
        let s = self.state();
        (s.text.get(offset..).unwrap_or_default().to_string(), s.text.len())
    }

    pub fn set_started(&self, pid: u32) {
        let mut s = self.state();
        s.pid = Some(pid);
        s.status = RunStatus::Streaming;
    }

    pub fn pid(&self) -> Option<u32> {
        self.state().pid
    }

    /// Marks the run finished (before its message is written), so that
    /// subscribers joining from now on do not see it as in flight.
    pub fn set_status(&self, status: RunStatus) {
        self.state().status = status;
    }

    /// Appends streamed text and publishes it, under the run's lock so that
    /// a snapshot never splits a delta.
    pub fn push_delta(&self, hub: &Hub, text: &str) {
        let mut s = self.state();
        s.text.push_str(text);
        s.chars += text.chars().count() as u64;
        hub.publish(
            &self.thread,
            ThreadEvent::Delta {
                run: self.id.clone(),
                member: self.member.clone(),
                text: text.to_string(),
                chars: s.chars,
            },
        );
    }

    /// Tells subscribers what the agent is doing (cut to 200 characters).
    pub fn push_activity(&self, hub: &Hub, what: &str) {
        let what: String = what.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(200).collect();
        if what.is_empty() {
            return;
        }
        hub.publish(&self.thread, ThreadEvent::Activity { run: self.id.clone(), member: self.member.clone(), what });
    }

    /// Asks the run to stop; the first reason wins.
    pub fn stop(&self, reason: StopReason) {
        let mut s = self.state();
        if s.stop.is_none() && !s.status.is_finished() {
            s.stop = Some(reason);
            self.cancel.cancel();
        }
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.state().stop
    }

    /// Resolves when a stop was asked for.
    pub async fn stopped(&self) {
        self.cancel.cancelled().await
    }

    /// Keeps the message the run ended with (before [`Run::mark_done`]).
    pub fn set_message(&self, m: Message) {
        self.state().message = Some(Arc::new(m));
    }

    /// The message the run ended with, once it is done.
    pub fn message(&self) -> Option<Arc<Message>> {
        self.state().message.clone()
    }

    pub fn mark_done(&self) {
        self.done.send_replace(true);
    }

    /// Resolves once the run's message is written.
    pub async fn done(&self) {
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }
}

#[derive(Default)]
pub struct Registry {
    runs: Mutex<HashMap<String, Arc<Run>>>,
    last_ordinal: std::sync::atomic::AtomicU64,
}

impl Registry {
    fn runs(&self) -> MutexGuard<'_, HashMap<String, Arc<Run>>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The member's run in flight on the thread, or a new one made by
    /// `make` (given the run's ordinal) and registered. The bool says
    /// whether it was already running.
    pub fn claim(&self, thread: &str, member: &str, make: impl FnOnce(u64) -> Run) -> (Arc<Run>, bool) {
        let mut runs = self.runs();
        if let Some(r) = runs.values().find(|r| r.thread == thread && r.member == member && r.is_in_flight()) {
            return (r.clone(), true);
        }
        let run = Arc::new(make(self.next_ordinal()));
        runs.insert(run.id.clone(), run.clone());
        (run, false)
    }

    /// The next start ordinal: the time in microseconds, or one more than
    /// the last when the clock has not moved on, so it grows strictly, also
    /// across daemon restarts.
    fn next_ordinal(&self) -> u64 {
        use std::sync::atomic::Ordering;
        let now = u64::try_from(crate::db::now_ms()).unwrap_or(0).saturating_mul(1000);
        let mut last = self.last_ordinal.load(Ordering::Relaxed);
        loop {
            let next = now.max(last + 1);
            match self.last_ordinal.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    pub fn remove(&self, id: &str) {
        self.runs().remove(id);
    }

    /// Runs in flight, oldest first; of one thread if given.
    pub fn list(&self, thread: Option<&str>) -> Vec<Arc<Run>> {
        let mut v: Vec<Arc<Run>> = self
            .runs()
            .values()
            .filter(|r| thread.is_none_or(|t| r.thread == t) && r.is_in_flight())
            .cloned()
            .collect();
        v.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        v
    }

    /// Every registered run, finishing ones included.
    pub fn all(&self) -> Vec<Arc<Run>> {
        self.runs().values().cloned().collect()
    }

    pub fn count(&self) -> usize {
        self.runs().values().filter(|r| r.is_in_flight()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, thread: &str, member: &str) -> Run {
        Run::new(
            id.into(),
            1,
            thread.into(),
            member.into(),
            "claude",
            Place { reply_to: Some(1), ..Place::default() },
            None,
        )
    }

    #[test]
    fn one_member_runs_once_per_thread() {
        let reg = Registry::default();
        let (a, attached) = reg.claim("t", "claude", |_| run("r1", "t", "claude"));
        assert!(!attached);
        let (b, attached) = reg.claim("t", "claude", |_| run("r2", "t", "claude"));
        assert!(attached && Arc::ptr_eq(&a, &b));
        let (_, attached) = reg.claim("u", "claude", |_| run("r3", "u", "claude"));
        assert!(!attached, "another thread");
        a.set_status(RunStatus::Done);
        let (c, attached) = reg.claim("t", "claude", |_| run("r4", "t", "claude"));
        assert!(!attached && c.id == "r4", "a finishing run does not block a new one");
        assert_eq!(reg.count(), 2);
    }

    #[test]
    fn runs_are_numbered_in_the_order_they_are_claimed() {
        let reg = Registry::default();
        let ordinals: Vec<u64> = (0..100)
            .map(|i| {
                reg.claim("t", &format!("m{i}"), |o| Run { ordinal: o, ..run(&format!("r{i}"), "t", "m") }).0.ordinal
            })
            .collect();
        assert!(ordinals.windows(2).all(|w| w[0] < w[1]), "strictly growing: {ordinals:?}");
    }

    #[test]
    fn deltas_count_characters_and_snapshots_match() {
        let hub = Hub::new();
        let r = run("r1", "t", "claude");
        r.push_delta(&hub, "héllo ");
        r.push_delta(&hub, "wörld");
        let s = r.snapshot();
        assert_eq!((s.text.as_str(), s.info.chars), ("héllo wörld", 11));
    }

    #[test]
    fn the_first_stop_reason_wins() {
        let r = run("r1", "t", "claude");
        r.stop(StopReason::TimedOut);
        r.stop(StopReason::Cancelled);
        assert_eq!(r.stop_reason(), Some(StopReason::TimedOut));
    }
}
