//! kd web's TCP listener: accepts within a bound of connections, makes
//! TLS when it serves over it (the handshake bounded in time), and serves
//! each connection's requests ([`super::routes`]) with the socket's
//! jsonrpsee service, idle connections closed as on the socket
//! ([`crate::server::until_idle`]).
//!
//! **Nothing a browser does holds kdd up.** `web.stop` or the daemon's
//! shutdown stops the accepting at once; open connections are told to
//! close (at shutdown, once [`Daemon::close`] fired, so that pages still
//! hear how the runs ended) and those still open after the grace period
//! are cut.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::FutureExt;
use jsonrpsee::Methods;
use jsonrpsee::server::{StopHandle, serve_with_graceful_shutdown};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::auth::Auth;
use super::routes::{self, Conn, Ctx};
use crate::client::ClientId;
use crate::connections::Connections;
use crate::limits::Limits;
use crate::server::{Builder, frames, rpc_service, until_idle, until_session_closed};
use crate::state::Daemon;

/// Connections kd web holds at most (more are closed at once).
pub const MAX_CONNECTIONS: usize = 64;
/// How long a TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// What the listener serves with.
pub struct Serve {
    pub d: Arc<Daemon>,
    pub methods: Methods,
    pub limits: Limits,
    pub ctx: Arc<Ctx>,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Its open connections, cut at the end.
    pub open: Arc<Connections>,
}

/// What a connection holds while it is open.
struct Held {
    _permit: OwnedSemaphorePermit,
    _registered: crate::connections::Registered,
}

/// Serves `listener` until `stop` (web.stop) or the daemon's shutdown.
pub async fn run(listener: TcpListener, serve: Serve, stop: CancellationToken) {
    let (stop_handle, server_handle) = jsonrpsee::server::stop_channel();
    let builder = rpc_service(&serve.limits);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let serve = Arc::new(serve);
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            _ = serve.d.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("kd web: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!("kd web: refused a connection from {peer}: too many (at most {MAX_CONNECTIONS})");
            continue;
        };
        let client = ClientId(serve.d.next_client_id.fetch_add(1, Ordering::Relaxed));
        let held = Held { _permit: permit, _registered: serve.open.register(client, &stream) };
        tokio::spawn(connection(stream, peer, held, client, serve.clone(), builder.clone(), stop_handle.clone()));
    }
    drop(listener);
    // At the daemon's shutdown, pages hear how the runs ended first.
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = serve.d.close.cancelled() => {}
    }
    drop(stop_handle);
    if server_handle.stop().is_err() {
        tracing::debug!("kd web: already stopped");
    }
    let stopped = server_handle.stopped();
    tokio::pin!(stopped);
    if tokio::time::timeout(serve.limits.shutdown_grace, &mut stopped).await.is_err() {
        let n = serve.open.cut_all();
        tracing::warn!("kd web: {n} connection(s) did not close within {:?}; cut", serve.limits.shutdown_grace);
        if tokio::time::timeout(Duration::from_secs(2), &mut stopped).await.is_err() {
            tracing::warn!("kd web: connections still open; stopping anyway");
        }
    }
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    held: Held,
    client: ClientId,
    serve: Arc<Serve>,
    builder: Builder,
    stop: StopHandle,
) {
    let _ = tcp.set_nodelay(true);
    match &serve.tls {
        None => requests(tcp, peer, held, client, serve.clone(), builder, stop).await,
        Some(tls) => match tokio::time::timeout(HANDSHAKE, tls.accept(tcp)).await {
            Ok(Ok(stream)) => requests(stream, peer, held, client, serve.clone(), builder, stop).await,
            Ok(Err(e)) => tracing::debug!("kd web: TLS handshake with {peer} failed: {e}"),
            Err(_) => tracing::debug!("kd web: TLS handshake with {peer} took too long"),
        },
    }
}

async fn requests<S>(
    stream: S,
    peer: SocketAddr,
    held: Held,
    client: ClientId,
    serve: Arc<Serve>,
    builder: Builder,
    stop: StopHandle,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let stream = frames::Filtered::new(stream, serve.limits.max_request_bytes as usize);
    let conn = Arc::new(Conn { client, peer: peer.ip().to_string(), activity: stream.activity() });
    let watched = stream.activity();
    let svc = builder.build(serve.methods.clone(), stop.clone());
    let held = Arc::new(held);
    let watching = held.clone();
    let per_request = {
        let serve = serve.clone();
        tower::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let (serve, conn, held, mut svc) = (serve.clone(), conn.clone(), held.clone(), svc.clone());
            async move {
                let closed = jsonrpsee::server::ws::is_upgrade_request(&req).then(|| svc.on_session_closed());
                let auth: Arc<Auth> = serve.ctx.auth.clone();
                let (watched, timeout) = (conn.activity.clone(), serve.limits.client_timeout);
                let on_upgrade = move |session: String| {
                    // A WebSocket's session outlives this exchange: its slot
                    // and its place in the session's connections are kept
                    // until it closes.
                    if let Some(closed) = closed
                        && auth.attach(&session, client)
                    {
                        tokio::spawn(async move {
                            until_session_closed(closed, &watched, timeout, client, &held._registered).await;
                            auth.detach(&session, client);
                            drop(held);
                        });
                    }
                };
                routes::handle(req, &serve.ctx, &conn, svc, on_upgrade).await.map_err(|e| anyhow::anyhow!("{e}"))
            }
            .boxed()
        })
    };
    let serving = serve_with_graceful_shutdown(stream, per_request, stop.shutdown());
    let timeouts = (serve.limits.idle_timeout, serve.limits.client_timeout);
    until_idle(serving, &watched, timeouts, client, || watching._registered.unsent()).await;
}
