//! RPC middleware that answers a call with an error instead of making it,
//! when a check says so. The daemon stacks three: the server's request
//! check (`crate::server::request_check`), the confinement of agents'
//! processes ([`super::confine`]) and the parameter-name check
//! ([`super::params`]). Calls in a batch are checked one by
//! one; notifications pass (they are never answered).

use jsonrpsee::core::middleware::{Batch, BatchEntry, BatchEntryErr, Notification, RpcServiceT};
use jsonrpsee::server::MethodResponse;
use jsonrpsee::types::{ErrorObject, Request};

/// Why a call may not be made, if it may not.
pub type Check = fn(&Request<'_>) -> Result<(), ErrorObject<'static>>;

/// The layer to put in the server's RPC middleware stack.
#[derive(Debug, Clone, Copy)]
pub struct CheckLayer(pub Check);

impl<S> tower::Layer<S> for CheckLayer {
    type Service = Checked<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Checked { inner, check: self.0 }
    }
}

#[derive(Debug, Clone)]
pub struct Checked<S> {
    inner: S,
    check: Check,
}

impl<S> RpcServiceT for Checked<S>
where
    S: RpcServiceT<
            MethodResponse = MethodResponse,
            BatchResponse = MethodResponse,
            NotificationResponse = MethodResponse,
        > + Send
        + Sync
        + Clone
        + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = MethodResponse;
    type BatchResponse = MethodResponse;

    fn call<'a>(&self, request: Request<'a>) -> impl Future<Output = Self::MethodResponse> + Send + 'a {
        let verdict = (self.check)(&request);
        let inner = self.inner.clone();
        async move {
            match verdict {
                Ok(()) => inner.call(request).await,
                Err(e) => MethodResponse::error(request.id, e).with_extensions(request.extensions),
            }
        }
    }

    fn batch<'a>(&self, mut batch: Batch<'a>) -> impl Future<Output = Self::BatchResponse> + Send + 'a {
        for entry in batch.iter_mut() {
            let refused = match entry {
                Ok(BatchEntry::Call(req)) => (self.check)(req).err().map(|e| (req.id.clone(), e)),
                _ => None,
            };
            if let Some((id, e)) = refused {
                *entry = Err(BatchEntryErr::new(id, e));
            }
        }
        self.inner.batch(batch)
    }

    fn notification<'a>(&self, n: Notification<'a>) -> impl Future<Output = Self::NotificationResponse> + Send + 'a {
        self.inner.notification(n)
    }
}
