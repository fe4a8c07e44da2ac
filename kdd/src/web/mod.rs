//! kd web (issue 35): kdd serves the web client — a page in the browser,
//! a thin client of the socket's JSON-RPC API — on a TCP address, started
//! by `web.serve` (`kd web`) and stopped by `web.stop` or the daemon's
//! shutdown. Beside the Unix-socket server, at its layer: it serves the
//! same jsonrpsee methods with the same checks ([`crate::server`]).
//!
//! - [`auth`]: one-time pairing tokens and the sessions (cookies) they
//!   become, in kdd's memory;
//! - [`guard`]: the browser's threats: `Host` (DNS rebinding), `Origin`
//!   (cross-site WebSocket hijacking), the secure headers (CSP);
//! - [`routes`]: one request: `/pair`, `/rpc`, the page;
//! - [`listen`]: the listener, the connections, their bounds and their end;
//! - [`tls`]: the certificate a non-loopback address needs;
//! - [`assets`]: the page's files, embedded at compile time.
//!
//! [`Web`] is what `rpc::web` drives, through [`WebControl`] (the rpc
//! layer sits below this one).

pub mod assets;
pub mod auth;
pub mod guard;
pub mod listen;
pub mod routes;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::Methods;
use jsonrpsee::core::async_trait;
use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::web::{WebServing, WebSession};
use tokio_util::sync::CancellationToken;

use crate::connections::Connections;
use crate::limits::Limits;
use crate::state::{Daemon, WebControl, WebServe};

/// kd web: whether and where it serves, and its sessions.
pub struct Web {
    d: Arc<Daemon>,
    methods: Methods,
    limits: Limits,
    /// Where kd keeps its own certificate (`web/` beside the registry).
    state_dir: PathBuf,
    auth: Arc<auth::Auth>,
    open: Arc<Connections>,
    serving: tokio::sync::Mutex<Option<Serving>>,
}

/// A listener being served.
struct Serving {
    listen: SocketAddr,
    /// How the pairing URL names it.
    url_base: String,
    tls: bool,
    fingerprint: Option<String>,
    self_signed: bool,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// The names it answers to beyond loopback's and the host name's.
    names: Vec<String>,
}

fn invalid(why: impl Into<String>) -> ErrorObjectOwned {
    ErrorCode::InvalidArgument.error(why.into())
}

/// `listen` as an address: `IP:PORT`, or `localhost:PORT`.
fn parse_listen(listen: &str) -> Result<SocketAddr, ErrorObjectOwned> {
    crate::config::web::listen_addr(listen).map_err(|m| invalid(format!("listen: {m}")))
}

/// The names beyond loopback's and the host name's a listener on `addr`
/// answers to: `given` (`web.names`, `kd web --name`), and on a wildcard
/// address every address of the machine's interfaces (a phone on the LAN
/// types one).
fn names_for(addr: SocketAddr, given: &[String]) -> Vec<String> {
    let mut names = given.to_vec();
    if addr.ip().is_unspecified() {
        let ifaces = if_addrs::get_if_addrs().unwrap_or_default();
        for ip in ifaces.iter().map(|i| i.ip()).filter(|ip| !ip.is_loopback()) {
            let wanted = match ip {
                std::net::IpAddr::V4(_) => true,
                std::net::IpAddr::V6(v6) => addr.is_ipv6() && (v6.segments()[0] & 0xffc0) != 0xfe80,
            };
            if let (true, Ok(n)) = (wanted, crate::config::web::host_name(&ip.to_string()))
                && !names.contains(&n)
            {
                names.push(n);
            }
        }
    }
    names
}

/// `req` with what it leaves unsaid taken from the user's `web` section.
fn configured(mut req: WebServe) -> Result<WebServe, ErrorObjectOwned> {
    let web = crate::config::web::load(&crate::config::Env::process()).map_err(|e| invalid(e.to_string()))?;
    if req.listen.is_none() {
        req.listen = web.listen;
    }
    if req.tls_cert.is_none() && req.tls_key.is_none() {
        (req.tls_cert, req.tls_key) = (web.tls_cert, web.tls_key);
    }
    for n in web.names {
        if !req.names.contains(&n) {
            req.names.push(n);
        }
    }
    Ok(req)
}

impl Web {
    pub fn new(d: Arc<Daemon>, methods: Methods, limits: Limits, state_dir: PathBuf) -> Web {
        Web {
            d,
            methods,
            limits,
            state_dir,
            auth: Arc::new(auth::Auth::default()),
            open: Arc::new(Connections::default()),
            serving: tokio::sync::Mutex::new(None),
        }
    }

