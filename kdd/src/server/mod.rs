//! The Unix-socket server: the peer-uid check, the connection bound, where
//! the peer process stands (the King, or an agent's process, confined:
//! [`crate::identity`], checked by `rpc::confine`), and JSON-RPC over HTTP
//! and WebSocket on each connection.
//!
//! - [`claim`]: one daemon per socket, in a directory only its user can touch;
//! - [`activation`]: a listening socket handed over by systemd or launchd;
//! - [`http_request`]: one HTTP request, before jsonrpsee takes it;
//! - [`ids`]: ids jsonrpsee cannot take, and their stand-ins;
//! - [`frames`]: the same for WebSocket messages, on the connection's bytes;
//! - [`idle`]: idle connections do not hold slots forever;
//! - [`request_check`]: answers jsonrpsee would not give (bad ids, subscriptions over HTTP).
//!
//! **Nothing a client does holds the daemon up.** At shutdown the accept
//! loop stops at once; open connections are closed only when
//! [`Daemon::close`] fires — after the runs were stopped and recorded, so
//! that subscribers still hear how they ended — and those still open after
//! the grace period have their sockets cut.

pub mod activation;
mod claim;
pub(crate) mod frames;
pub(crate) mod http_request;
pub(crate) mod idle;
pub mod ids;
pub mod request_check;

pub use claim::SocketClaim;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future;
use jsonrpsee::Methods;
use jsonrpsee::core::middleware::RpcServiceBuilder;
use jsonrpsee::server::{
    BatchRequestConfig, HttpBody, HttpResponse, PingConfig, ServerConfig, StopHandle, TowerServiceBuilder,
    serve_with_graceful_shutdown,
};
use kd_proto::ErrorCode;
use serde_json::json;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::OwnedSemaphorePermit;

use crate::client::ClientId;
use crate::identity::Peer;
use crate::limits::Limits;
use crate::rpc::check::CheckLayer;
use crate::state::Daemon;

/// Whether a connecting peer may talk to this daemon: only our own uid.
pub fn check_peer(peer_uid: Option<u32>, own_uid: u32) -> Result<(), String> {
    match peer_uid {
        Some(uid) if uid == own_uid => Ok(()),
        Some(uid) => Err(format!("peer uid {uid} is not the daemon's uid {own_uid}")),
        None => Err("cannot read the peer's credentials".to_string()),
    }
}

