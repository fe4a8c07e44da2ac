//! One request to kd web, in order: its `Host` ([`super::guard`]), then by
//! path — `/pair` (a token for a session cookie), `/rpc` (JSON-RPC over
//! HTTP POST and WebSocket, only with a session, a WebSocket only from the
//! page's own origin), the page's files and views (only with a session;
//! without one, a page saying how to pair) — and the secure headers on
//! every answer.
//!
//! `/rpc` is the socket's API exactly: the same jsonrpsee service with the
//! same checks ([`crate::server::rpc_service`]) and the same handling of a
//! request ([`crate::server::http_request`]), the caller placed as the
//! King ([`Peer::Free`]).

use std::sync::Arc;

use jsonrpsee::server::{HttpBody, HttpResponse};
use kd_proto::ErrorCode;
use serde_json::json;

use super::assets;
use super::auth::{self, Auth};
use super::guard::{self, Names};
use crate::client::ClientId;
use crate::identity::Peer;
use crate::server::http_request;
use crate::server::idle::Activity;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a request is answered with, beside itself.
pub struct Ctx {
    pub names: Names,
    pub auth: Arc<Auth>,
    pub tls: bool,
    pub max_request_bytes: u32,
}

/// The connection a request came on.
pub struct Conn {
    pub client: ClientId,
    pub peer: String,
    pub activity: Arc<Activity>,
}

fn answer(status: http::StatusCode, content_type: &'static str, body: impl Into<HttpBody>) -> HttpResponse {
    let mut r = HttpResponse::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    r
}

fn rpc_error(status: http::StatusCode, code: ErrorCode, why: &str) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code.code(), "message": why}});
    answer(status, "application/json", body.to_string())
}

/// Answers one request; `svc` is jsonrpsee's service for the connection
/// and `on_upgrade` is told of a WebSocket session the request opens (its
/// session's id).
pub async fn handle<S>(
    mut req: http::Request<hyper::body::Incoming>,
    ctx: &Ctx,
    conn: &Conn,
    svc: S,
    on_upgrade: impl FnOnce(String),
) -> Result<HttpResponse, BoxError>
where
    S: tower::Service<http::Request<HttpBody>, Response = HttpResponse, Error = BoxError>,
{
    let Some(host) = ctx.names.host(req.headers()) else {
        // DNS rebinding: a page that reached kdd under another name.
        let mut r = answer(
            http::StatusCode::MISDIRECTED_REQUEST,
            "text/plain; charset=utf-8",
            "kd web does not answer to this Host\n",
        );
        refused(&mut r);
        return Ok(r);
    };
    let session = auth::cookie(req.headers()).and_then(|secret| ctx.auth.session(&secret));
    let path = req.uri().path().to_string();
    let get = matches!(*req.method(), http::Method::GET | http::Method::HEAD);
    let mut response = match path.as_str() {
        "/pair" if get => pair(&req, ctx, conn),
        "/rpc" => match session {
            None => rpc_error(
                http::StatusCode::UNAUTHORIZED,
                ErrorCode::PermissionDenied,
                "no kd web session: pair this browser first (run kd web)",
            ),
            Some(session) => {
                let upgrade = jsonrpsee::server::ws::is_upgrade_request(&req);
                // A WebSocket must come from the page (cross-site WebSocket
                // hijacking); a POST with an Origin too.
                if !ctx.names.same_origin(req.headers(), &host, upgrade) {
                    rpc_error(http::StatusCode::FORBIDDEN, ErrorCode::Forbidden, "the request's Origin is not kd web's")
                } else {
                    if req.method() == http::Method::POST {
                        req.headers_mut()
                            .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
                    }
                    req.extensions_mut().insert(conn.client);
                    req.extensions_mut().insert(Peer::Free);
                    if upgrade {
                        on_upgrade(session);
                    }
                    http_request::handle(svc, req, ctx.max_request_bytes, &conn.activity).await?
                }
            }
        },
        p if get => match (assets::find(p), session) {
            (Some(asset), Some(_)) => {
                let mut r = answer(
                    http::StatusCode::OK,
                    asset.content_type,
                    HttpBody::new(http_body_util::Full::new(hyper::body::Bytes::from_static(asset.body))),
                );
                if req.method() == http::Method::HEAD {
                    *r.body_mut() = HttpBody::empty();
                }
                r
            }
            (Some(_), None) => answer(http::StatusCode::UNAUTHORIZED, "text/html; charset=utf-8", assets::PAIR_FIRST),
            (None, _) => answer(http::StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n"),
        },
        _ => answer(http::StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", "method not allowed\n"),
    };
    if matches!(response.status().as_u16(), 401 | 403 | 405) {
        refused(&mut response);
    } else {
        guard::secure_headers(response.headers_mut());
    }
    Ok(response)
}

/// A refusal carries the secure headers and closes its connection (a
/// refused WebSocket upgrade leaves nothing open).
fn refused(r: &mut HttpResponse) {
    guard::secure_headers(r.headers_mut());
    r.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
}

/// `GET /pair?token=…`: the token is used up; a good one is a session
/// cookie and a redirect to the page (the token leaves the address bar).
fn pair(req: &http::Request<hyper::body::Incoming>, ctx: &Ctx, conn: &Conn) -> HttpResponse {
    let token = req
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("token="))
        .unwrap_or_default();
    let agent = req.headers().get(http::header::USER_AGENT).and_then(|v| v.to_str().ok());
    match ctx.auth.pair(token, conn.peer.clone(), agent) {
        Ok(Some(secret)) => {
            let mut r = answer(http::StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "paired\n");
            r.headers_mut().insert(http::header::LOCATION, http::HeaderValue::from_static("/"));
            if let Ok(cookie) = http::HeaderValue::from_str(&auth::set_cookie(&secret, ctx.tls)) {
                r.headers_mut().insert(http::header::SET_COOKIE, cookie);
            }
            tracing::info!(peer = %conn.peer, "a browser paired with kd web");
            r
        }
        Ok(None) => {
            tracing::warn!(peer = %conn.peer, "a pairing with an unknown, used or expired token was refused");
            answer(http::StatusCode::FORBIDDEN, "text/html; charset=utf-8", assets::PAIR_FAILED)
        }
        Err(e) => answer(http::StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", format!("{e}\n")),
    }
}
