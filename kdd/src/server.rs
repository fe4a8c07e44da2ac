//! The Unix-socket server: one daemon per socket, the peer-uid check, the
//! connection bound, and JSON-RPC over HTTP and WebSocket on each connection.
//!
//! **One daemon per socket.** Before touching the socket, the daemon takes
//! an exclusive `flock` on `<socket>.lock` and keeps it for its lifetime. The
//! kernel drops the lock when the process dies, however it dies, so: lock
//! taken by someone else → a live daemon, refuse; lock free and a socket file
//! present → stale, remove it.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use jsonrpsee::Methods;
use jsonrpsee::core::middleware::RpcServiceBuilder;
use jsonrpsee::server::{
    HttpBody, HttpResponse, ServerConfig, StopHandle, TowerServiceBuilder, serve_with_graceful_shutdown,
};
use kd_proto::ErrorCode;
use serde_json::json;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::OwnedSemaphorePermit;
use tower::Service;

use crate::client::ClientId;
use crate::rpc::params::ParamCheckLayer;
use crate::state::Daemon;

/// Bounds of the server (F-D3).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_request_bytes: u32,
    pub max_response_bytes: u32,
    pub max_subscriptions_per_connection: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            max_request_bytes: 16 * 1024 * 1024,
            max_response_bytes: 512 * 1024 * 1024,
            max_subscriptions_per_connection: 1024,
        }
    }
}

/// The claimed socket path: holds the lock file for the daemon's lifetime
/// and removes the socket file when dropped.
pub struct SocketClaim {
    socket: PathBuf,
    _lock: File,
}

