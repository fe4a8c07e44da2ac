//! A checked connection to the daemon.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jsonrpsee::core::client::{MiddlewareBatchResponse, MiddlewareMethodResponse, MiddlewareNotifResponse};
use jsonrpsee::core::middleware::RpcServiceT;
use jsonrpsee_client_transport::ws::WsHandshakeError;
use jsonrpsee_ws_client::{RpcService, RpcServiceBuilder, WsClientBuilder};
use kd_proto::api::prelude::*;
use kd_proto::paths::{self, DirError};
use kd_proto::types::Hello;
use kd_proto::{PROTOCOL_VERSION, SOCKET_URL};
use tokio::net::UnixStream;

use crate::autostart;
use crate::error::{ClientError, one_line};

/// Largest request or response the client accepts (a long thread is big).
const MAX_MESSAGE: u32 = 512 * 1024 * 1024;

/// The jsonrpsee client type used by [`Client`].
pub type WsClient = jsonrpsee::core::client::Client<SizeLimit<RpcService>>;

/// A WebSocket JSON-RPC connection to `kdd` that passed `daemon.hello`.
pub struct Client {
    rpc: WsClient,
    socket: PathBuf,
    hello: Hello,
}

/// Client middleware that refuses, before sending it, a request larger
/// than the daemon reads (it says how large in `daemon.hello`): sent, it
/// would be refused with an answer the client cannot match to the call.
#[derive(Debug, Clone)]
pub struct SizeLimit<S> {
    inner: S,
    limit: Arc<AtomicU64>,
}

#[derive(Debug, Clone)]
pub struct SizeLimitLayer(Arc<AtomicU64>);

impl<S> tower::Layer<S> for SizeLimitLayer {
    type Service = SizeLimit<S>;

    fn layer(&self, inner: S) -> SizeLimit<S> {
        SizeLimit { inner, limit: self.0.clone() }
    }
}

impl<S> SizeLimit<S> {
    /// The error for `request` if it is too large.
    fn refusal(&self, request: &jsonrpsee::core::middleware::Request<'_>) -> Option<jsonrpsee::core::client::Error> {
        // The params are already JSON; the rest of the request is small.
        let size = request.params.as_ref().map_or(0, |p| p.get().len() as u64) + request.method.len() as u64 + 64;
        let limit = self.limit.load(Ordering::Relaxed);
        (size > limit).then(|| jsonrpsee::core::client::Error::Custom(too_large(size, limit)))
    }
}

/// `request too large (2.0 MiB > 1 MiB limit)`.
fn too_large(size: u64, limit: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let limit = if limit.is_multiple_of(1024 * 1024) {
        format!("{} MiB", limit / (1024 * 1024))
    } else {
        format!("{:.1} MiB", limit as f64 / MIB)
    };
    format!("request too large ({:.1} MiB > {limit} limit)", size as f64 / MIB)
}

type CallResult = Result<MiddlewareMethodResponse, jsonrpsee::core::client::Error>;

impl<S> RpcServiceT for SizeLimit<S>
where
    S: RpcServiceT<
            MethodResponse = CallResult,
            BatchResponse = Result<MiddlewareBatchResponse, jsonrpsee::core::client::Error>,
            NotificationResponse = Result<MiddlewareNotifResponse, jsonrpsee::core::client::Error>,
        > + Clone
        + Send
        + Sync
        + 'static,
{
    type MethodResponse = S::MethodResponse;
    type BatchResponse = S::BatchResponse;
    type NotificationResponse = S::NotificationResponse;

    fn call<'a>(
        &self,
        request: jsonrpsee::core::middleware::Request<'a>,
    ) -> impl Future<Output = Self::MethodResponse> + Send + 'a {
        let refused = self.refusal(&request);
        let inner = self.inner.clone();
        async move {
            match refused {
                Some(e) => Err(e),
                None => inner.call(request).await,
            }
        }
    }

    fn batch<'a>(
        &self,
        requests: jsonrpsee::core::middleware::Batch<'a>,
    ) -> impl Future<Output = Self::BatchResponse> + Send + 'a {
        self.inner.batch(requests)
    }

    fn notification<'a>(
        &self,
        n: jsonrpsee::core::middleware::Notification<'a>,
    ) -> impl Future<Output = Self::NotificationResponse> + Send + 'a {
        self.inner.notification(n)
    }
}

/// How long a call may take before the client gives up on the daemon.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A request timeout for calls that last as long as agents take: a year.
/// A daemon that goes away still ends the call at once.
pub const NO_REQUEST_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

impl Client {
    /// Connects to a running daemon; never starts one.
    pub async fn connect(socket: &Path) -> Result<Client, ClientError> {
        Client::connect_with(socket, REQUEST_TIMEOUT).await
    }

