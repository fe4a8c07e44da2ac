//! One HTTP request on a connection, before jsonrpsee takes it: a POST's
//! body is read (within the request limit) so that ids jsonrpsee cannot
//! take get their stand-ins ([`super::ids`]) and the answer its ids back,
//! and it is marked [`OverHttp`] (a subscription needs a WebSocket); a
//! WebSocket upgrade that fails is answered 400, not 200.
//!
//! A request is *in flight* for the idle rule ([`super::idle`]) only once
//! it has been received whole: while its body is still coming, the
//! connection is idle when its bytes stop, so a client that sends half a
//! request and then nothing is dropped like any idle one, while a call the
//! daemon is answering (a completion waiting on its members) is not.

use http_body_util::{BodyExt, Limited};
use jsonrpsee::server::{HttpBody, HttpResponse};

use super::idle::Activity;
use super::ids;
use super::request_check::OverHttp;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Hands `req` to `svc` (jsonrpsee's service for the connection).
pub async fn handle<S>(
    mut svc: S,
    req: http::Request<hyper::body::Incoming>,
    max_request_bytes: u32,
    activity: &Activity,
) -> Result<HttpResponse, BoxError>
where
    S: tower::Service<http::Request<HttpBody>, Response = HttpResponse, Error = BoxError>,
{
    if jsonrpsee::server::ws::is_upgrade_request(&req) {
        let _in_flight = activity.request();
        let response = svc.call(req.map(HttpBody::new)).await?;
        return Ok(if response.status() == http::StatusCode::SWITCHING_PROTOCOLS {
            response
        } else {
            failed_upgrade(response).await
        });
    }
    if req.method() != http::Method::POST {
        let _in_flight = activity.request();
        return svc.call(req.map(HttpBody::new)).await;
    }
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(OverHttp);
    let body = match Limited::new(body, max_request_bytes as usize).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Ok(jsonrpsee::server::http::response::too_large(max_request_bytes));
        }
        Err(e) => return Err(e),
    };
    let _in_flight = activity.request();
    let (body, carried) = match ids::fix_request(&body) {
        Some((fixed, n)) => (hyper::body::Bytes::from(fixed), n),
        None => (body, 0),
    };
    parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
    let response = svc.call(http::Request::from_parts(parts, HttpBody::new(http_body_util::Full::new(body)))).await?;
    if carried == 0 {
        return Ok(response);
    }
    let (mut parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    let body = match ids::restore_response(&body) {
        Some((restored, _)) => restored,
        None => body.to_vec(),
    };
    parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
    Ok(http::Response::from_parts(parts, HttpBody::from(body)))
}

/// A 400 saying why the upgrade failed (jsonrpsee answers 200).
async fn failed_upgrade(response: HttpResponse) -> HttpResponse {
    let why = match response.into_body().collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(e) => e.to_string(),
    };
    let mut bad = http::Response::new(HttpBody::from(format!("the WebSocket upgrade failed: {why}\n")));
    *bad.status_mut() = http::StatusCode::BAD_REQUEST;
    bad.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    bad
}
