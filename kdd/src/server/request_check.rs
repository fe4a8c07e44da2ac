//! RPC middleware that answers what jsonrpsee would not answer well: a
//! request whose id is not a valid JSON-RPC id (see [`super::ids`]) gets
//! -32600 instead of silence, and a subscription asked over plain HTTP
//! gets -32600 saying it needs a WebSocket instead of "Internal error".

use jsonrpsee::core::middleware::{Batch, BatchEntry, BatchEntryErr, Notification, RpcServiceT};
use jsonrpsee::server::MethodResponse;
use jsonrpsee::types::{ErrorCode, ErrorObject, Id, Request};

use super::ids::INVALID;

/// How a request reached the daemon; set on plain HTTP requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverHttp;

/// The layer to put in the server's RPC middleware stack.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestCheckLayer;

impl<S> tower::Layer<S> for RequestCheckLayer {
    type Service = RequestCheck<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestCheck { inner }
    }
}

#[derive(Debug, Clone)]
pub struct RequestCheck<S> {
    inner: S,
}

/// Why `request` cannot be made, if it cannot.
fn refusal(request: &Request<'_>) -> Option<ErrorObject<'static>> {
    if matches!(&request.id, Id::Str(id) if id.as_ref() == INVALID) {
        return Some(invalid_request("the id must be a string, an integer or null".into()));
    }
    let subscription = kd_proto::openrpc::method(&request.method).is_some_and(|m| m.subscription.is_some());
    if subscription && request.extensions.get::<OverHttp>().is_some() {
        return Some(invalid_request(format!(
            "{} needs a WebSocket connection: its events are pushed, which plain HTTP cannot do",
            request.method
        )));
    }
    None
}

fn invalid_request(why: String) -> ErrorObject<'static> {
    ErrorObject::owned(ErrorCode::InvalidRequest.code(), format!("Invalid request: {why}"), None::<()>)
}

impl<S> RpcServiceT for RequestCheck<S>
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
        let refused = refusal(&request);
        let inner = self.inner.clone();
        async move {
            match refused {
                None => inner.call(request).await,
                Some(e) => MethodResponse::error(request.id, e).with_extensions(request.extensions),
            }
        }
    }

    fn batch<'a>(&self, mut batch: Batch<'a>) -> impl Future<Output = Self::BatchResponse> + Send + 'a {
        for entry in batch.iter_mut() {
            let refused = match entry {
                Ok(BatchEntry::Call(req)) => refusal(req).map(|e| (req.id.clone(), e)),
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
