//! The exchange under way on each thread, and the last few that ended:
//! what a subscriber joining now is told of where the thread's exchange
//! stands ([`Exchanges::current`], [`Exchanges::ended_after`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use kd_proto::types::ThreadEvent;
use tokio_util::sync::CancellationToken;

use super::Council;
use crate::db::exchanges::ExchangeId;

/// An exchange in progress.
pub struct Exchange {
    pub thread: String,
    /// The King's message that started it.
    pub king: u64,
    /// Its journal (F-J1).
    pub id: ExchangeId,
    stop: CancellationToken,
    /// Cancelled when its driver has returned (what comes after it, a
    /// work vote, waits on it).
    ended: CancellationToken,
    /// Its last round is told: only the record of its end is left.
    over: std::sync::atomic::AtomicBool,
    round: Mutex<Option<ThreadEvent>>,
}

impl Exchange {
    pub fn new(thread: String, king: u64, id: ExchangeId) -> Exchange {
        Exchange {
            thread,
            king,
            id,
            stop: CancellationToken::new(),
            ended: CancellationToken::new(),
            over: std::sync::atomic::AtomicBool::new(false),
            round: Mutex::new(None),
        }
    }

    /// No further turns start.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Returns once its driver has returned.
    pub async fn ended(&self) {
        self.ended.cancelled().await
    }

    /// Its driver has returned.
    pub fn has_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// The last round event published, for subscribers joining now.
    pub fn round_event(&self) -> Option<ThreadEvent> {
        self.round.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn publish(&self, c: &Council, event: ThreadEvent) {
        *self.round.lock().unwrap_or_else(|e| e.into_inner()) = Some(event.clone());
        c.agents.hub.publish(&self.thread, event);
    }
}

/// Ended exchanges remembered, at most (their last round events).
const ENDED: usize = 64;

/// The exchange of each thread, and the last ones that ended.
#[derive(Default)]
pub struct Exchanges {
    by_thread: Mutex<HashMap<String, Arc<Exchange>>>,
    /// The last round event of the exchanges that ended last (done or
    /// stopped), oldest first: the thread, the King's message, the event.
    ended: Mutex<VecDeque<(String, u64, ThreadEvent)>>,
}

impl Exchanges {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Exchange>>> {
        self.by_thread.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `ex` the thread's exchange, stopping the one it replaces.
    pub fn begin(&self, ex: Arc<Exchange>) {
        if let Some(old) = self.map().insert(ex.thread.clone(), ex) {
            old.stop();
        }
    }

    /// Makes `ex`, resumed, the thread's exchange — unless a newer one
    /// began meanwhile (a King message while kdd was starting), which it
    /// must not stop: then false.
    pub fn resume(&self, ex: Arc<Exchange>) -> bool {
        let mut map = self.map();
        if map.get(&ex.thread).is_some_and(|cur| cur.king >= ex.king) {
            return false;
        }
        if let Some(old) = map.insert(ex.thread.clone(), ex) {
            old.stop();
        }
        true
    }

    /// Stops the thread's exchange; true if there was one running.
    pub fn stop(&self, thread: &str) -> bool {
        match self.map().remove(thread) {
            Some(ex) => {
                let was_running = !ex.is_stopped();
                ex.stop();
                was_running
            }
            None => false,
        }
    }

    /// Stops every exchange (the daemon is stopping).
    pub fn stop_all(&self) {
        for ex in self.map().drain().map(|(_, ex)| ex) {
            ex.stop();
        }
    }

    pub fn current(&self, thread: &str) -> Option<Arc<Exchange>> {
        self.map().get(thread).cloned()
    }

    /// The last round events of `thread`'s exchanges begun after message
    /// `since` that have ended, oldest first: told to a subscriber whose
    /// backlog holds their questions and answers — `kd ask` subscribes
    /// beside its question, so its exchange may be over before its
    /// subscription is.
    pub fn ended_after(&self, thread: &str, since: u64) -> Vec<ThreadEvent> {
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        ended.iter().filter(|(t, king, _)| t == thread && *king > since).map(|(_, _, e)| e.clone()).collect()
    }

