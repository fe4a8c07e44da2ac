//! `message.route` (F-X1): a message from the King or a member to members,
//! with `to`, `cc`, `reply_to` and a conversation type — given, or derived:
//! `all` among the addressees makes a broadcast (every member but the
//! sender), an answer to a message a reply (to its sender when no one is
//! named), one addressee point-to-point, several a multicast. A member's
//! message sent from its run (`member.send`) is a hand-off of the run's
//! exchange: it counts against `council.max_hops`
//! ([`crate::council::hops`]), and the runs it starts belong to that
//! exchange.

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::{ALL, KING};
use kd_proto::types::{MessageKind, RouteType, Routed, Style};

use super::{Coord, check_members, check_sender};
use crate::client::ClientId;
use crate::council::deliver::{self, Journaled, Request};
use crate::council::hops::{self, HandOff};
use crate::db::compose::Carrier;
use crate::db::messages::NewMessage;
use crate::db::random_id;

/// A routing, with its parameters checked for form.
pub struct Params {
    pub thread: String,
    pub from: String,
    pub body: String,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub reply_to: Option<u64>,
    pub route: Option<RouteType>,
    pub correlation_id: Option<String>,
    pub client: Option<ClientId>,
    /// Sent by a member from its run: where that run stands.
    pub from_run: Option<FromRun>,
    /// The `PATH` the runs it starts are found on and run with: the asking
    /// client's, or the sending run's (none: kdd's own).
    pub path: Option<String>,
}

/// Where the run a member sends from stands.
#[derive(Debug, Clone, Copy, Default)]
pub struct FromRun {
    /// The exchange it belongs to (or else the message it answers, which
    /// starts one): its hand-offs are counted there.
    pub exchange: Option<u64>,
    pub round: Option<u32>,
}

pub async fn route(co: &Coord, p: Params) -> Result<Routed, ErrorObjectOwned> {
    let (thread, config) = co.thread(&p.thread, p.path.as_deref()).await?;
    check_sender(&config, &p.from)?;
    check_members(&config, &p.to, true)?;
    check_members(&config, &p.cc, false)?;
    if p.route == Some(RouteType::Emergency) {
        return Err(ErrorCode::InvalidArgument.error("an emergency goes through emergency.broadcast"));
    }
    let others = |names: &[String]| -> Vec<String> { names.iter().filter(|n| **n != p.from).cloned().collect() };
    let everyone = p.route == Some(RouteType::Broadcast) || p.to.iter().any(|n| n == ALL);
    let mut to = if everyone { others(&config.council.members) } else { others(&p.to) };
    if to.is_empty()
        && let Some(seq) = p.reply_to
    {
        // A reply with no one named goes to the sender of what it answers.
        let answered = co.council.agents.db.message(thread.id.clone(), seq).await?;
        if answered.from != p.from && answered.from != KING {
            to.push(answered.from);
        }
    }
    if to.is_empty() {
        return Err(ErrorCode::InvalidArgument
            .error("name at least one other member in to (or all), or reply_to a member's message"));
    }
    let cc: Vec<String> = others(&p.cc).into_iter().filter(|n| !to.contains(n)).collect();
    let route = p.route.unwrap_or(if everyone {
        RouteType::Broadcast
    } else if p.reply_to.is_some() {
        RouteType::Reply
    } else if to.len() == 1 {
        RouteType::PointToPoint
    } else {
        RouteType::Multicast
    });
    let from_run = p.from_run.unwrap_or_default();
    if let Some(exchange) = from_run.exchange {
        let max = config.coordination.max_hops;
        let h = HandOff { thread: &thread.id, exchange, from: &p.from, to: &to, seq: None, max };
        if !hops::take(&co.council, h).await {
            return Err(ErrorCode::LimitExceeded.error(format!(
                "not delivered: this exchange has had council.max_hops ({max}) hand-offs; the King is told. \
                 Say what you have to say in your answer instead"
            )));
        }
    }
    // Its runs are journaled (F-J1): in the exchange the sender's run
    // belongs to, while it is open, else in an exchange of its own.
    let journal = match from_run.exchange {
        Some(seq) => match co.council.agents.db.open_exchange_at(thread.id.clone(), seq).await? {
            Some(x) => Journaled::In(x),
            None => Journaled::Route,
        },
        None => Journaled::Route,
    };
    let correlation_id = p.correlation_id.unwrap_or_else(|| format!("m-{}", random_id(10)));
    let kind = if p.from == KING { MessageKind::King } else { MessageKind::Agent };
    let message = NewMessage {
        cc: cc.clone(),
        reply_to: p.reply_to,
        correlation_id: Some(correlation_id.clone()),
        route: Some(route),
        ..NewMessage::new(&thread.id, &p.from, to.clone(), kind, p.body)
    };
    let request = Request {
        thread,
        config,
        message: Carrier::New(message),
        from: p.from,
        to,
        cc,
        route,
        correlation_id: correlation_id.clone(),
        style: Style::Council,
        client: p.client,
        exchange: from_run.exchange,
        round: from_run.round,
        emergency: None,
        journal,
    };
    let d = deliver::deliver(&co.council, request).await?;
    Ok(Routed {
        message: d.message,
        route_type: route,
        deliveries: d.deliveries,
        participants: d.participants,
        correlation_id,
    })
}
