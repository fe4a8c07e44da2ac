//! Council rounds (F-C2, F-C3). A King message starts an *exchange*: a first
//! round (parallel in broadcast mode, round-robin in sequential mode), then
//! up to `auto_rounds` sequential round-robin rounds in member order, each
//! turn seeing the whole thread. A member that errs, times out or is
//! cancelled is not asked again in the same exchange (a retry or the next
//! King message asks it again). A directed message gets one round. After
//! every answer, the members it hands off to (a line starting `@name`) are
//! delivered it, up to `council.max_hops` hand-offs per exchange (members'
//! sends during it included, [`super::hops`]). One exchange per thread: a
//! new King message stops the pending turns of the previous one (runs in
//! flight finish), as does an interrupt.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use kd_proto::types::{MessageKind, Mode, RoundState, RunStatus, ThreadEvent};
use tokio_util::sync::CancellationToken;

use super::deliver::{Request, deliver};
use super::hops::{self, HandOff};
use super::{Council, Launch};
use crate::agent::registry::{Claim, Place, Run};
use crate::db::compose::Carrier;

/// An exchange in progress.
pub struct Exchange {
    pub thread: String,
    /// The King's message that started it.
    pub king: u64,
    stop: CancellationToken,
    round: Mutex<Option<ThreadEvent>>,
}

impl Exchange {
    pub fn new(thread: String, king: u64) -> Exchange {
        Exchange { thread, king, stop: CancellationToken::new(), round: Mutex::new(None) }
    }

    /// No further turns start.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// The last round event published, for subscribers joining now.
    pub fn round_event(&self) -> Option<ThreadEvent> {
        self.round.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn publish(&self, c: &Council, event: ThreadEvent) {
        *self.round.lock().unwrap_or_else(|e| e.into_inner()) = Some(event.clone());
        c.agents.hub.publish(&self.thread, event);
    }
}

/// The exchange of each thread.
#[derive(Default)]
pub struct Exchanges {
    by_thread: Mutex<HashMap<String, Arc<Exchange>>>,
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

