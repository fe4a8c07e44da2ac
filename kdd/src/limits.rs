//! The bounds of the server (F-D3), as `kdd`'s flags set them: below both
//! [`crate::server`], which enforces them, and [`crate::state`], which
//! hands them to the handlers.

use std::time::Duration;

/// Bounds of the server (F-D3).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_request_bytes: u32,
    pub max_response_bytes: u32,
    pub max_subscriptions_per_connection: u32,
    /// How long a send may wait on a client that does not read before the
    /// client is disconnected.
    pub client_timeout: Duration,
    /// How long connections have to close at shutdown before they are cut.
    pub shutdown_grace: Duration,
    /// Connections beyond `max_connections` kept for plain HTTP calls, so
    /// that `kd daemon status` and `kd daemon stop` always get in.
    pub reserved_connections: usize,
    /// How long an HTTP connection may sit idle between requests, and a
    /// WebSocket leave the daemon's pings unanswered, before it is dropped.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            max_request_bytes: 16 * 1024 * 1024,
            max_response_bytes: 512 * 1024 * 1024,
            max_subscriptions_per_connection: 1024,
            client_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(3),
            reserved_connections: 4,
            idle_timeout: Duration::from_secs(60),
        }
    }
}
