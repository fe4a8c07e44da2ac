//! `council.retry` (F-C4): re-query the members whose last run failed. A
//! retry answers the same message as the failed run, in the same round, and
//! its message *replaces* the failed one: it is appended (seq stays dense,
//! nothing is rewritten) and names the failed message in `replaces`, and
//! everything that shows the thread — clients and the history agents are
//! given — puts it in the failed message's place. No round is added.

use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::types::{MessageKind, RunInfo, Style, display_order};

use super::{Council, Launch};
use crate::agent::registry::{Claim, Place};
use crate::client::ClientId;
use crate::db::exchanges::{Exchange, Kind, NewExchange, StepKey, StepState};
use crate::db::messages::Page;
use serde::{Deserialize, Serialize};

pub async fn retry(
    c: &Council,
    thread: String,
    style: Style,
    timeout: Option<Duration>,
    client: Option<ClientId>,
    path: Option<String>,
) -> Result<Vec<RunInfo>, ErrorObjectOwned> {
    let thread = c.agents.db.thread(thread).await?;
    let config = super::send::read_config(&thread.workspace, path.as_deref())?;
    let messages = c.agents.db.messages(thread.id.clone(), Page::all_after(0)).await?;
    let shown = display_order(&messages);
    let mut members: Vec<String> = config.council.members.clone();
    for m in &thread.members {
        if !members.contains(m) {
            members.push(m.clone());
        }
    }
    let failed: Vec<_> = members
        .iter()
        .filter(|m| c.agents.runs.list(Some(&thread.id)).iter().all(|r| &r.member != *m))
        .filter_map(|member| {
            let last = shown.iter().rev().find(|m| {
                &m.from == member
                    && matches!(m.kind, MessageKind::Agent | MessageKind::Error | MessageKind::Interrupted)
            })?;
            (last.kind == MessageKind::Error).then(|| (member.clone(), (*last).clone()))
        })
        .collect();
    let work = super::work_runs(&c.agents.db, &thread.id).await?;
    let launch = Launch { thread, config, style, timeout, client, prompt: None, work };
    let mut runs = Vec::new();
    for (member, message) in failed {
        let place = Place {
            reply_to: message.reply_to,
            round: message.round,
            exchange: None,
            replaces: Some(message.seq),
            purpose: message.purpose,
            step: None,
        };
        // Journaled as an exchange of its own (F-J1): a retry a restart
        // cuts is asked again.
        let plan = Retried { member: member.clone(), place, style, timeout_s: timeout.map(|t| t.as_secs()) };
        let x = NewExchange {
            thread: launch.thread.id.clone(),
            seq: message.seq,
            kind: Kind::Retry,
            correlation_id: None,
            plan: serde_json::to_value(&plan).unwrap_or_default(),
            first_steps: vec![StepKey::answer(message.round.unwrap_or(0), &member)],
            path: launch.config.path.clone(),
        };
        let claim = match c.agents.db.begin_settling_exchange(x).await? {
            Some((_, steps)) => steps.first().and_then(|s| launch.start_step(c, &member, place, s)),
            None => launch.start(c, &member, place),
        };
        if let Some(run) = claim.map(Claim::into_run) {
            runs.push(run.info());
        }
    }
    Ok(runs)
}

/// A retry's plan in its journal: enough to ask again after a restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Retried {
    pub member: String,
    pub place: Place,
    pub style: Style,
    pub timeout_s: Option<u64>,
}

/// Takes retry exchange `x` up again after a restart: its step, cut, is
/// asked again, replacing what the cut run had said.
pub async fn resume(c: &Council, x: &Exchange, launch: Launch) -> bool {
    let Ok(plan) = serde_json::from_value::<Retried>(x.plan.clone()) else { return false };
    let steps = match c.agents.db.exchange_steps(x.id).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(thread = x.thread, "cannot read the retry's journal: {e}");
            return false;
        }
    };
    let launch = Launch { style: plan.style, timeout: plan.timeout_s.map(Duration::from_secs), ..launch };
    for s in steps.iter().filter(|s| s.state == StepState::Pending) {
        launch.start_step(c, &plan.member, plan.place, s);
    }
    true
}