    /// Returns once the thread's exchange, if its last round is told but
    /// its end not yet recorded ([`Exchanges::remember_end`]), has recorded
    /// it — or after `at_most`: a King's next question, which stops the
    /// thread's open exchange as it is written, finds the one whose rounds
    /// are over recorded done, not stopped by it.
    pub async fn settled(&self, thread: &str, at_most: std::time::Duration) {
        let over = self.current(thread).filter(|ex| ex.over.load(std::sync::atomic::Ordering::Acquire));
        if let Some(ex) = over {
            let _ = tokio::time::timeout(at_most, ex.ended()).await;
        }
    }

    /// Remembers how `ex` ended (`last`, its last round), before it is
    /// told — a subscriber that hears nothing of it live is told it then —
    /// and marks its rounds over ([`Exchanges::settled`]).
    pub(super) fn remember_end(&self, ex: &Exchange, last: &ThreadEvent) {
        ex.over.store(true, std::sync::atomic::Ordering::Release);
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        ended.push_back((ex.thread.clone(), ex.king, last.clone()));
        while ended.len() > ENDED {
            ended.pop_front();
        }
    }

    pub(super) fn end(&self, ex: &Exchange) {
        ex.ended.cancel();
        let mut map = self.map();
        if map.get(&ex.thread).is_some_and(|cur| cur.king == ex.king) {
            map.remove(&ex.thread);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_exchange_never_stops_a_newer_one() {
        let xs = Exchanges::default();
        let newer = Arc::new(Exchange::new("t".into(), 9, 2));
        xs.begin(newer.clone());
        let resumed = Arc::new(Exchange::new("t".into(), 4, 1));
        assert!(!xs.resume(resumed.clone()), "a King message came first");
        assert!(!newer.is_stopped());
        assert_eq!(xs.current("t").map(|x| x.king), Some(9));
        let other = Arc::new(Exchange::new("u".into(), 4, 3));
        assert!(xs.resume(other), "a thread with none takes it");
    }

    #[tokio::test]
    async fn a_question_waits_for_the_record_of_an_exchange_whose_rounds_are_over_and_no_longer() {
        use std::time::{Duration, Instant};
        let xs = Arc::new(Exchanges::default());
        let ex = Arc::new(Exchange::new("t".into(), 3, 1));
        xs.begin(ex.clone());
        let long = Duration::from_secs(60);
        let start = Instant::now();
        xs.settled("t", long).await;
        assert!(start.elapsed() < long, "an exchange under way is stopped, not waited for");
        let done = ThreadEvent::Round {
            exchange: 3,
            round: 1,
            rounds: 1,
            state: kd_proto::types::RoundState::Done,
            expected: vec![],
        };
        xs.remember_end(&ex, &done);
        let waiter = tokio::spawn({
            let xs = xs.clone();
            async move { xs.settled("t", long).await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished(), "its end is not recorded yet");
        xs.end(&ex);
        waiter.await.unwrap();
        assert!(start.elapsed() < long, "told as it is recorded");
        // One that never records its end holds a question at most so long.
        let stuck = Arc::new(Exchange::new("u".into(), 4, 2));
        xs.begin(stuck.clone());
        xs.remember_end(&stuck, &done);
        let at_most = Duration::from_millis(50);
        let start = Instant::now();
        xs.settled("u", at_most).await;
        assert!(start.elapsed() >= at_most);
    }

    #[test]
    fn the_ends_told_are_those_begun_after_the_seq_on_the_thread_and_a_few() {
        let xs = Exchanges::default();
        let done = |king| ThreadEvent::Round {
            exchange: king,
            round: 1,
            rounds: 1,
            state: kd_proto::types::RoundState::Done,
            expected: vec![],
        };
        for (thread, king) in [("t", 1), ("u", 2), ("t", 5)] {
            xs.remember_end(&Exchange::new(thread.into(), king, king as i64), &done(king));
        }
        assert_eq!(xs.ended_after("t", 0), [done(1), done(5)]);
        assert_eq!(xs.ended_after("t", 1), [done(5)]);
        assert!(xs.ended_after("t", 5).is_empty());
        for king in 10..10 + ENDED as u64 {
            xs.remember_end(&Exchange::new("v".into(), king, king as i64), &done(king));
        }
        assert!(xs.ended_after("t", 0).is_empty(), "the oldest are forgotten past {ENDED}");
        assert_eq!(xs.ended_after("v", 0).len(), ENDED);
    }
}