    /// Serves from kdd's start when the user's configuration sets
    /// `web.listen` (no token is made: `kd web` makes one).
    pub async fn serve_configured(&self) {
        let req = match configured(WebServe::default()) {
            Ok(req) if req.listen.is_some() => req,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!("kd web is not served: {}", e.message());
                return;
            }
        };
        let mut serving = self.serving.lock().await;
        if serving.is_some() {
            return;
        }
        match self.start(req).await {
            Ok(s) => *serving = Some(s),
            Err(e) => tracing::warn!("kd web is not served: {}", e.message()),
        }
    }

    /// Stops serving, if it does, and waits for its connections to end.
    pub async fn shutdown(&self) {
        let serving = self.serving.lock().await.take();
        if let Some(s) = serving {
            s.stop.cancel();
            let bound = self.limits.shutdown_grace + Duration::from_secs(3);
            if tokio::time::timeout(bound, s.task).await.is_err() {
                tracing::warn!("kd web did not stop in time");
            }
        }
        self.auth.drop_tokens();
    }

    fn answer(&self, s: &Serving, started: bool) -> Result<WebServing, ErrorObjectOwned> {
        let (token, token_expires_ms) = self.auth.new_token().map_err(|e| ErrorCode::Internal.error(e))?;
        Ok(WebServing {
            url: format!("{}/pair?token={token}", s.url_base),
            listen: s.listen.to_string(),
            tls: s.tls,
            fingerprint: s.fingerprint.clone(),
            self_signed: s.self_signed,
            token_expires_ms,
            started,
            names: s.names.clone(),
        })
    }

    async fn start(&self, req: WebServe) -> Result<Serving, ErrorObjectOwned> {
        let asked = req.listen.as_deref().unwrap_or(kd_proto::web::DEFAULT_LISTEN);
        let addr = parse_listen(asked)?;
        let loopback = addr.ip().is_loopback();
        let host_name = crate::host_name();
        let extra = names_for(addr, &req.names);
        let tls = match (&req.tls_cert, &req.tls_key) {
            (Some(cert), Some(key)) => Some(
                tls::load(std::path::Path::new(cert), std::path::Path::new(key))
                    .map_err(|e| invalid(format!("tls: {e}")))?,
            ),
            (None, None) if loopback || req.insecure_http => None,
            (None, None) => {
                let mut names = vec![host_name.clone(), format!("{host_name}.local"), "localhost".into()];
                if !addr.ip().is_unspecified() {
                    names.push(addr.ip().to_string());
                }
                names.extend(extra.iter().map(|n| n.trim_start_matches('[').trim_end_matches(']').to_string()));
                Some(
                    tls::self_signed(&self.state_dir.join("web"), names)
                        .map_err(|e| ErrorCode::Internal.error(format!("tls: {e}")))?,
                )
            }
            _ => return Err(invalid("tls_cert and tls_key go together")),
        };
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(|e| invalid(format!("cannot listen on {addr}: {e}")))?;
        let bound = listener.local_addr().map_err(|e| ErrorCode::Internal.error(e.to_string()))?;
        let on_tls = tls.is_some();
        let names = guard::Names::new(bound, on_tls, &host_name, &extra);
        let scheme = if on_tls { "https" } else { "http" };
        let url_host = if bound.ip().is_unspecified() {
            format!("{}:{}", host_name.to_lowercase(), bound.port())
        } else if bound.ip().is_loopback() {
            format!("127.0.0.1:{}", bound.port())
        } else {
            bound.to_string()
        };
        let ctx = Arc::new(routes::Ctx {
            names,
            auth: self.auth.clone(),
            tls: on_tls,
            max_request_bytes: self.limits.max_request_bytes,
        });
        let (fingerprint, self_signed) = match &tls {
            Some(t) => (Some(t.fingerprint.clone()), t.self_signed),
            None => (None, false),
        };
        let serve = listen::Serve {
            d: self.d.clone(),
            methods: self.methods.clone(),
            limits: self.limits.clone(),
            ctx,
            tls: tls.map(|t| t.acceptor),
            open: self.open.clone(),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(listen::run(listener, serve, stop.clone()));
        tracing::info!(listen = %bound, tls = on_tls, "kd web serving");
        Ok(Serving {
            listen: bound,
            url_base: format!("{scheme}://{url_host}"),
            tls: on_tls,
            fingerprint,
            self_signed,
            stop,
            task,
            names: extra,
        })
    }
}

#[async_trait]
impl WebControl for Web {
    async fn serve(&self, req: WebServe) -> Result<WebServing, ErrorObjectOwned> {
        if self.d.shutdown.is_cancelled() {
            return Err(ErrorCode::ShuttingDown.error("the daemon is shutting down"));
        }
        let mut serving = self.serving.lock().await;
        if serving.as_ref().is_some_and(|s| s.task.is_finished()) {
            *serving = None;
        }
        if let Some(s) = serving.as_ref() {
            if let Some(asked) = &req.listen {
                let addr = parse_listen(asked)?;
                if addr != s.listen && !(addr.port() == 0 && addr.ip() == s.listen.ip()) {
                    return Err(invalid(format!(
                        "kd web serves on {} already: stop it first (kd web --stop) to serve on {asked}",
                        s.listen
                    )));
                }
            }
            if let Some(new) = req.names.iter().find(|n| !s.names.contains(n)) {
                return Err(invalid(format!(
                    "kd web serves already, not as {new}: stop it first (kd web --stop) to add a name"
                )));
            }
            return self.answer(s, false);
        }
        let s = self.start(configured(req)?).await?;
        let answer = self.answer(&s, true);
        *serving = Some(s);
        answer
    }

    async fn stop(&self) -> bool {
        let was = self.serving.lock().await.as_ref().is_some_and(|s| !s.task.is_finished());
        self.shutdown().await;
        was
    }

    fn sessions(&self) -> Vec<WebSession> {
        self.auth.list()
    }

    fn revoke(&self, id: Option<&str>) -> usize {
        let (n, connections) = self.auth.revoke(id);
        for c in connections {
            self.open.cut(c);
        }
        n
    }
}
