//! The request check (run by [`crate::rpc::check::CheckLayer`]) that
//! answers what jsonrpsee would not answer well: a
//! request whose id is not a valid JSON-RPC id (see [`super::ids`]) gets
//! -32600 instead of silence, and a subscription asked over plain HTTP
//! gets -32600 saying it needs a WebSocket instead of "Internal error".

use jsonrpsee::types::{ErrorCode, ErrorObject, Id, Request};

use super::ids::INVALID;

/// How a request reached the daemon; set on plain HTTP requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverHttp;

/// The check for [`crate::rpc::check::CheckLayer`]: a request with a
/// valid id, and no subscription over plain HTTP.
pub fn check_request(request: &Request<'_>) -> Result<(), ErrorObject<'static>> {
    if matches!(&request.id, Id::Str(id) if id.as_ref() == INVALID) {
        return Err(invalid_request("the id must be a string, an integer or null".into()));
    }
    let subscription = kd_proto::openrpc::method(&request.method).is_some_and(|m| m.subscription.is_some());
    if subscription && request.extensions.get::<OverHttp>().is_some() {
        return Err(invalid_request(format!(
            "{} needs a WebSocket connection: its events are pushed, which plain HTTP cannot do",
            request.method
        )));
    }
    Ok(())
}

fn invalid_request(why: String) -> ErrorObject<'static> {
    ErrorObject::owned(ErrorCode::InvalidRequest.code(), format!("Invalid request: {why}"), None::<()>)
}
