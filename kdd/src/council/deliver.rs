//! Delivering a routed message to its members (F-X1, F-X3): each addressee
//! by its delivery mode — `immediate` starts a run answering it now, or
//! queues one behind the member's run in flight on the thread; `queued` keeps it
//! in the member's inbox for its next turn — and each `cc` member keeps it
//! in its inbox without being asked. An emergency bypasses modes and
//! queues. The message, the inbox entries and one event per decision are
//! written in one transaction ([`crate::db::compose::route`]); runs start
//! after it.

use std::sync::Arc;

use kd_proto::types::{Delivery, DeliveryMode, DeliveryStatus, Message, Role, RouteType, Style, Thread};

use super::{Council, Launch};
use crate::agent::registry::{Claim, Place, Run};
use crate::client::ClientId;
use crate::config::Config;
use crate::db::DbResult;
use crate::db::compose::{Carrier, Routing};
use crate::db::exchanges::{Exchange, ExchangeId, Kind, NewExchange, Opened, Purpose, Step, StepKey, StepState};
use crate::db::inbox::{Entry, Kept};
use serde::{Deserialize, Serialize};

/// A message to deliver.
pub struct Request {
    pub thread: Thread,
    pub config: Config,
    pub message: Carrier,
    pub from: String,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub route: RouteType,
    pub correlation_id: String,
    pub style: Style,
    pub client: Option<ClientId>,
    /// The exchange and round the runs it starts belong to.
    pub exchange: Option<u64>,
    pub round: Option<u32>,
    /// An emergency broadcast's id: every addressee owes an acknowledgement.
    pub emergency: Option<String>,
    /// The journal its runs are kept in (F-J1): each run it starts takes a
    /// hand-off step, so that a restart asks a cut one again.
    pub journal: Journaled,
}

/// Where the runs a delivery starts are journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Journaled {
    /// Nowhere (an emergency: its runs are not asked again).
    No,
    /// In the exchange it hands off in.
    In(ExchangeId),
    /// In an exchange of its own, which ends once they are answered (a
    /// King's routed message, a member's send outside any exchange).
    Route,
}

/// A route's plan in its journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoutePlan {
    /// The exchange its runs belong to, if any.
    pub exchange: Option<u64>,
    pub style: Style,
}

/// What a delivery did.
pub struct Delivered {
    pub message: Message,
    pub deliveries: Vec<Delivery>,
    pub participants: Vec<String>,
    /// The runs answering it: started, or queued behind the member's run
    /// in flight.
    pub starts: Vec<Arc<Run>>,
}

/// The step of `member`'s answer to hand-off `seq` in `round`.
fn handoff(round: Option<u32>, member: &str, seq: u64) -> StepKey {
    StepKey { round: round.unwrap_or(1), member: member.to_string(), purpose: Purpose::Handoff, cause: seq }
}

/// Asks again the hand-offs of exchange `x` a restart cut (`exchange`:
/// the exchange their runs belong to); nothing follows their answers.
pub fn restart_handoffs(c: &Council, launch: &Launch, x: &Exchange, steps: &[Step], exchange: Option<u64>) {
    for s in steps.iter().filter(|s| s.key.purpose == Purpose::Handoff && s.state == StepState::Pending) {
        let place = Place {
            reply_to: Some(s.key.cause),
            round: Some(s.key.round),
            exchange,
            replaces: None,
            purpose: None,
            step: None,
        };
        if launch.start_step(c, &s.key.member, place, s).is_none() {
            tracing::info!(thread = x.thread, member = s.key.member, "a cut hand-off was not asked again");
        }
    }
}

/// Takes a route's exchange up again after a restart: its cut runs are
/// asked again.
pub async fn resume(c: &Council, x: &Exchange, launch: Launch) -> bool {
    let Ok(plan) = serde_json::from_value::<RoutePlan>(x.plan.clone()) else { return false };
    match c.agents.db.exchange_steps(x.id).await {
        Ok(steps) => {
            restart_handoffs(c, &Launch { style: plan.style, ..launch }, x, &steps, plan.exchange);
            true
        }
        Err(e) => {
            tracing::warn!(thread = x.thread, "cannot read the route's journal: {e}");
            false
        }
    }
}

