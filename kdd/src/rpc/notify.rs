//! `notify.test`: one test notification to each sink of a workspace's
//! configuration, through the daemon's notifier ([`crate::notify`]), and
//! what each sink answered; `notify.subscribe`: the notifier's feed
//! ([`crate::notify::feed`]), live.

use jsonrpsee::PendingSubscriptionSink;
use jsonrpsee::core::{SubscriptionResult, async_trait};
use jsonrpsee::server::SubscriptionMessage;
use kd_proto::RpcResult;
use kd_proto::notify::{NotifyApiServer, NotifyEvent, NotifyTest};
use tokio::sync::broadcast::error::RecvError;

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
        let (kept, mut rx) = d.notify.feed.subscribe(since);
        let _counted = d.hub.track();
        let sink = pending.accept().await?;
        let send = |e: NotifyEvent| {
            let json = serde_json::value::to_raw_value(&e);
            let sink = &sink;
            let timeout = d.client_timeout;
            async move {
                let Ok(json) = json else { return false };
                sink.send_timeout(SubscriptionMessage::from(json), timeout).await.is_ok()
            }
        };
        for n in kept {
            if !send(NotifyEvent::Notified { notification: Box::new(n) }).await {
                return Ok(());
            }
        }
        loop {
            tokio::select! {
                _ = sink.closed() => return Ok(()),
                _ = d.close.cancelled() => return Ok(()),
                got = rx.recv() => {
                    let ok = match got {
                        Ok(n) => send(NotifyEvent::Notified { notification: Box::new(n) }).await,
                        Err(RecvError::Lagged(missed)) => send(NotifyEvent::Lagged { missed }).await,
                        Err(RecvError::Closed) => return Ok(()),
                    };
                    if !ok {
                        return Ok(());
                    }
                }
            }
        }
    }
}