impl SocketClaim {
    /// Makes the socket directory (0700, ours), takes the daemon lock, and
    /// removes a stale socket file. Fails if another daemon holds the lock.
    pub fn claim(socket: &Path) -> anyhow::Result<SocketClaim> {
        let dir = socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        secure_dir(dir)?;
        let lock_path = kd_proto::paths::lock_path(socket);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .with_context(|| format!("cannot open {}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
            let holder = holder.trim();
            let pid = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            bail!("kdd is already running on {}{pid}; stop it with `kd daemon stop`", socket.display());
        }
        lock.set_len(0).context("cannot write the lock file")?;
        write!(lock, "{}", std::process::id()).context("cannot write the lock file")?;
        match std::fs::remove_file(socket) {
            Ok(()) => tracing::info!("removed stale socket {}", socket.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove stale socket {}", socket.display())),
        }
        Ok(SocketClaim { socket: socket.to_path_buf(), _lock: lock })
    }

    /// Binds the socket, mode 0600.
    pub fn bind(&self) -> anyhow::Result<UnixListener> {
        let listener =
            UnixListener::bind(&self.socket).with_context(|| format!("cannot listen on {}", self.socket.display()))?;
        std::fs::set_permissions(&self.socket, Permissions::from_mode(0o600))
            .with_context(|| format!("cannot set the mode of {}", self.socket.display()))?;
        Ok(listener)
    }
}

impl Drop for SocketClaim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Creates `dir` as 0700, or checks that an existing one is ours and not
/// writable by others (a `/tmp/kd-$UID` made by someone else is refused).
fn secure_dir(dir: &Path) -> anyhow::Result<()> {
    let uid = rustix::process::getuid().as_raw();
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        return Ok(());
    }
    let meta = std::fs::metadata(dir).with_context(|| format!("cannot inspect {}", dir.display()))?;
    if meta.uid() != uid {
        bail!(
            "{} belongs to uid {}, not to you (uid {uid}); refusing to put the socket there",
            dir.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
        bail!("{} is writable by other users; fix its mode (chmod 700) or choose another --socket", dir.display());
    }
    Ok(())
}

/// Whether a connecting peer may talk to this daemon: only our own uid.
pub fn check_peer(peer_uid: Option<u32>, own_uid: u32) -> Result<(), String> {
    match peer_uid {
        Some(uid) if uid == own_uid => Ok(()),
        Some(uid) => Err(format!("peer uid {uid} is not the daemon's uid {own_uid}")),
        None => Err("cannot read the peer's credentials".to_string()),
    }
}

/// Serves connections until the daemon's shutdown token is cancelled, then
/// stops accepting and lets open connections finish gracefully.
pub async fn serve(listener: UnixListener, methods: impl Into<Methods>, d: Arc<Daemon>, limits: &Limits) {
    let methods: Methods = methods.into();
    let (stop_handle, server_handle) = jsonrpsee::server::stop_channel();
    let config = ServerConfig::builder()
        .max_request_body_size(limits.max_request_bytes)
        .max_response_body_size(limits.max_response_bytes)
        .max_subscriptions_per_connection(limits.max_subscriptions_per_connection)
        // We bound connections ourselves (one permit per socket); jsonrpsee's
        // own guard counts HTTP requests and WebSocket sessions.
        .max_connections(u32::MAX)
        .build();
    let builder = jsonrpsee::server::Server::builder()
        .set_config(config)
        .set_rpc_middleware(RpcServiceBuilder::new().layer(ParamCheckLayer))
        .to_service_builder();
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
        let peer = stream.peer_cred().ok().map(|c| c.uid());
        if let Err(why) = check_peer(peer, own_uid) {
            tracing::warn!("refused a connection: {why}");
            tokio::spawn(refuse(stream, ErrorCode::PermissionDenied, why));
            continue;
        }
        let Ok(permit) = d.connections.clone().try_acquire_owned() else {
            let why = format!("too many connections (at most {})", limits.max_connections);
            tracing::warn!("refused a connection: {why}");
            tokio::spawn(refuse(stream, ErrorCode::LimitExceeded, why));
            continue;
        };
        let client = ClientId(d.next_client_id.fetch_add(1, Ordering::Relaxed));
        tokio::spawn(connection(stream, permit, client, builder.clone(), methods.clone(), stop_handle.clone()));
    }
    drop(stop_handle);
    if server_handle.stop().is_err() {
        tracing::debug!("server already stopped");
    }
    server_handle.stopped().await;
}

type Builder = TowerServiceBuilder<
    tower::layer::util::Stack<ParamCheckLayer, tower::layer::util::Identity>,
    tower::layer::util::Identity,
>;

/// Serves one accepted connection. The connection permit is held until the
/// socket closes — for a WebSocket, until its session ends, which outlives
/// the HTTP exchange that upgraded it.
async fn connection(
    stream: UnixStream,
    permit: OwnedSemaphorePermit,
    client: ClientId,
    builder: Builder,
    methods: Methods,
    stop: StopHandle,
) {
    let permit = Arc::new(permit);
    let svc = builder.build(methods, stop.clone());
    let per_request = tower::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        // This socket speaks only JSON-RPC: a plain `curl -d '{…}'` (which
        // says application/x-www-form-urlencoded) is JSON too.
        if req.method() == http::Method::POST {
            req.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
        }
        req.extensions_mut().insert(client);
        let mut svc = svc.clone();
        if jsonrpsee::server::ws::is_upgrade_request(&req) {
            let closed = svc.on_session_closed();
            let permit = permit.clone();
            tokio::spawn(async move {
                closed.await;
                drop(permit);
            });
        }
        // The error type must be concrete (rust-lang/rust#102211).
        async move { svc.call(req).await.map_err(|e| anyhow::anyhow!("{e}")) }
    });
    if let Err(e) = serve_with_graceful_shutdown(stream, per_request, stop.shutdown()).await {
        tracing::debug!("connection ended: {e}");
    }
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

    #[test]
    fn socket_dir_is_created_private() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("kd");
        secure_dir(&dir)?;
        assert_eq!(std::fs::metadata(&dir)?.mode() & 0o777, 0o700);
        Ok(())
    }

    #[test]
    fn world_writable_socket_dir_is_refused() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("kd");
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, Permissions::from_mode(0o777))?;
        let err = secure_dir(&dir).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("writable by other users"), "{err}");
        Ok(())
    }

    #[test]
    fn second_claim_on_a_socket_is_refused_and_stale_file_removed() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let socket = tmp.path().join("kdd.sock");
        std::fs::write(&socket, b"stale")?;
        let first = SocketClaim::claim(&socket)?;
        assert!(!socket.exists(), "stale socket file not removed");
        let err = SocketClaim::claim(&socket).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("already running"), "{err}");
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(first);
        SocketClaim::claim(&socket)?;
        Ok(())
    }
}