/// Serves connections until the daemon's shutdown token is cancelled; then
/// stops accepting, waits for [`Daemon::close`], lets open connections
/// finish within the grace period and cuts the rest.
pub async fn serve(listener: UnixListener, methods: impl Into<Methods>, d: Arc<Daemon>, limits: Limits) {
    let methods: Methods = methods.into();
    let (stop_handle, server_handle) = jsonrpsee::server::stop_channel();
    let builder = rpc_service(&limits);
    let own_uid = rustix::process::getuid().as_raw();
    loop {
        let stream = tokio::select! {
            _ = d.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and similar: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let cred = stream.peer_cred().ok();
        if let Err(why) = check_peer(cred.map(|c| c.uid()), own_uid) {
            tracing::warn!("refused a connection: {why}");
            tokio::spawn(refuse(stream, ErrorCode::PermissionDenied, why));
            continue;
        }
        // An ordinary slot, or else one of those kept for plain HTTP calls.
        let (permit, kept) = match d.connections.clone().try_acquire_owned() {
            Ok(p) => (p, false),
            Err(_) => match d.reserved.clone().try_acquire_owned() {
                Ok(p) => (p, true),
                Err(_) => {
                    let why = format!("too many connections (at most {})", limits.max_connections);
                    tracing::warn!("refused a connection: {why}");
                    tokio::spawn(refuse(stream, ErrorCode::LimitExceeded, why));
                    continue;
                }
            },
        };
        let client = ClientId(d.next_client_id.fetch_add(1, Ordering::Relaxed));
        let held = Held { _permit: permit, _registered: d.open.register(client, &stream) };
        let stream = frames::Filtered::new(stream, limits.max_request_bytes as usize);
        let conn = Connection {
            held,
            client,
            pid: cred.and_then(|c| c.pid()),
            max_request_bytes: limits.max_request_bytes,
            kept: kept.then_some(limits.max_connections),
            idle_timeout: limits.idle_timeout,
            client_timeout: limits.client_timeout,
        };
        tokio::spawn(connection(stream, conn, builder.clone(), methods.clone(), stop_handle.clone()));
    }
    drop(listener);
    // The runs are stopped and recorded, and subscribers told, before the
    // connections are closed.
    d.close.cancelled().await;
    // Subscriptions deliver what is left (the runs' ends) before the
    // connections are told to close.
    let deadline = tokio::time::Instant::now() + limits.shutdown_grace;
    if tokio::time::timeout_at(deadline, d.hub.all_ended()).await.is_err() {
        tracing::warn!("{} subscription(s) still delivering at the deadline", d.hub.subscription_count());
    }
    drop(stop_handle);
    if server_handle.stop().is_err() {
        tracing::debug!("server already stopped");
    }
    let stopped = server_handle.stopped();
    tokio::pin!(stopped);
    if tokio::time::timeout_at(deadline, &mut stopped).await.is_err() {
        let n = d.open.cut_all();
        tracing::warn!("{n} connection(s) did not close within {:?}; cut", limits.shutdown_grace);
        if tokio::time::timeout(Duration::from_secs(2), &mut stopped).await.is_err() {
            tracing::warn!("connections still open; stopping anyway");
        }
    }
}

type Checks<L> = tower::layer::util::Stack<CheckLayer, L>;
/// jsonrpsee's service with kd's checks, as every connection is served.
pub(crate) type Builder =
    TowerServiceBuilder<Checks<Checks<Checks<tower::layer::util::Identity>>>, tower::layer::util::Identity>;

/// jsonrpsee's service as every connection is served, on the Unix socket
/// and on kd web's `/rpc` alike: the limits, WebSocket pings, and the
/// checks every call passes (ids, who may call what, parameter names).
pub(crate) fn rpc_service(limits: &Limits) -> Builder {
    let config = ServerConfig::builder()
        .max_request_body_size(limits.max_request_bytes)
        .max_response_body_size(limits.max_response_bytes)
        .max_subscriptions_per_connection(limits.max_subscriptions_per_connection)
        // A batch's calls run one after another on the worker: bounded, so
        // that no request holds the other clients, or shutdown, for long.
        .set_batch_request_config(BatchRequestConfig::Limit(kd_proto::MAX_BATCH as u32))
        // We bound connections ourselves (one permit per socket); jsonrpsee's
        // own guard counts HTTP requests and WebSocket sessions.
        .max_connections(u32::MAX)
        // A WebSocket that does not answer pings for the idle timeout is closed.
        .enable_ws_ping(
            PingConfig::new()
                .ping_interval(limits.idle_timeout / 3)
                .inactive_limit(limits.idle_timeout)
                .max_failures(1),
        )
        .build();
    jsonrpsee::server::Server::builder()
        .set_config(config)
        .set_rpc_middleware(
            RpcServiceBuilder::new()
                .layer(CheckLayer(request_check::check_request))
                .layer(CheckLayer(crate::rpc::confine::check_request))
                .layer(CheckLayer(crate::rpc::params::check_request)),
        )
        .to_service_builder()
}

/// Drives a connection's serving to its end, closing it once it has been an
/// idle HTTP connection for `idle_timeout` (a WebSocket's pings decide
/// whether it lives: see [`rpc_service`]), or once what it was sent has not
/// moved for `client_timeout` (its peer stopped reading: an HTTP answer or
/// a WebSocket's messages alike, however little kdd still has queued for
/// it).
pub(crate) async fn until_idle<E: std::fmt::Display>(
    serving: impl std::future::Future<Output = Result<(), E>>,
    watched: &idle::Activity,
    (idle_timeout, client_timeout): (Duration, Duration),
    client: ClientId,
    unsent: impl Fn() -> Option<u32>,
) {
    tokio::pin!(serving);
    let mut watch = tokio::time::interval((idle_timeout / 4).min(client_timeout / 2).max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            ended = &mut serving => {
                if let Err(e) = ended {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            _ = watch.tick() => {
                watched.unsent_now(unsent());
                if watched.stalled_for(client_timeout) {
                    tracing::warn!(?client, "a client stopped reading what it was sent; disconnected");
                    return;
                }
                // A WebSocket's pings tell whether it lives.
                if !watched.upgraded() && watched.idle_for(idle_timeout) {
                    tracing::debug!(?client, "closed an idle HTTP connection");
                    return;
                }
            }
        }
    }
}

/// Waits for a WebSocket's session to close (`closed`), cutting the
/// connection (`registered`) once what it was sent has not moved for
/// `client_timeout`: its peer stopped reading. (The HTTP exchange that
/// upgraded it, which [`until_idle`] watched, is over.)
pub(crate) async fn until_session_closed(
    closed: impl std::future::Future<Output = ()>,
    watched: &idle::Activity,
    client_timeout: Duration,
    client: ClientId,
    registered: &crate::connections::Registered,
) {
    tokio::pin!(closed);
    let mut watch = tokio::time::interval((client_timeout / 2).max(Duration::from_millis(10)));
    loop {
        tokio::select! {
            () = &mut closed => return,
            _ = watch.tick() => {
                watched.unsent_now(registered.unsent());
                if watched.stalled_for(client_timeout) {
                    tracing::warn!(?client, "a WebSocket client stopped reading what it was sent; disconnected");
                    registered.cut();
                    return closed.await;
                }
            }
        }
    }
}

/// Serves one accepted connection. What it holds ([`Held`]) is kept until
/// the socket closes — for a WebSocket, until its session ends, which
/// outlives the HTTP exchange that upgraded it.
/// What a connection holds while it is open: its slot among the bounded
/// connections and its entry in the registry (so it can be cut).
struct Held {
    _permit: OwnedSemaphorePermit,
    _registered: crate::connections::Registered,
}

/// An accepted connection: what it holds, who it is, its limits.
struct Connection {
    held: Held,
    client: ClientId,
    /// The peer's pid (`SO_PEERCRED`), placed by
    /// [`crate::identity::place_quickly`] or else [`crate::identity::place`].
    pid: Option<i32>,
    max_request_bytes: u32,
    /// On a slot kept for plain HTTP calls (the ordinary ones, this many,
    /// being taken): it may not become a WebSocket, and closes after each
    /// answer.
    kept: Option<usize>,
    idle_timeout: Duration,
    client_timeout: Duration,
}

async fn connection(
    stream: frames::Filtered<UnixStream>,
    conn: Connection,
    builder: Builder,
    methods: Methods,
    stop: StopHandle,
) {
    let Connection { held, client, pid, max_request_bytes, kept, idle_timeout, client_timeout } = conn;
    // Who it is, once: the King, or a process of an agent (confined) —
    // placed here by a short walk, else on a thread of its own while its
    // first request is read, and waited for before that request is served.
    // A placement that cannot finish confines.
    let unplaced = Peer::Confined { pid: pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0), origin: None };
    let placing = match crate::identity::place_quickly(pid) {
        Some(peer) => future::Either::Left(future::ready(peer)),
        None => {
            // Started now, so that it walks while the request is read.
            let walking = tokio::task::spawn_blocking(move || crate::identity::place(pid));
            future::Either::Right(async move { walking.await.unwrap_or(unplaced) })
        }
    };
    let placed = async move {
        let peer = placing.await;
        if peer != Peer::Free {
            tracing::debug!(?client, ?peer, "an agent's process connected");
        }
        peer
    }
    .boxed()
    .shared();
    let held = Arc::new(held);
    let watching = held.clone();
    let activity = stream.activity();
    let watched = activity.clone();
    let svc = builder.build(methods, stop.clone());
    let per_request = tower::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        let activity = activity.clone();
        // This socket speaks only JSON-RPC: a plain `curl -d '{…}'` (which
        // says application/x-www-form-urlencoded) is JSON too.
        if req.method() == http::Method::POST {
            req.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        }
        req.extensions_mut().insert(client);
        let mut svc = svc.clone();
        let upgrade = jsonrpsee::server::ws::is_upgrade_request(&req);
        if let (true, Some(max)) = (upgrade, kept) {
            return future::Either::Left(future::ready(Ok::<_, anyhow::Error>(kept_for_http(max))));
        }
        if upgrade {
            let closed = svc.on_session_closed();
            let (held, watched) = (held.clone(), activity.clone());
            tokio::spawn(async move {
                until_session_closed(closed, &watched, client_timeout, client, &held._registered).await;
                drop(held);
            });
        }
        // The error type must be concrete (rust-lang/rust#102211).
        let placed = placed.clone();
        future::Either::Right(async move {
            req.extensions_mut().insert(placed.await);
            let mut response = http_request::handle(svc, req, max_request_bytes, &activity)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            if kept.is_some() {
                // A kept slot is given back at once.
                response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            }
            Ok(response)
        })
    });
    let serving = serve_with_graceful_shutdown(stream, per_request, stop.shutdown());
    until_idle(serving, &watched, (idle_timeout, client_timeout), client, || watching._registered.unsent()).await;
}

