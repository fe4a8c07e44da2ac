//! Emergency broadcasts (F-X4): a message to every member that bypasses
//! queues and delivery modes. Runs in flight are told (an event on the
//! run) and stopped only when the sender asks; each member owes an
//! acknowledgement — its next answer that was given the broadcast, or
//! `kd ack` from its shell — and subscribers hear who still owes one.

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::names::KING;
use kd_proto::types::{Emergency, MessageKind, RouteType, Style, ThreadEvent};
use serde_json::json;

use super::{Coord, check_sender};
use crate::agent::registry::StopReason;
use crate::client::ClientId;
use crate::council::deliver::{self, Request};
use crate::db::compose::Carrier;
use crate::db::events::Record;
use crate::db::messages::NewMessage;
use crate::db::random_id;

/// An emergency to every member; the runs it starts are found on `path`,
/// the asking client's `PATH` (none: kdd's own).
pub async fn broadcast(
    co: &Coord,
    thread: String,
    from: String,
    body: String,
    (stop, client, path): (bool, Option<ClientId>, Option<String>),
) -> Result<Emergency, ErrorObjectOwned> {
    let (thread, config) = co.thread(&thread, path.as_deref()).await?;
    check_sender(&config, &from)?;
    let id = format!("e-{}", random_id(10));
    let members: Vec<String> = config.council.members.iter().filter(|m| **m != from).cloned().collect();
    let in_flight: Vec<_> =
        co.council.agents.runs.list(Some(&thread.id)).into_iter().filter(|r| members.contains(&r.member)).collect();
    let mut told = Vec::new();
    let mut stopped = Vec::new();
    let mut events = Vec::new();
    for run in &in_flight {
        told.push(run.id.clone());
        if stop {
            // The King's stop is the King's cancel; a member's is not.
            run.stop(if from == KING { StopReason::Cancelled } else { StopReason::Emergency });
            stopped.push(run.id.clone());
        }
        events.push(Record {
            kind: "system.emergency_told".into(),
            thread: Some(thread.id.clone()),
            agent: Some(run.member.clone()),
            from: Some(from.clone()),
            to: vec![run.member.clone()],
            correlation_id: Some(id.clone()),
            data: json!({"broadcast": id, "run": run.id, "stopped": stop}),
        });
    }
    co.council.agents.db.record(events).await?;
    let kind = if from == KING { MessageKind::King } else { MessageKind::Agent };
    let message = NewMessage {
        correlation_id: Some(id.clone()),
        route: Some(RouteType::Emergency),
        ..NewMessage::new(&thread.id, &from, members.clone(), kind, body)
    };
    let thread_id = thread.id.clone();
    let request = Request {
        thread,
        config,
        message: Carrier::New(message),
        from: from.clone(),
        to: members.clone(),
        cc: vec![],
        route: RouteType::Emergency,
        correlation_id: id.clone(),
        style: Style::Council,
        client,
        exchange: None,
        round: None,
        emergency: Some(id.clone()),
        journal: crate::council::deliver::Journaled::No,
    };
    let d = deliver::deliver(&co.council, request).await?;
    co.council.agents.hub.publish(
        &thread_id,
        ThreadEvent::Emergency { broadcast: id.clone(), seq: d.message.seq, from, pending: members.clone() },
    );
    Ok(Emergency { broadcast: id, message: d.message, members, told_runs: told, stopped_runs: stopped })
}