    fn end(&self, ex: &Exchange) {
        let mut map = self.map();
        if map.get(&ex.thread).is_some_and(|cur| cur.king == ex.king) {
            map.remove(&ex.thread);
        }
    }
}

/// The plan of an exchange whose first round (or first turn) has started.
pub struct Plan {
    pub launch: Launch,
    pub mode: Mode,
    /// Who answers in the first round, in order.
    pub first: Vec<String>,
    /// The runs already started for the first round (all of them in
    /// broadcast mode, the first turn in sequential mode).
    pub started: Vec<Arc<Run>>,
    /// Members taking the auto-round turns, in council order.
    pub turns: Vec<String>,
    /// Rounds in all, the first included.
    pub rounds: u32,
}

/// Drives an exchange to its end.
pub async fn run(c: Arc<Council>, ex: Arc<Exchange>, plan: Plan) {
    let round_event = |round: u32, state: RoundState, expected: Vec<String>| ThreadEvent::Round {
        exchange: ex.king,
        round,
        rounds: plan.rounds,
        state,
        expected,
    };
    ex.publish(&c, round_event(1, RoundState::Running, plan.first.clone()));
    let mut failed: HashSet<String> = HashSet::new();
    let mut last_round = 1;
    for run in &plan.started {
        run.done().await;
        if has_failed(run) {
            failed.insert(run.member.clone());
        }
    }
    for run in &plan.started {
        follow(&c, &ex, &plan, run.clone(), 1).await;
    }
    if plan.mode == Mode::Sequential {
        for member in plan.first.iter().skip(plan.started.len()) {
            if !turn(&c, &ex, &plan, member, 1, &mut failed).await {
                break;
            }
        }
    }
    for round in 2..=plan.rounds {
        let expected: Vec<String> = plan.turns.iter().filter(|m| !failed.contains(*m)).cloned().collect();
        if ex.is_stopped() || expected.is_empty() {
            break;
        }
        last_round = round;
        ex.publish(&c, round_event(round, RoundState::Running, expected.clone()));
        for member in &expected {
            if !turn(&c, &ex, &plan, member, round, &mut failed).await {
                break;
            }
        }
    }
    let state = if ex.is_stopped() { RoundState::Stopped } else { RoundState::Done };
    let expected = if last_round == 1 { plan.first.clone() } else { plan.turns.clone() };
    let expected = expected.into_iter().filter(|m| !failed.contains(m)).collect();
    ex.publish(&c, round_event(last_round, state, expected));
    c.exchanges.end(&ex);
}

/// Whether a finished run failed, so that its member sits out the rest of
/// the exchange.
fn has_failed(run: &Run) -> bool {
    matches!(run.info().status, RunStatus::Error | RunStatus::TimedOut | RunStatus::Cancelled)
}

/// Runs one member's turn, seeing the whole thread, and follows its
/// hand-offs; false when the exchange was stopped and no turn was taken.
async fn turn(
    c: &Arc<Council>,
    ex: &Exchange,
    plan: &Plan,
    member: &str,
    round: u32,
    failed: &mut HashSet<String>,
) -> bool {
    if ex.is_stopped() || over_budget(c, ex, plan).await {
        return false;
    }
    let last = match c.agents.db.thread(plan.launch.thread.id.clone()).await {
        Ok(t) => t.last_seq,
        Err(e) => {
            tracing::error!(thread = ex.thread, "cannot read the thread for a turn: {e}");
            return false;
        }
    };
    let place =
        Place { reply_to: Some(last), round: Some(round), exchange: Some(ex.king), replaces: None, purpose: None };
    if let Some(run) = plan.launch.start(c, member, place).map(Claim::into_run) {
        run.done().await;
        if has_failed(&run) {
            failed.insert(member.to_string());
        }
        follow(c, ex, plan, run, round).await;
    }
    true
}

/// Whether the exchange has spent `council.budget_usd`: then it is stopped.
async fn over_budget(c: &Arc<Council>, ex: &Exchange, plan: &Plan) -> bool {
    let over = super::budget::spent(c, &ex.thread, ex.king, plan.launch.config.council.budget_usd).await;
    if over {
        ex.stop();
    }
    over
}

/// Follows the hand-offs from `first`'s answer (F-X1): the members an
/// answer addresses are delivered it by their delivery mode, and the
/// answers of the runs that starts are followed in turn — at most
/// `council.max_hops` hand-offs per exchange, members' sends included
/// ([`super::hops`]), after which the addressees are not asked.
async fn follow(c: &Arc<Council>, ex: &Exchange, plan: &Plan, first: Arc<Run>, round: u32) {
    let max = plan.launch.config.coordination.max_hops;
    let mut queue = VecDeque::from([first]);
    while let Some(run) = queue.pop_front() {
        if ex.is_stopped() {
            return;
        }
        let Some(message) = run.message() else { continue };
        let Some(route) = message.route.filter(|_| message.kind == MessageKind::Agent) else { continue };
        if over_budget(c, ex, plan).await {
            return;
        }
        let hand_off = HandOff {
            thread: &ex.thread,
            exchange: ex.king,
            from: &run.member,
            to: &message.to,
            seq: Some(message.seq),
            max,
        };
        if !hops::take(c, hand_off).await {
            continue;
        }
        let request = Request {
            thread: plan.launch.thread.clone(),
            config: plan.launch.config.clone(),
            from: run.member.clone(),
            to: message.to.clone(),
            cc: vec![],
            route,
            correlation_id: format!("x-{}", ex.king),
            style: plan.launch.style,
            client: plan.launch.client,
            exchange: Some(ex.king),
            round: Some(round),
            emergency: None,
            message: Carrier::Stored((*message).clone()),
        };
        match deliver(c, request).await {
            Ok(d) => {
                for next in d.starts {
                    next.done().await;
                    queue.push_back(next);
                }
            }
            Err(e) => tracing::warn!(thread = ex.thread, "cannot hand off {}'s answer: {e}", run.member),
        }
    }
}
