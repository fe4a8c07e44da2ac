//! One way to serve a feed subscription (`approval.subscribe`,
//! `notify.subscribe`): the items there are now, then each item of a
//! broadcast as it comes, `lagged` when the subscriber fell behind; each
//! send bounded by the client timeout (a subscriber that stops reading
//! ends its own subscription), ended by the client, its connection or
//! kdd's shutdown.

use jsonrpsee::server::{SubscriptionMessage, SubscriptionSink};
use serde::Serialize;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use crate::state::Daemon;

/// Sends `first`, then what `rx` receives (as `item`, or `lagged`) to
/// `sink`, until it or kdd ends.
pub(super) async fn serve<T: Clone, E: Serialize>(
    d: &Daemon,
    sink: SubscriptionSink,
    first: impl IntoIterator<Item = E>,
    mut rx: broadcast::Receiver<T>,
    item: impl Fn(T) -> E,
    lagged: impl Fn(u64) -> E,
) {
    let send = |e: E| {
        let json = serde_json::value::to_raw_value(&e);
        let sink = &sink;
        async move {
            let Ok(json) = json else { return false };
            sink.send_timeout(SubscriptionMessage::from(json), d.client_timeout).await.is_ok()
        }
    };
    for e in first {
        if !send(e).await {
            return;
        }
    }
    loop {
        tokio::select! {
            _ = sink.closed() => return,
            _ = d.close.cancelled() => return,
            got = rx.recv() => {
                let ok = match got {
                    Ok(t) => send(item(t)).await,
                    Err(RecvError::Lagged(missed)) => send(lagged(missed)).await,
                    Err(RecvError::Closed) => return,
                };
                if !ok {
                    return;
                }
            }
        }
    }
}
