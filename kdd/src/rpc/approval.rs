//! The King's methods on approvals (`kd_proto::approval`, issue 33): list
//! them, decide one, follow every thread's. An agent's process may not call
//! them (see [`super::confine`]); the member surface has none.

use jsonrpsee::PendingSubscriptionSink;
use jsonrpsee::core::{SubscriptionResult, async_trait};
use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::approval::{
    Approval, ApprovalApiServer, ApprovalEvent, ApprovalState, Decision, LIST_PAGE, MAX_TEXT, Scope,
};
use kd_proto::{ErrorCode, RpcResult};

use super::error::invalid;
use super::{Rpc, validate};
use crate::db::approvals::{Decide, Decided};

/// What an approval id may be.
fn approval_id(id: &str) -> RpcResult<()> {
    let ok = id.len() <= 64
        && id.starts_with("ap-")
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok { Ok(()) } else { Err(invalid(format!("{id:?} is not an approval id (ap-…)"))) }
}

#[async_trait]
impl ApprovalApiServer for Rpc {
    async fn approval_list(
        &self,
        all: Option<bool>,
        thread: Option<String>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<Approval>> {
        if let Some(t) = &thread {
            validate::thread_id(t)?;
        }
        let limit = limit.unwrap_or(LIST_PAGE).clamp(1, LIST_PAGE);
        Ok(self.d.db.approvals(all.unwrap_or(false), thread, limit).await?)
    }

    async fn approval_decide(
        &self,
        id: String,
        decision: Decision,
        scope: Option<Scope>,
        message: Option<String>,
    ) -> RpcResult<Approval> {
        approval_id(&id)?;
        if let Some(m) = &message
            && m.chars().count() > MAX_TEXT * 4
        {
            return Err(invalid(format!("message is longer than {} characters", MAX_TEXT * 4)));
        }
        let d = match decision {
            Decision::Approve => {
                if message.is_some() {
                    return Err(invalid("a message goes with a denial (the agent is told it)"));
                }
                Decide {
                    id: id.clone(),
                    state: ApprovalState::Approved,
                    by: Some(kd_proto::approval::DecidedBy::King),
                    scope: Some(scope.unwrap_or(Scope::Once)),
                    message: None,
                }
            }
            Decision::Deny => {
                if scope.is_some() {
                    return Err(invalid("a scope goes with an approval"));
                }
                let message = message
                    .filter(|m| !m.trim().is_empty())
                    .unwrap_or_else(|| "The King denied this permission (kd).".to_string());
                Decide {
                    id: id.clone(),
                    state: ApprovalState::Denied,
                    by: Some(kd_proto::approval::DecidedBy::King),
                    scope: None,
                    message: Some(message),
                }
            }
        };
        match self.d.db.decide_approval(d).await? {
            Decided::Now(a) => Ok(a),
            Decided::Already(a) => Err(ErrorCode::Conflict.error(format!(
                "approval {id} is {} already{}",
                a.state.as_str(),
                a.decided_by.map(|b| format!(" (by the {})", b.as_str())).unwrap_or_default()
            ))),
        }
    }

    async fn approval_subscribe(&self, pending: PendingSubscriptionSink) -> SubscriptionResult {
        let d = self.d.clone();
        // Subscribed before the pending ones are read: nothing falls between.
        let rx = d.hub.subscribe_approvals();
        let now = match d.db.approvals(false, None, LIST_PAGE).await {
            Ok(a) => a,
            Err(e) => {
                pending.reject(ErrorObjectOwned::from(e)).await;
                return Ok(());
            }
        };
        let _counted = d.hub.track();
        let sink = pending.accept().await?;
        let first = now.into_iter().rev().map(|a| ApprovalEvent::Requested { approval: Box::new(a) });
        let item = |e: std::sync::Arc<ApprovalEvent>| ApprovalEvent::clone(&e);
        super::feed::serve(&d, sink, first, rx, item, |missed| ApprovalEvent::Lagged { missed }).await;
        Ok(())
    }
}
