//! `completion.agents` (F-X2): one prompt to several members in parallel,
//! each its own run answering the same message. `wait: all` waits for
//! every member up to the timeout (late ones are cancelled and reported
//! `timeout`); `wait: first` takes the first good answer and cancels the
//! rest. The answers are then combined:
//!
//! - `merge`: one message, every answer under its member's name;
//! - `vote`: each member ranks the *others'* answers, shown anonymised as
//!   `Response A`, `Response B`, … (as llm-council does, so that no one
//!   favours a name) and ending with a `FINAL RANKING:` list; the rankings
//!   are tallied (Borda points, then first places, then the chair's
//!   ballot, else a tie left to the King) and the tally, with the label →
//!   member mapping, is stored as a message;
//! - `synthesize`: a chair member writes one final answer from every
//!   answer (and the tally, after a vote).
//!
//! Every answer, ballot and synthesis is a message of the thread; every
//! step is a `completion.*` event under the completion's id.
//!
//! A completion is a journaled exchange (F-J1): [`complete`] writes the
//! question with its exchange and plan in one transaction, then
//! [`drive::drive`] takes its steps — each answer, ballot and synthesis a
//! member's step, the merge and the tally kd's own — over the journal, so
//! that a daemon started again ([`resume`]) does what is left and nothing
//! twice. A client calling again with the same `id` attaches to it.

mod drive;
mod vote;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::KING;
use kd_proto::types::{Aggregation, Completion, Label, MessageKind, RouteType, Wait};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use super::{Coord, check_members};
use crate::agent::registry::{Place, Run};
use crate::client::ClientId;
use crate::council::Launch;
use crate::db::events::Record;
use crate::db::exchanges::{Exchange, ExchangeId, ExchangeState, Kind, NewExchange, Opened, StepKey};
use crate::db::messages::NewMessage;
use crate::db::{now_ms, random_id};
pub use vote::{Vote, ballot_prompt, count, draw_labels, kd_message, parse_ranking, synthesis_prompt, tally_text};

/// A completion, with its parameters checked for form.
pub struct Params {
    pub thread: String,
    pub body: String,
    pub agents: Option<Vec<String>>,
    pub wait: Wait,
    pub timeout: Option<Duration>,
    pub aggregation: Aggregation,
    /// Also vote before a synthesis.
    pub vote: bool,
    pub chair: Option<String>,
    pub client: Option<ClientId>,
    /// The client's own name for it (`c-…`): a second call with it attaches.
    pub id: Option<String>,
    /// The asking client's `PATH`, which its runs are found on and run with.
    pub path: Option<String>,
}

/// A completion's plan as its journal keeps it: enough to drive it again
/// after a restart, with the choices fixed on the way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub members: Vec<String>,
    pub wait: Wait,
    /// When late answers are cancelled (ms since the epoch): absolute, so
    /// that a resumed completion keeps its deadline.
    pub deadline_ms: Option<i64>,
    pub aggregation: Aggregation,
    pub vote: bool,
    pub chair: Option<String>,
    /// The vote's labels, drawn once (fixed in the journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<Label>>,
    /// The members whose answers came too late (fixed in the journal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<String>,
}

impl Plan {
    pub fn from_exchange(x: &Exchange) -> Option<Plan> {
        serde_json::from_value(x.plan.clone()).ok()
    }
}

/// The completions driven by this daemon, by thread and id: what a call
/// attaching to one awaits (`None` while it runs; an error once the daemon
/// stops under it).
#[derive(Default)]
pub struct Driven {
    by_id: Mutex<HashMap<(String, String), Receiver>>,
}

type Outcome = Result<Completion, String>;