    /// Connects with another request timeout ([`NO_REQUEST_TIMEOUT`] for
    /// calls that last as long as agents take).
    pub async fn connect_with(socket: &Path, request_timeout: Duration) -> Result<Client, ClientError> {
        Ok(Client::connect_then(socket, request_timeout, async |_: &WsClient| ()).await?.0)
    }

    /// Connects, with `first` — the command's first call — sent beside
    /// `daemon.hello` rather than after its answer: one round trip to the
    /// daemon fewer (issue 31, item 17). What `first` got is dropped when
    /// the daemon is of another protocol (refused as [`Client::connect`]
    /// refuses it), so it must be a call such a daemon may answer: a read
    /// (`thread.current`, which ages the thread as any read of it does), or
    /// one that carries the client's protocol for the daemon to refuse
    /// (`council.ask`).
    async fn connect_then<T>(
        socket: &Path,
        request_timeout: Duration,
        first: impl AsyncFnOnce(&WsClient) -> T,
    ) -> Result<(Client, T), ClientError> {
        let stream = connect_checked(socket).await?;
        // No RPC logger middleware: it serialises every request a second time.
        let limit = Arc::new(AtomicU64::new(u64::MAX));
        let upgrade = WsClientBuilder::default()
            .set_rpc_middleware(RpcServiceBuilder::new().layer(SizeLimitLayer(limit.clone())))
            .max_request_size(MAX_MESSAGE)
            .max_response_size(MAX_MESSAGE)
            .request_timeout(request_timeout)
            .max_buffer_capacity_per_subscription(16 * 1024)
            .build_with_stream(SOCKET_URL, stream);
        // jsonrpsee times each request with `futures-timer`, whose thread
        // starts at the first: started here once the upgrade is asked for,
        // it starts while kdd answers (issue 31, item 17).
        let (rpc, ()) = tokio::join!(upgrade, async { drop(futures_timer::Delay::new(Duration::ZERO)) });
        let rpc = rpc.map_err(|e| handshake_error(socket, e))?;
        // `first` goes out first: kdd takes it before the greeting (issue 31,
        // item 17: `kd ask`'s question is `first`).
        let (first, hello) = tokio::join!(first(&rpc), rpc.daemon_hello());
        let hello = hello.map_err(|e| match ClientError::from(e) {
            // A daemon of another generation may not even know the method.
            ClientError::Rpc { code: -32601, .. } => ClientError::Protocol {
                socket: socket.to_path_buf(),
                theirs: 0,
                ours: PROTOCOL_VERSION,
                version: "unknown".into(),
            },
            other => other,
        })?;
        if let Some(max) = hello.max_request_bytes {
            limit.store(u64::from(max), Ordering::Relaxed);
        }
        if hello.protocol != PROTOCOL_VERSION {
            return Err(ClientError::Protocol {
                socket: socket.to_path_buf(),
                theirs: hello.protocol,
                ours: PROTOCOL_VERSION,
                version: hello.version,
            });
        }
        Ok((Client { rpc, socket: socket.to_path_buf(), hello }, first))
    }

    /// Connects, starting `kdd` first when nothing listens on the socket
    /// (no socket, or a stale one), unless `KD_NO_AUTOSTART=1`. A refused
    /// or forbidden connection is reported, never answered with a start.
    pub async fn connect_or_start(socket: &Path) -> Result<Client, ClientError> {
        Ok(Client::connect_or_start_then(socket, async |_: &WsClient| ()).await?.0)
    }

