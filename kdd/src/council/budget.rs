//! `council.budget_usd` (beyond every peer): what one exchange may cost.
//! Before each auto-turn and hand-off, the exchange's cost so far (its
//! runs' answers, as the agents reported it) is compared with the budget;
//! once it is reached, the pending auto-turns stop, the King is told in a
//! message from kd, and an `exchange.budget` event records it.

use kd_proto::names::{KD, KING};
use kd_proto::types::MessageKind;
use serde_json::json;

use super::Council;
use crate::db::events::Record;
use crate::db::exchanges::ExchangeId;
use crate::db::messages::NewMessage;

/// How the notice begins (the notifier knows a budget stop by it).
pub use kd_proto::names::BUDGET_NOTICE as NOTICE;

/// Whether exchange `king` of `thread` has spent `budget`; if so (the first
/// time it is asked), the notice and event are written — with the
/// journal's exchange `x` stopped, in one transaction, when it has one.
pub async fn spent(c: &Council, thread: &str, king: u64, x: Option<ExchangeId>, budget: Option<f64>) -> bool {
    let Some(budget) = budget else { return false };
    let db = &c.agents.db;
    let cost = match db.exchange_cost(thread.to_string(), king).await {
        Ok(cost) => cost,
        Err(e) => {
            tracing::warn!(thread, "cannot read the exchange's cost: {e}");
            return false;
        }
    };
    if cost < budget {
        return false;
    }
    let body = format!(
        "{NOTICE} ${cost:.4}, which reaches council.budget_usd (${budget:.4}): its pending auto-turns \
         are stopped."
    );
    let notice = NewMessage {
        reply_to: Some(king),
        correlation_id: Some(format!("x-{king}")),
        ..NewMessage::new(thread, KD, vec![KING.to_string()], MessageKind::System, body)
    };
    let written = match x {
        Some(x) => db.stop_exchange_with_notice(x, "budget".into(), notice).await,
        None => db.append_message(notice).await.map(|_| true),
    };
    match written {
        Ok(true) => {}
        // Stopped already (a replay): nothing is written twice.
        Ok(false) => return true,
        Err(e) => tracing::warn!(thread, "cannot write the budget notice: {e}"),
    }
    let event = Record {
        kind: "exchange.budget".into(),
        thread: Some(thread.to_string()),
        agent: None,
        from: None,
        to: vec![],
        correlation_id: Some(format!("x-{king}")),
        data: json!({"exchange": king, "cost_usd": cost, "budget_usd": budget}),
    };
    if let Err(e) = db.record(vec![event]).await {
        tracing::warn!(thread, "cannot record the budget stop: {e}");
    }
    true
}