impl Driven {
    /// The drive of `thread`'s completion `id`: the one running here, or
    /// none yet and then the sender for the one to start.
    fn join(&self, thread: &str, id: &str) -> Result<Receiver, Sender> {
        let mut map = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let key = (thread.to_string(), id.to_string());
        if let Some(rx) = map.get(&key) {
            return Ok(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        map.insert(key, rx);
        Err(tx)
    }

    fn remove(&self, thread: &str, id: &str) {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner()).remove(&(thread.to_string(), id.to_string()));
    }
}

type Sender = watch::Sender<Option<Outcome>>;
type Receiver = watch::Receiver<Option<Outcome>>;

pub async fn complete(co: &Arc<Coord>, p: Params) -> Result<Completion, ErrorObjectOwned> {
    let (thread, config) = co.thread(&p.thread, p.path.as_deref()).await?;
    let db = &co.council.agents.db;
    if let Some(id) = &p.id
        && let Some(x) = db.exchange_by_correlation(thread.id.clone(), id.clone()).await?
    {
        return attach(co, x, p.client).await;
    }
    let members = match &p.agents {
        Some(a) if !a.is_empty() => {
            check_members(&config, a, false)?;
            config.council.members.iter().filter(|m| a.contains(m)).cloned().collect()
        }
        _ => config.council.members.clone(),
    };
    if members.is_empty() {
        return Err(ErrorCode::InvalidArgument.error("no members to ask"));
    }
    let synthesize = p.aggregation == Aggregation::Synthesize;
    let vote = p.aggregation == Aggregation::Vote || (synthesize && p.vote);
    let chair = match (&p.chair, synthesize) {
        (Some(c), _) => {
            check_members(&config, std::slice::from_ref(c), false)?;
            Some(c.clone())
        }
        (None, true) => return Err(ErrorCode::InvalidArgument.error("synthesize needs a chair: a member's name")),
        (None, false) => None,
    };
    if vote && members.len() < 2 {
        return Err(ErrorCode::InvalidArgument.error("a vote needs at least two members"));
    }
    let id = p.id.clone().unwrap_or_else(|| format!("c-{}", random_id(10)));
    // A timeout past what the clock holds is no deadline (the RPC edge
    // bounds it anyway).
    let deadline_ms = p.timeout.and_then(|t| now_ms().checked_add(i64::try_from(t.as_millis()).ok()?));
    let plan = Plan {
        members: members.clone(),
        wait: p.wait,
        deadline_ms,
        aggregation: p.aggregation,
        vote,
        chair: chair.clone(),
        labels: None,
        late: vec![],
    };
    let question = NewMessage {
        correlation_id: Some(id.clone()),
        route: Some(if members.len() == 1 { RouteType::PointToPoint } else { RouteType::Multicast }),
        ..NewMessage::new(&thread.id, KING, members.clone(), MessageKind::King, p.body.clone())
    };
    let x = NewExchange {
        thread: thread.id.clone(),
        seq: 0,
        kind: Kind::Completion,
        correlation_id: Some(id.clone()),
        plan: serde_json::to_value(&plan)
            .map_err(|e| ErrorCode::Internal.error(format!("a completion's plan: {e}")))?,
        first_steps: members.iter().map(|m| StepKey::answer(1, m)).collect(),
        path: config.path.clone(),
    };
    let asked = db.ask(None, vec![question], x).await?;
    crate::council::keep_members(db, &thread, &config).await?;
    let start = Record {
        kind: "completion.start".into(),
        thread: Some(thread.id.clone()),
        agent: None,
        from: Some(KING.to_string()),
        to: members.clone(),
        correlation_id: Some(id.clone()),
        data: json!({"seq": asked.message.seq, "wait": p.wait, "aggregation": p.aggregation, "chair": chair,
                     "timeout_ms": p.timeout.map(|t| t.as_millis() as u64)}),
    };
    db.record(vec![start]).await?;
    attach(co, asked.exchange, p.client).await
}

/// Takes a completion a previous daemon left open up again (F-J2); false
/// when its plan cannot be read.
pub fn resume(co: &Arc<Coord>, x: &Exchange) -> bool {
    if Plan::from_exchange(x).is_none() || x.correlation_id.is_none() {
        return false;
    }
    spawn(co, x.clone(), None);
    true
}

/// Drives `x` in a task of its own (a client going away does not stop
/// it) unless it is driven here already; what calls naming it await.
fn spawn(co: &Arc<Coord>, x: Exchange, client: Option<ClientId>) -> Receiver {
    let id = x.correlation_id.clone().unwrap_or_default();
    let tx = match co.completions.join(&x.thread, &id) {
        Ok(driven) => return driven,
        Err(tx) => tx,
    };
    let rx = tx.subscribe();
    let co = co.clone();
    tokio::spawn(async move {
        let thread = x.thread.clone();
        match drive::drive(&co, x, client).await {
            Ok(done) => {
                let _ = tx.send(Some(Ok(done)));
            }
            Err(Halt::ShuttingDown) => {}
            Err(Halt::Failed(why)) => {
                tracing::warn!(thread, completion = id, "the completion stopped: {why}");
                let _ = tx.send(Some(Err(why)));
            }
        }
        co.completions.remove(&thread, &id);
    });
    rx
}

/// What a call awaiting a driven completion gets.
async fn outcome(mut rx: Receiver) -> Result<Completion, ErrorObjectOwned> {
    match rx.wait_for(Option::is_some).await {
        Ok(done) => match done.clone() {
            Some(Ok(c)) => Ok(c),
            Some(Err(why)) => Err(ErrorCode::Conflict.error(format!("the completion was stopped: {why}"))),
            None => Err(ErrorCode::Internal.error("the completion ended with nothing")),
        },
        Err(_) => Err(ErrorCode::ShuttingDown
            .error("kd is stopping; the completion resumes at its next start (call again with the same id)")),
    }
}

/// A call naming a completion that exists: its result once done, the
/// drive's when it ends (driven now if no one drives it here), `conflict`
/// when it was stopped.
async fn attach(co: &Arc<Coord>, x: Exchange, client: Option<ClientId>) -> Result<Completion, ErrorObjectOwned> {
    if x.kind != Kind::Completion {
        return Err(ErrorCode::Conflict.error("that id names another kind of exchange"));
    }
    match x.state {
        ExchangeState::Open => {
            let id = x.id;
            match outcome(spawn(co, x, client)).await {
                Ok(done) => Ok(done),
                // A drive that had just ended, or one stopped: as the
                // journal says now.
                Err(e) => match co.council.agents.db.exchange(id).await? {
                    x @ Exchange { state: ExchangeState::Done | ExchangeState::Stopped, .. } => {
                        Box::pin(attach(co, x, None)).await
                    }
                    _ => Err(e),
                },
            }
        }
        ExchangeState::Done => x
            .result
            .and_then(|r| serde_json::from_value(r).ok())
            .ok_or_else(|| ErrorCode::Internal.error("the completion ended without a result")),
        ExchangeState::Stopped => Err(ErrorCode::Conflict
            .error(format!("the completion was stopped: {}", x.reason.as_deref().unwrap_or("stopped")))),
    }
}

/// Why a drive ended without a result.
pub enum Halt {
    /// The daemon is stopping: nothing was written; the next start resumes.
    ShuttingDown,
    /// The exchange was stopped (cancelled) or cannot go on.
    Failed(String),
}

impl From<crate::db::DbError> for Halt {
    fn from(e: crate::db::DbError) -> Halt {
        Halt::Failed(format!("the registry: {e}"))
    }
}

/// Opens step `key` of exchange `x` and starts its run with `launch`
/// unless the journal holds it over; a step whose member can no longer be
/// asked (gone from the configuration) is cancelled.
pub async fn take_step(
    co: &Arc<Coord>,
    x: ExchangeId,
    key: StepKey,
    launch: &Launch,
    place: Place,
) -> Result<Option<Arc<Run>>, Halt> {
    let db = &co.council.agents.db;
    let closed = || if co.council.agents.is_closed() { Err(Halt::ShuttingDown) } else { Ok(()) };
    // While the registry is away the drive waits here (`db::outage`).
    let turn = format!("{}'s step of round {} (exchange {x})", key.member, key.round);
    let stopping = || co.council.agents.is_closed();
    let step = match db.until_back(&turn, stopping, |_| db.open_step(x, key.clone())).await? {
        Opened::Step(s) => s,
        Opened::Ended(state) => return Err(Halt::Failed(format!("the exchange is {}", state.as_str()))),
    };
    if step.state.is_over() {
        return Ok(None);
    }
    closed()?;
    match launch.start_step(&co.council, &key.member, place, &step) {
        Some(claim) => Ok(Some(claim.into_run())),
        None => {
            closed()?;
            let why = format!("{} is not a member of this workspace any more", key.member);
            db.cancel_step(step.id, why).await?;
            Ok(None)
        }
    }
}