    /// [`Client::connect_or_start`], with `first` (a read, or a call that
    /// carries the client's protocol) sent beside `daemon.hello`, as
    /// [`Client::connect_then`].
    pub async fn connect_or_start_then<T>(
        socket: &Path,
        first: impl AsyncFn(&WsClient) -> T,
    ) -> Result<(Client, T), ClientError> {
        match Client::connect_then(socket, REQUEST_TIMEOUT, &first).await {
            Err(ClientError::Unreachable { reason, nothing_listens: true, .. }) if autostart::disabled() => {
                Err(ClientError::Unreachable {
                    socket: socket.to_path_buf(),
                    reason,
                    hint: " (KD_NO_AUTOSTART=1, so it was not started; run `kd daemon start`)",
                    nothing_listens: true,
                })
            }
            Err(ClientError::Unreachable { nothing_listens: true, .. }) => {
                // A node of a shared registry is started as one (its --db,
                // its --node), never replaced by a daemon of kd's choosing.
                if let Some(node) = autostart::stopped_node(socket) {
                    return Err(ClientError::Start(format!(
                        "nothing listens on {}, which served {node}, a shared registry: kd starts no node by \
                         itself; start that node again (kdd --db … --node …, or its service)",
                        socket.display()
                    )));
                }
                autostart::start(socket).await?;
                Client::connect_then(socket, REQUEST_TIMEOUT, &first).await
            }
            other => other,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// What the daemon said in `daemon.hello`.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }
}

impl Deref for Client {
    type Target = WsClient;

    fn deref(&self) -> &WsClient {
        &self.rpc
    }
}

/// Connects to `socket` only if the user alone controls its directory and
/// the process listening runs as the user: a socket elsewhere could be
/// another user's impostor, which would read every prompt sent to it.
pub(crate) async fn connect_checked(socket: &Path) -> Result<UnixStream, ClientError> {
    let uid = rustix::process::getuid().as_raw();
    let untrusted = |reason: String| ClientError::Untrusted { socket: socket.to_path_buf(), reason };
    match paths::check_private_dir(paths::socket_dir(socket), uid) {
        Ok(()) => {}
        Err(DirError::Missing(_)) => {
            return Err(ClientError::Unreachable {
                socket: socket.to_path_buf(),
                reason: "no socket there (is kdd running?)".into(),
                hint: "",
                nothing_listens: true,
            });
        }
        Err(e) => return Err(untrusted(e.to_string())),
    }
    let stream = UnixStream::connect(socket).await.map_err(|e| connect_failure(socket, &e))?;
    let peer = stream.peer_cred().map_err(|e| untrusted(format!("cannot tell who runs it: {e}")))?.uid();
    peer_is_me(peer, uid).map_err(untrusted)?;
    Ok(stream)
}

/// What a failed `connect()` means. Only "no socket" (ENOENT) and "a
/// socket no one listens on" (ECONNREFUSED) say nothing listens, so only
/// they may start a daemon; a forbidden connection (EACCES, EPERM: a
/// sandbox) says nothing of whether one runs.
pub(crate) fn connect_failure(socket: &Path, e: &std::io::Error) -> ClientError {
    use std::io::ErrorKind;
    let socket = socket.to_path_buf();
    let nothing_listens = match e.kind() {
        ErrorKind::PermissionDenied => return ClientError::Denied { socket },
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => true,
        _ => false,
    };
    ClientError::Unreachable { socket, reason: reason(e), hint: "", nothing_listens }
}

/// The listener must run as the user: anyone else's process on the socket
/// may be an impostor reading every prompt sent to it.
fn peer_is_me(peer: u32, me: u32) -> Result<(), String> {
    if peer != me {
        return Err(format!("it is run by uid {peer}, not by you (uid {me}); another user may be impersonating kdd"));
    }
    Ok(())
}

fn handshake_error(socket: &Path, e: jsonrpsee::core::client::Error) -> ClientError {
    let socket = socket.to_path_buf();
    if let jsonrpsee::core::client::Error::Transport(inner) = &e
        && let Some(WsHandshakeError::Rejected { status_code }) = inner.downcast_ref::<WsHandshakeError>()
    {
        let reason = match status_code {
            403 => "permission denied (the daemon belongs to another user)".to_string(),
            503 => "too many connections; try again later".to_string(),
            code => format!("HTTP status {code}"),
        };
        return ClientError::Refused { socket, reason };
    }
    ClientError::Refused { socket, reason: one_line(&e.to_string()) }
}

fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no socket there (is kdd running?)".into(),
        std::io::ErrorKind::ConnectionRefused => "connection refused (no kdd listening)".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Error, ErrorKind};

    use rustix::io::Errno;

    use super::*;

    fn failure(e: Error) -> ClientError {
        connect_failure(Path::new("/run/kd/kdd.sock"), &e)
    }

    #[test]
    fn only_a_missing_or_stale_socket_may_start_a_daemon() {
        let starts = |e: ClientError| matches!(e, ClientError::Unreachable { nothing_listens: true, .. });
        assert!(starts(failure(Error::from_raw_os_error(Errno::NOENT.raw_os_error()))));
        assert!(starts(failure(Error::from_raw_os_error(Errno::CONNREFUSED.raw_os_error()))));
        for forbidden in [Errno::ACCESS, Errno::PERM] {
            let e = failure(Error::from_raw_os_error(forbidden.raw_os_error()));
            assert!(matches!(e, ClientError::Denied { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                "permission denied connecting to kdd at /run/kd/kdd.sock (a sandbox may forbid Unix sockets)"
            );
            assert!(e.is_connection(), "exit status 3");
        }
        // Anything else is reported as it is, and starts nothing either.
        let busy = failure(Error::new(ErrorKind::WouldBlock, "Resource temporarily unavailable"));
        assert!(matches!(busy, ClientError::Unreachable { nothing_listens: false, .. }), "{busy:?}");
    }

    #[test]
    fn a_listener_of_another_uid_is_refused() {
        assert!(peer_is_me(1000, 1000).is_ok());
        let why = peer_is_me(0, 1000).unwrap_err();
        assert!(why.contains("run by uid 0, not by you (uid 1000)") && why.contains("impersonating"), "{why}");
    }

    #[tokio::test]
    async fn a_listener_of_ones_own_in_a_private_directory_is_connected_to() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.path().join("kdd.sock");
        let _listener = tokio::net::UnixListener::bind(&socket).unwrap();
        assert!(connect_checked(&socket).await.is_ok());
    }
}
