//! The daemon itself (`DaemonApiServer`, `DaemonApiClient`): who it is
//! (`daemon.hello`), how it is (`daemon.status`), stopping it, the checks
//! behind `kd doctor`, and the API's own description (`rpc.discover`).

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;

/// Answer to `daemon.hello`: what this daemon speaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Hello {
    /// Wire protocol version ([`crate::PROTOCOL_VERSION`]); clients refuse another.
    pub protocol: u32,
    /// Release version of `kdd`.
    pub version: String,
    /// Optional features this daemon offers, e.g. `"subscriptions"`.
    pub capabilities: Vec<String>,
    /// Process id of the daemon.
    pub pid: u32,
    /// Largest request the daemon reads, in bytes; clients refuse to send a
    /// larger one. Absent from daemons before it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<u32>,
}

/// A kdd node of the registry, as `daemon.status` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeStatus {
    pub id: String,
    pub host: String,
    pub pid: u32,
    /// How long ago its last heartbeat was, by the registry's clock.
    pub heartbeat_ms_ago: u64,
    /// Whether it is the daemon that answered.
    pub this: bool,
    /// How far its clock was from the registry's at its last heartbeat
    /// (positive: ahead).
    #[serde(default)]
    pub clock_skew_ms: i64,
}

/// Answer to `daemon.status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DaemonStatus {
    pub version: String,
    pub protocol: u32,
    pub pid: u32,
    pub uptime_ms: u64,
    pub socket: String,
    /// Where the registry is: a file, or a PostgreSQL database's URL
    /// without its password.
    pub db: String,
    /// The registry's engine: `sqlite` or `postgres` (older daemons: none,
    /// which was SQLite).
    #[serde(default)]
    pub engine: String,
    /// This daemon's node (`kdd --node`, by default the host name).
    #[serde(default)]
    pub node: String,
    /// The live nodes of the registry, this one included (one for SQLite).
    #[serde(default)]
    pub nodes: Vec<NodeStatus>,
    pub schema_version: u32,
    /// Number of threads in the registry.
    pub threads: u64,
    /// Agent runs currently in flight.
    pub runs_in_flight: u64,
    /// Connected clients (open connections, the caller's included).
    pub clients: u64,
    /// Open subscriptions over all clients.
    pub subscriptions: u64,
    /// Log lines that could not be written (a closed or full stderr or log
    /// file): logging drops them rather than block or fail the daemon.
    #[serde(default)]
    pub log_lines_dropped: u64,
    /// Whether the service manager (systemd, launchd) passed the listening
    /// socket: stopping this daemon leaves the socket, and the next client
    /// starts it again.
    #[serde(default)]
    pub socket_activated: bool,
}

/// Answer to `daemon.shutdown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShutdownAck {
    /// Always true: the daemon is stopping.
    pub stopping: bool,
    /// Runs that will be cancelled and recorded as interrupted.
    pub runs_cancelled: u64,
}

/// How one check of `daemon.doctor` came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Ok,
    /// Works, but something deserves a look.
    Warn,
    /// Broken.
    Fail,
}

/// One line of `kd doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Check {
    /// What was checked: `database`, `config`, a member's name.
    pub subject: String,
    pub status: CheckStatus,
    pub detail: String,
}

#[rpc(server, client)]
pub trait DaemonApi {
    /// Protocol version and capabilities; clients call it first.
    #[method(name = "daemon.hello", param_kind = map)]
    async fn daemon_hello(&self) -> RpcResult<Hello>;

    /// Version, uptime, paths, counts.
    #[method(name = "daemon.status", param_kind = map)]
    async fn daemon_status(&self) -> RpcResult<DaemonStatus>;

    /// Stop gracefully: runs in flight are cancelled and recorded, then exit 0;
    /// the open exchanges resume at the next start unless `resume` is false.
    #[method(name = "daemon.shutdown", param_kind = map)]
    async fn daemon_shutdown(&self, resume: Option<bool>) -> RpcResult<ShutdownAck>;

    /// Checks of the database, a workspace's configuration and each member's CLI.
    #[method(name = "daemon.doctor", param_kind = map)]
    async fn daemon_doctor(&self, workspace: String, path: Option<String>) -> RpcResult<Vec<Check>>;

    /// The OpenRPC document describing every method.
    #[method(name = "rpc.discover", param_kind = map)]
    async fn rpc_discover(&self) -> RpcResult<serde_json::Value>;
}
