//! `council.retry` (F-C4): re-query the members whose last run failed. A
//! retry answers the same message as the failed run, in the same round, and
//! its message *replaces* the failed one: it is appended (seq stays dense,
//! nothing is rewritten) and names the failed message in `replaces`, and
//! everything that shows the thread — clients and the history agents are
//! given — puts it in the failed message's place. No round is added.

use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::types::{MessageKind, RunInfo, Style, display_order};

use super::{Council, Launch};
use crate::agent::registry::{Claim, Place};
use crate::client::ClientId;
use crate::config;
use crate::db::messages::Page;

pub async fn retry(
    c: &Council,
    thread: String,
    style: Style,
    timeout: Option<Duration>,
    client: Option<ClientId>,
) -> Result<Vec<RunInfo>, ErrorObjectOwned> {
    let thread = c.agents.db.thread(thread).await?;
    let config = config::load(std::path::Path::new(&thread.workspace))
        .map_err(|e| ErrorCode::InvalidArgument.error(format!("configuration: {e}")))?;
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
        if let Some(run) = launch.start(c, &member, place).map(Claim::into_run) {
            runs.push(run.info());
        }
    }
    Ok(runs)
}
