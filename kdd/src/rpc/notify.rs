//! `notify.test`: one test notification to each sink of a workspace's
//! configuration, through the daemon's notifier ([`crate::notify`]), and
//! what each sink answered; `notify.subscribe`: the notifier's feed
//! ([`crate::notify::feed`]), live.

use jsonrpsee::PendingSubscriptionSink;
use jsonrpsee::core::{SubscriptionResult, async_trait};
use kd_proto::RpcResult;
use kd_proto::notify::{NotifyApiServer, NotifyEvent, NotifyTest};

use super::error::invalid;
use super::{Rpc, validate};

#[async_trait]
impl NotifyApiServer for Rpc {
    async fn notify_test(&self, workspace: String) -> RpcResult<NotifyTest> {
        validate::workspace(&workspace)?;
        self.d.notify.test(std::path::Path::new(&workspace)).await.map_err(|e| invalid(format!("configuration: {e}")))
    }

    async fn notify_subscribe(&self, pending: PendingSubscriptionSink, since: Option<u64>) -> SubscriptionResult {
        let d = self.d.clone();
        let (kept, rx) = d.notify.feed.subscribe(since);
        let _counted = d.hub.track();
        let sink = pending.accept().await?;
        let first = kept.into_iter().map(|n| NotifyEvent::Notified { notification: Box::new(n) });
        let item = |n| NotifyEvent::Notified { notification: Box::new(n) };
        super::feed::serve(&d, sink, first, rx, item, |missed| NotifyEvent::Lagged { missed }).await;
        Ok(())
    }
}