/// The answer to a WebSocket upgrade on a slot kept for plain HTTP calls.
fn kept_for_http(max: usize) -> HttpResponse {
    let why = format!(
        "too many connections (at most {max}); the connections kept free are for plain HTTP calls \
         such as kd daemon status and kd daemon stop"
    );
    let body =
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": ErrorCode::LimitExceeded.code(), "message": why}});
    let mut response = HttpResponse::new(HttpBody::from(body.to_string()));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

/// Answers every request on a refused connection with an HTTP error whose
/// body is a JSON-RPC error, then closes it.
async fn refuse(stream: UnixStream, code: ErrorCode, why: String) {
    let status = match code {
        ErrorCode::PermissionDenied => http::StatusCode::FORBIDDEN,
        _ => http::StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code.code(), "message": why}}).to_string();
    let svc = tower::service_fn(move |_req: http::Request<hyper::body::Incoming>| {
        let body = body.clone();
        async move {
            http::Response::builder()
                .status(status)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::CONNECTION, "close")
                .body(HttpBody::from(body))
                .map(|r: HttpResponse| r)
                .map_err(anyhow::Error::from)
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(5), jsonrpsee::server::serve(stream, svc)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_daemons_own_uid_may_connect() {
        assert_eq!(check_peer(Some(1000), 1000), Ok(()));
        let refused = check_peer(Some(1001), 1000);
        assert_eq!(refused, Err("peer uid 1001 is not the daemon's uid 1000".to_string()));
        assert!(check_peer(Some(0), 1000).is_err(), "not even root");
        assert!(check_peer(None, 1000).is_err());
    }
}
