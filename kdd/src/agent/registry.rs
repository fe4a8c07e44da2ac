//! The runs in flight, in memory: who runs where, the text streamed so
//! far, and the handle to stop each. The registry guarantees that one
//! member never runs twice at once on one thread (F-C5): a second request
//! for the *same* question joins the run answering it; a new question for
//! a busy member gets a run of its own that is *queued* behind the
//! member's runs on the thread and starts when they have ended
//! ([`Registry::turn`]), so no question is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kd_proto::types::{Message, Purpose, RunInfo, RunStatus, ThreadEvent};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::ClientId;
use crate::hub::Hub;

/// Why a run a member's emergency broadcast stopped was cancelled (its
/// end's `reason`).
pub const EMERGENCY_STOP: &str = "stopped by a member's emergency broadcast";

/// Why a run is being stopped before it finished on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A client asked (`run.cancel`, interrupt).
    Cancelled,
    /// A member's emergency broadcast asked (`stop`): cancelled, but not by
    /// the King ([`EMERGENCY_STOP`] says so on its end).
    Emergency,
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
    /// The capability the run was given (see [`super::grants`]).
    token: Option<String>,
    /// What the run's work should say (a setup's output, claude's refused
    /// writes), kept on its row when kd commits its work.
    work_notes: Vec<String>,
    /// The pending approval the run waits on (its status reads `waiting`
    /// meanwhile).
    approval: Option<String>,
    /// Whether the registry has the run's row (written with its session,
    /// as the run is about to start, or alone where it ends before).
    recorded: bool,
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
    /// The journal step it takes, if it answers one.
    pub step: Option<crate::db::exchanges::StepId>,
    /// The client whose request started it.
    pub client: Option<ClientId>,
    /// The `PATH` its agent was found on and run with (the asking
    /// client's; none: kdd's own): what it hands off to starts with it.
    pub path: Option<String>,
    place: Place,
    state: Mutex<State>,
    cancel: CancellationToken,
    done: watch::Sender<bool>,
}

/// Where a run stands in the conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Place {
    /// The message it answers (the history it sees ends there).
    pub reply_to: Option<u64>,
    pub round: Option<u32>,
    pub exchange: Option<u64>,
    pub replaces: Option<u64>,
    /// What it writes for a multicast completion (a ballot, a synthesis).
    pub purpose: Option<Purpose>,
    /// The exchange's journal step it takes (F-J1): the run may start only
    /// while that step is pending, and its end is the step's.
    pub step: Option<crate::db::exchanges::StepId>,
}

impl Place {
    /// Whether a run at `other` answers the same question: then a request
    /// for it joins the run instead of starting another.
    pub fn same_question(&self, other: &Place) -> bool {
        (self.reply_to, self.replaces, self.purpose) == (other.reply_to, other.replaces, other.purpose)
    }
}

/// How [`Registry::claim`] met a request for a member's run.
pub enum Claim {
    /// A new run, free to start now.
    New(Arc<Run>),
    /// The member's run answering the same question, already claimed.
    Joined(Arc<Run>),
    /// A new run, `queued` until the member's runs before it on the
    /// thread have ended ([`Registry::turn`]).
    Queued(Arc<Run>),
}

impl Claim {
    pub fn run(&self) -> &Arc<Run> {
        match self {
            Claim::New(r) | Claim::Joined(r) | Claim::Queued(r) => r,
        }
    }

    pub fn into_run(self) -> Arc<Run> {
        match self {
            Claim::New(r) | Claim::Joined(r) | Claim::Queued(r) => r,
        }
    }
}

/// A run as a subscriber joining mid-run first sees it.
pub struct Snapshot {
    pub info: RunInfo,
    pub text: String,
}

impl Run {
    /// The run, its agent found on and run with `path` ([`Run::path`]).
    pub fn found_on(mut self, path: Option<String>) -> Run {
        self.path = path;
        self
    }

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
            step: place.step,
            client,
            path: None,
            place,
            state: Mutex::new(State {
                status: RunStatus::Waiting,
                pid: None,
                text: String::new(),
                chars: 0,
                stop: None,
                message: None,
                token: None,
                work_notes: Vec::new(),
                approval: None,
                recorded: false,
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
            approval: s.approval.clone(),
        }
    }

    /// Its state and text, taken atomically with respect to deltas.
    pub fn snapshot(&self) -> Snapshot {
        let s = self.state();
        Snapshot { info: self.info_of(&s), text: s.text.clone() }
    }

    /// Adds a line to what the run's work should say (bounded: the first 16).
    pub fn note_work(&self, line: String) {
        let mut s = self.state();
        if s.work_notes.len() < 16 {
            s.work_notes.push(line);
        }
    }