pub async fn deliver(c: &Arc<Council>, r: Request) -> DbResult<Delivered> {
    let db = &c.agents.db;
    let mut plan: Vec<(Entry, &'static str, DeliveryMode)> = Vec::new();
    for (member, role) in r.to.iter().map(|m| (m, Role::To)).chain(r.cc.iter().map(|m| (m, Role::Cc))) {
        let prefs = r.config.delivery(member);
        let overrides = db.delivery_overrides(r.thread.workspace.clone(), member.clone()).await?;
        let mode = prefs.mode_for(r.route, &overrides);
        let how = match (role, mode) {
            (Role::Cc, _) => "copied",
            _ if r.route == RouteType::Emergency => "emergency",
            (Role::To, DeliveryMode::Immediate) => "immediate",
            (Role::To, DeliveryMode::Queued) => "queued",
        };
        let entry = Entry {
            thread: r.thread.id.clone(),
            member: member.clone(),
            seq: 0,
            from: r.from.clone(),
            route: r.route,
            role,
            // An emergency is never refused or dropped for a full inbox.
            limit: if r.route == RouteType::Emergency { u32::MAX } else { prefs.queue_limit },
            overflow: prefs.overflow,
            correlation_id: r.correlation_id.clone(),
        };
        plan.push((entry, how, mode));
    }
    let routing = Routing {
        message: r.message,
        route: r.route,
        entries: plan.iter().map(|(e, how, _)| (e.clone(), *how)).collect(),
        emergency: r.emergency.clone(),
        correlation_id: r.correlation_id.clone(),
    };
    let routed = db.route(routing).await?;
    let journal = match r.journal {
        Journaled::No => None,
        Journaled::In(x) => Some(x),
        Journaled::Route => {
            // Its own exchange, begun with a step for each run it starts.
            let starting: Vec<StepKey> = plan
                .iter()
                .zip(&routed.kept)
                .filter(|((_, how, _), kept)| {
                    matches!(kept, Kept::Queued { .. }) && !matches!(*how, "copied" | "queued")
                })
                .map(|((e, _, _), _)| handoff(r.round, &e.member, routed.message.seq))
                .collect();
            let x = NewExchange {
                thread: r.thread.id.clone(),
                seq: routed.message.seq,
                kind: Kind::Route,
                correlation_id: None,
                plan: serde_json::to_value(RoutePlan { exchange: r.exchange, style: r.style }).unwrap_or_default(),
                first_steps: starting,
                path: r.config.path.clone(),
            };
            if x.first_steps.is_empty() { None } else { db.begin_settling_exchange(x).await?.map(|(x, _)| x.id) }
        }
    };
    let launch = Launch {
        thread: r.thread.clone(),
        config: r.config.clone(),
        style: r.style,
        timeout: None,
        client: r.client,
        prompt: None,
        work: super::work_runs(db, &r.thread.id).await?,
    };
    let place = Place {
        reply_to: Some(routed.message.seq),
        round: r.round,
        exchange: r.exchange,
        replaces: None,
        purpose: None,
        step: None,
    };
    let mut deliveries = Vec::new();
    let mut starts = Vec::new();
    for ((entry, how, mode), kept) in plan.into_iter().zip(routed.kept) {
        let mut d = Delivery {
            member: entry.member.clone(),
            role: entry.role,
            mode,
            status: DeliveryStatus::Queued,
            run: None,
            inbox: None,
            queue_size: None,
            dropped: None,
            reason: None,
        };
        match kept {
            Kept::Rejected { size } => {
                d.status = DeliveryStatus::Rejected;
                d.queue_size = Some(size);
                d.reason = Some(format!(
                    "{}'s inbox is full ({size} pending, agents.{}.delivery.overflow is reject_new)",
                    entry.member, entry.member
                ));
            }
            Kept::Queued { id, size, dropped } => {
                d.inbox = Some(id);
                d.queue_size = Some(size);
                d.dropped = dropped;
                if how == "copied" {
                    d.status = DeliveryStatus::Copied;
                } else if how != "queued" {
                    let claim = match journal {
                        Some(x) => {
                            let key = handoff(r.round, &entry.member, routed.message.seq);
                            match db.open_step(x, key).await? {
                                Opened::Step(step) => launch.start_step(c, &entry.member, place, &step),
                                Opened::Ended(_) => None,
                            }
                        }
                        None => launch.start(c, &entry.member, place),
                    };
                    match claim {
                        Some(claim) => {
                            d.status = match claim {
                                Claim::Queued(_) => DeliveryStatus::AfterRun,
                                Claim::New(_) | Claim::Joined(_) => DeliveryStatus::Started,
                            };
                            let run = claim.into_run();
                            d.run = Some(run.id.clone());
                            starts.push(run);
                        }
                        // The daemon is stopping: the inbox entry waits for
                        // the next turn.
                        None => d.status = DeliveryStatus::Queued,
                    }
                }
            }
        }
        deliveries.push(d);
    }
    Ok(Delivered { message: routed.message, deliveries, participants: routed.participants, starts })
}
