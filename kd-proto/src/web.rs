//! kd web (issue 35): the web client kdd serves on a TCP address, paired
//! by a one-time token — `web.serve`, `web.stop`, `web.sessions`,
//! `web.revoke` (`WebApiServer`, `WebApiClient`), each the King's alone.
//!
//! The page itself speaks the socket's API at `/rpc` (HTTP POST and
//! WebSocket); these methods only start and stop the serving and manage
//! the browsers paired with it.

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;

/// The address kd web listens on unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7433";

/// Answer to `web.serve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WebServing {
    /// The pairing URL: the page's address with a one-time token, to open
    /// once in the browser to pair (it is then worth nothing).
    pub url: String,
    /// The address listened on, e.g. `127.0.0.1:7433`.
    pub listen: String,
    /// Whether the page is served over TLS (`https://`).
    pub tls: bool,
    /// The SHA-256 fingerprint of the certificate served (hex pairs joined
    /// by `:`), under TLS.
    pub fingerprint: Option<String>,
    /// Whether the certificate is one kd made itself (self-signed).
    pub self_signed: bool,
    /// When the pairing token expires (ms since the epoch).
    pub token_expires_ms: i64,
    /// Whether this call started the serving (false: it was serving already,
    /// only a new token was made).
    pub started: bool,
    /// The names the page answers to beyond loopback's and the machine's
    /// host name: `web.names`, and on a wildcard address the machine's
    /// interface addresses (a `Host` naming anything else is refused).
    #[serde(default)]
    pub names: Vec<String>,
}

/// A browser paired with kd web.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WebSession {
    /// The session's id (`ws-…`), for `web.revoke`; not its secret.
    pub id: String,
    /// When it was paired (ms since the epoch).
    pub created_ms: i64,
    /// When it last made a request (ms since the epoch).
    pub last_seen_ms: i64,
    /// The address the browser paired from.
    pub peer: String,
    /// The browser's User-Agent when it paired (at most 200 characters).
    pub user_agent: Option<String>,
}

/// Answer to `web.stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WebStopped {
    /// Whether it was serving.
    pub stopped: bool,
}

/// Answer to `web.revoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WebRevoked {
    /// How many sessions ended.
    pub revoked: u32,
}

#[rpc(server, client)]
pub trait WebApi {
    /// Serves the web client (started if it is not) and makes a new
    /// one-time pairing token.
    #[method(name = "web.serve", param_kind = map)]
    async fn web_serve(
        &self,
        listen: Option<String>,
        insecure_http: Option<bool>,
        tls_cert: Option<String>,
        tls_key: Option<String>,
        names: Option<Vec<String>>,
    ) -> RpcResult<WebServing>;

    /// Stops serving the web client; every page's connection is closed.
    #[method(name = "web.stop", param_kind = map)]
    async fn web_stop(&self) -> RpcResult<WebStopped>;

    /// The paired browsers.
    #[method(name = "web.sessions", param_kind = map)]
    async fn web_sessions(&self) -> RpcResult<Vec<WebSession>>;

    /// Ends one session (`id`) or every one (`all`); their pages'
    /// connections are closed.
    #[method(name = "web.revoke", param_kind = map)]
    async fn web_revoke(&self, id: Option<String>, all: Option<bool>) -> RpcResult<WebRevoked>;
}