    pub fn work_notes(&self) -> Vec<String> {
        self.state().work_notes.clone()
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

    /// Gives the run its capability (once, before its agent starts).
    /// The registry has the run's row.
    pub fn set_recorded(&self) {
        self.state().recorded = true;
    }

    pub fn recorded(&self) -> bool {
        self.state().recorded
    }

    pub fn set_token(&self, token: String) {
        self.state().token = Some(token);
    }

    /// The capability the run was given, for its agent's environment and
    /// its MCP server.
    pub fn token(&self) -> Option<String> {
        self.state().token.clone()
    }

    /// Whether it waits behind the member's run in flight.
    pub fn is_queued(&self) -> bool {
        self.state().status == RunStatus::Queued
    }

    /// Its turn came: it is no longer queued.
    pub fn leave_queue(&self) {
        let mut s = self.state();
        if s.status == RunStatus::Queued {
            s.status = RunStatus::Waiting;
        }
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

    /// The member's run on the thread answering the same question as
    /// `place` (joined), or a new one made by `make` (given the run's
    /// ordinal) and registered: free to start when the member has no run
    /// on the thread, else queued behind the ones it has. A run that has
    /// finished but whose message is not written yet still counts, so the
    /// next one's prompt includes its answer.
    pub fn claim(&self, thread: &str, member: &str, place: &Place, make: impl FnOnce(u64) -> Run) -> Claim {
        let mut runs = self.runs();
        let mut busy = false;
        for r in runs.values().filter(|r| r.thread == thread && r.member == member) {
            if r.place.same_question(place) {
                return Claim::Joined(r.clone());
            }
            busy = true;
        }
        let run = Arc::new(make(self.next_ordinal()));
        runs.insert(run.id.clone(), run.clone());
        if busy {
            run.set_status(RunStatus::Queued);
            Claim::Queued(run)
        } else {
            Claim::New(run)
        }
    }

    /// Resolves when `run`'s turn has come — every run of its member on its
    /// thread claimed before it has ended and written its message — with
    /// true, or with false as soon as `run` is asked to stop.
    pub async fn turn(&self, run: &Run) -> bool {
        loop {
            let ahead = self
                .runs()
                .values()
                .filter(|r| r.thread == run.thread && r.member == run.member && r.ordinal < run.ordinal)
                .max_by_key(|r| r.ordinal)
                .cloned();
            let Some(ahead) = ahead else { return true };
            tokio::select! {
                _ = ahead.done() => {}
                _ = run.stopped() => return false,
            }
        }
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

    fn get(&self, id: &str) -> Option<Arc<Run>> {
        self.runs().get(id).cloned()
    }
}

impl crate::approvals::Waits for Registry {
    fn waiting(&self, run: &str, approval: &str) {
        let Some(run) = self.get(run) else { return };
        let mut s = run.state();
        if matches!(s.status, RunStatus::Streaming | RunStatus::Waiting) {
            s.status = RunStatus::Waiting;
            s.approval = Some(approval.to_string());
        }
    }

    fn answered(&self, run: &str, approval: &str) {
        let Some(run) = self.get(run) else { return };
        let mut s = run.state();
        if s.approval.as_deref() == Some(approval) {
            s.approval = None;
            if s.status == RunStatus::Waiting {
                s.status = RunStatus::Streaming;
            }
        }
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

    fn at(reply_to: u64) -> Place {
        Place { reply_to: Some(reply_to), ..Place::default() }
    }

    fn kind(c: &Claim) -> &'static str {
        match c {
            Claim::New(_) => "new",
            Claim::Joined(_) => "joined",
            Claim::Queued(_) => "queued",
        }
    }

    #[test]
    fn the_same_question_joins_and_a_new_one_for_a_busy_member_is_queued() {
        let reg = Registry::default();
        let a = reg.claim("t", "claude", &at(1), |_| run("r1", "t", "claude"));
        assert_eq!(kind(&a), "new");
        let again = reg.claim("t", "claude", &at(1), |_| run("r2", "t", "claude"));
        assert!(kind(&again) == "joined" && Arc::ptr_eq(again.run(), a.run()), "the same question joins");
        let b = reg.claim("t", "claude", &Place { reply_to: Some(2), ..at(2) }, |o| Run {
            ordinal: o,
            ..run("r3", "t", "claude")
        });
        assert_eq!(kind(&b), "queued", "a new question waits");
        assert!(b.run().is_queued() && b.run().is_in_flight());
        assert_eq!(kind(&reg.claim("u", "claude", &at(1), |_| run("r4", "u", "claude"))), "new", "another thread");
        assert_eq!(kind(&reg.claim("t", "codex", &at(2), |_| run("r5", "t", "codex"))), "new", "another member");
        // A finished run whose message is not written yet still holds the
        // member's turn: the next question's prompt must include its answer.
        a.run().set_status(RunStatus::Done);
        assert_eq!(kind(&reg.claim("t", "claude", &at(3), |_| run("r6", "t", "claude"))), "queued");
        assert_eq!(reg.count(), 4, "queued runs are in flight, the finished one is not");
    }

    #[tokio::test]
    async fn a_queued_run_gets_its_turn_when_the_runs_before_it_are_done() {
        let reg = Arc::new(Registry::default());
        let first = reg.claim("t", "claude", &at(1), |o| Run { ordinal: o, ..run("r1", "t", "claude") }).into_run();
        let second = reg.claim("t", "claude", &at(2), |o| Run { ordinal: o, ..run("r2", "t", "claude") }).into_run();
        let third = reg.claim("t", "claude", &at(3), |o| Run { ordinal: o, ..run("r3", "t", "claude") }).into_run();
        let turn = {
            let (reg, third) = (reg.clone(), third.clone());
            tokio::spawn(async move { reg.turn(&third).await })
        };
        // The second is cancelled while queued: the third still waits for the first.
        second.stop(StopReason::Cancelled);
        assert!(!reg.turn(&second).await, "a stopped run does not get its turn");
        reg.remove(&second.id);
        second.mark_done();
        tokio::task::yield_now().await;
        assert!(!turn.is_finished(), "the first is still running");
        reg.remove(&first.id);
        first.mark_done();
        assert!(turn.await.unwrap(), "its turn came");
        third.leave_queue();
        assert_eq!(third.info().status, RunStatus::Waiting);
    }

    #[test]
    fn runs_are_numbered_in_the_order_they_are_claimed() {
        let reg = Registry::default();
        let ordinals: Vec<u64> = (0..100)
            .map(|i| {
                reg.claim("t", &format!("m{i}"), &at(1), |o| Run { ordinal: o, ..run(&format!("r{i}"), "t", "m") })
                    .run()
                    .ordinal
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
