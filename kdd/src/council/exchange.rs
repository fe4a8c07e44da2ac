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

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use kd_proto::types::{MessageKind, Mode, RoundState, RunStatus, Style, ThreadEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::deliver::{Journaled, Request, deliver};
use super::exchanges::Exchange;
use super::hops::{self, HandOff};
use super::{Council, Launch};
use crate::agent::registry::{Place, Run};
use crate::db::compose::Carrier;
use crate::db::exchanges::{Opened, Purpose, StepKey, StepState};

/// An exchange's plan as its journal keeps it: enough to drive it again
/// after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub mode: Mode,
    /// Rounds in all, the first included.
    pub rounds: u32,
    /// Who answers in the first round, in order.
    pub first: Vec<String>,
    /// Members taking the auto-round turns, in council order.
    pub turns: Vec<String>,
    pub style: Style,
    /// The send's own timeout for its runs, if it gave one.
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// A vote follows the rounds (`kd work --vote`): its driver, not this
    /// one, ends the plan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vote: bool,
    /// Begun beside the thread's open exchange, superseding none
    /// ([`crate::db::exchanges::NewExchange::supersedes`] reads it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub beside: bool,
}

impl Journal {
    pub fn to_plan(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn from_plan(plan: &Value) -> Option<Journal> {
        serde_json::from_value(plan.clone()).ok()
    }
}

/// An exchange to drive: its plan, and the runs of its first round already
/// started (none when it is resumed).
pub struct Plan {
    pub launch: Launch,
    pub journal: Journal,
    pub started: Vec<Arc<Run>>,
}

/// Drives exchange `ex` to its end over its journal: each turn is a step,
/// taken once — a step answered before (a resumed exchange) is not asked
/// again, one cut by a restart is. At a shutdown it writes and says
/// nothing, so that the next start resumes it.
pub async fn run(c: Arc<Council>, ex: Arc<Exchange>, plan: Plan) {
    let j = &plan.journal;
    let round_event = |round: u32, state: RoundState, expected: Vec<String>| ThreadEvent::Round {
        exchange: ex.king,
        round,
        rounds: j.rounds,
        state,
        expected,
    };
    ex.publish(&c, round_event(1, RoundState::Running, j.first.clone()));
    // Who erred, timed out or was cancelled earlier sits out: a resumed
    // exchange reads it from its journal (a new one has no earlier turn;
    // its first round's failures are seen as its runs end).
    let mut failed: HashSet<String> = if plan.started.is_empty() { sat_out(&c, &ex).await } else { HashSet::new() };
    let mut last_round = 1;
    let mut first = plan.started.clone();
    let mut sequential = &j.first[..];
    if j.mode == Mode::Broadcast && first.is_empty() {
        // Resumed: the first round's steps not yet answered start together.
        for member in &j.first {
            match take(&c, &ex, &plan, member, 1).await {
                Taken::Run(run) => first.push(run),
                Taken::SatOut => {
                    failed.insert(member.clone());
                }
                Taken::Answered | Taken::Ended => {}
            }
        }
    }
    for run in &first {
        run.done().await;
        if has_failed(run) {
            failed.insert(run.member.clone());
        }
    }
    if c.agents.is_closed() {
        return c.exchanges.end(&ex);
    }
    for run in &first {
        follow(&c, &ex, &plan, run.clone(), 1).await;
    }
    if j.mode == Mode::Broadcast {
        sequential = &[];
    } else {
        sequential = &sequential[first.len().min(sequential.len())..];
    }
    for member in sequential {
        if !turn(&c, &ex, &plan, member, 1, &mut failed).await {
            break;
        }
    }
    for round in 2..=j.rounds {
        let expected: Vec<String> = j.turns.iter().filter(|m| !failed.contains(*m)).cloned().collect();
        // One member left (the others erred, timed out or were cancelled)
        // does not argue with itself.
        if ex.is_stopped() || expected.len() < 2 {
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
    if c.agents.is_closed() {
        // The daemon is stopping: the journal keeps where the exchange is.
        return c.exchanges.end(&ex);
    }
    let state = if ex.is_stopped() { RoundState::Stopped } else { RoundState::Done };
    let expected = if last_round == 1 { j.first.clone() } else { j.turns.clone() };
    let expected = expected.into_iter().filter(|m| !failed.contains(m)).collect();
    let last = round_event(last_round, state, expected);
    // Told before its end is recorded: every answer is written by now, and
    // a restart finds each step answered and ends it asking nothing; the
    // King's client need not wait for one more commit (issue 31, item 17).
    // A question of the King's on the thread meanwhile waits for the
    // record (`Exchanges::settled`).
    c.exchanges.remember_end(&ex, &last);
    ex.publish(&c, last);
    if state == RoundState::Done
        && !j.vote
        && let Err(e) = waiting(&c, &ex, "the end of the exchange", || c.agents.db.plan_done(ex.id, None)).await
    {
        tracing::warn!(thread = ex.thread, "cannot record the exchange's end: {e}");
    }
    c.exchanges.end(&ex);
}

/// What [`resume`] made of an exchange left open.
pub enum Resumed {
    /// It is driven again, as this exchange.
    Driving(Arc<Exchange>),
    /// A newer exchange began on its thread while kdd was starting: it is
    /// not driven (the journal says so too).
    Superseded,
    /// Its journal cannot be read: not resumed.
    Not,
}

/// Takes exchange `x` up again after a restart (F-J2), with `launch` as
/// its workspace's configuration says today.
pub async fn resume(c: Arc<Council>, x: &crate::db::exchanges::Exchange, launch: Launch) -> Resumed {
    let Some(journal) = Journal::from_plan(&x.plan) else { return Resumed::Not };
    let launch =
        Launch { style: journal.style, timeout: journal.timeout_s.map(std::time::Duration::from_secs), ..launch };
    let ex = Arc::new(Exchange::new(x.thread.clone(), x.seq, x.id));
    if !c.exchanges.resume(ex.clone()) {
        return Resumed::Superseded;
    }
    // Its hand-offs count against council.max_hops as before; the ones a
    // restart cut are asked again (nothing follows their answers).
    match c.agents.db.exchange_steps(x.id).await {
        Ok(steps) => {
            let handoffs: Vec<_> = steps.iter().filter(|s| s.key.purpose == Purpose::Handoff).collect();
            let made: HashSet<u64> = handoffs.iter().map(|s| s.key.cause).collect();
            c.hops.seed(&x.thread, x.seq, made.len() as u32);
            super::deliver::restart_handoffs(&c, &launch, x, &steps, Some(x.seq));
        }
        Err(e) => tracing::warn!(thread = x.thread, "cannot read the exchange's hand-offs: {e}"),
    }
    tokio::spawn(run(c, ex.clone(), Plan { launch, journal, started: vec![] }));
    Resumed::Driving(ex)
}

/// `op`, a read or write of the exchange's journal, waiting while the
/// registry is away (`db::outage`) — the exchange waits where it stands
/// and goes on once the registry is back — unless the daemon stops or the
/// exchange is stopped meanwhile. `what` names it for the log.
async fn waiting<T, F, Fut>(c: &Council, ex: &Exchange, what: &str, mut op: F) -> crate::db::DbResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = crate::db::DbResult<T>>,
{
    let what = format!("{what} (exchange {} of thread {})", ex.king, ex.thread);
    c.agents.db.until_back(&what, || c.agents.is_closed() || ex.is_stopped(), |_| op()).await
}

/// The members whose answer in exchange `ex` failed or was cancelled.
async fn sat_out(c: &Council, ex: &Exchange) -> HashSet<String> {
    match waiting(c, ex, "the reading of the journal", || c.agents.db.exchange_steps(ex.id)).await {
        Ok(steps) => steps
            .into_iter()
            .filter(|s| matches!(s.state, StepState::Failed | StepState::Cancelled))
            .filter(|s| matches!(s.key.purpose, Purpose::Answer | Purpose::Handoff))
            .map(|s| s.key.member)
            .collect(),
        Err(e) => {
            tracing::warn!(thread = ex.thread, "cannot read the exchange's journal: {e}");
            HashSet::new()
        }
    }
}

/// Whether a finished run failed, so that its member sits out the rest of
/// the exchange.
fn has_failed(run: &Run) -> bool {
    matches!(run.info().status, RunStatus::Error | RunStatus::TimedOut | RunStatus::Cancelled)
}

/// What came of asking for a member's step.
enum Taken {
    /// Its run, started now (or joined).
    Run(Arc<Run>),
    /// Answered before: it is not asked again.
    Answered,
    /// It failed or was cancelled before: the member sits out.
    SatOut,
    /// The exchange is over (stopped, superseded) or the daemon stopping.
    Ended,
}

/// Opens `member`'s answer step of `round` and starts its run unless the
/// journal says it was answered or given up.
async fn take(c: &Arc<Council>, ex: &Exchange, plan: &Plan, member: &str, round: u32) -> Taken {
    let db = &c.agents.db;
    let turn = format!("{member}'s turn of round {round}");
    let step = match waiting(c, ex, &turn, || db.open_step(ex.id, StepKey::answer(round, member))).await {
        Ok(Opened::Step(s)) => s,
        Ok(Opened::Ended(_)) => return Taken::Ended,
        Err(e) => {
            tracing::error!(thread = ex.thread, "cannot open {member}'s step in the journal: {e}");
            return Taken::Ended;
        }
    };
    match step.state {
        StepState::Done => return Taken::Answered,
        StepState::Failed | StepState::Cancelled => return Taken::SatOut,
        StepState::Pending | StepState::Running => {}
    }
    // A turn sees the whole thread as it stands when it is first taken.
    let reply_to = match step.reply_to {
        Some(seq) => seq,
        None => match waiting(c, ex, "the reading of the thread", || db.thread(plan.launch.thread.id.clone())).await {
            Ok(t) => t.last_seq,
            Err(e) => {
                tracing::error!(thread = ex.thread, "cannot read the thread for a turn: {e}");
                return Taken::Ended;
            }
        },
    };
    let place = Place {
        reply_to: Some(reply_to),
        round: Some(round),
        exchange: Some(ex.king),
        replaces: None,
        purpose: None,
        step: None,
    };
    match plan.launch.start_step(c, member, place, &step) {
        Some(claim) => Taken::Run(claim.into_run()),
        None => Taken::Ended,
    }
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
    match take(c, ex, plan, member, round).await {
        Taken::Run(run) => {
            run.done().await;
            if c.agents.is_closed() {
                return false;
            }
            if has_failed(&run) {
                failed.insert(member.to_string());
            }
            follow(c, ex, plan, run, round).await;
            true
        }
        Taken::Answered => true,
        Taken::SatOut => {
            failed.insert(member.to_string());
            true
        }
        Taken::Ended => false,
    }
}

/// Whether the exchange has spent `council.budget_usd`: then it is stopped.
async fn over_budget(c: &Arc<Council>, ex: &Exchange, plan: &Plan) -> bool {
    let over = super::budget::spent(c, &ex.thread, ex.king, Some(ex.id), plan.launch.config.council.budget_usd).await;
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
            journal: Journaled::In(ex.id),
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
