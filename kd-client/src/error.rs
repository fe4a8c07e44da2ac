//! Client failures, worded so that one line tells the user what happened and
//! what to do.

use std::path::PathBuf;

use kd_proto::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting failed. `nothing_listens`: no socket, or a stale one
    /// (ENOENT, ECONNREFUSED) — the only case in which kd starts kdd.
    #[error("cannot reach kdd at {}: {reason}{hint}", socket.display())]
    Unreachable { socket: PathBuf, reason: String, hint: &'static str, nothing_listens: bool },
    /// `connect()` was forbidden (EACCES, EPERM), as inside a sandbox that
    /// forbids Unix sockets: a daemon may well be running, so none is started.
    #[error("permission denied connecting to kdd at {} (a sandbox may forbid Unix sockets)", socket.display())]
    Denied { socket: PathBuf },
    #[error("kdd at {} refused the connection: {reason}", socket.display())]
    Refused { socket: PathBuf, reason: String },
    #[error(
        "kdd at {} speaks protocol {theirs} (version {version}), this kd speaks {ours}; \
         restart it with `kd daemon restart` or install a matching kd",
        socket.display()
    )]
    Protocol { socket: PathBuf, theirs: u32, ours: u32, version: String },
    /// The socket's directory or its listener is not the user's own: it
    /// may be another user's impostor, so nothing is sent to it.
    #[error("will not talk to kdd at {}: {reason}", socket.display())]
    Untrusted { socket: PathBuf, reason: String },
    #[error("cannot start kdd: {0}")]
    Start(String),
    /// The daemon answered with a JSON-RPC error.
    #[error("{message}")]
    Rpc { code: i32, message: String, data: Option<serde_json::Value> },
    #[error("lost the connection to kdd: {0}")]
    Transport(String),
    /// The request was not sent: it is more than the daemon reads.
    #[error("{0}")]
    TooLarge(String),
}

impl ClientError {
    /// The kd error code, when the daemon answered with one of kd's own.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Rpc { code, .. } => ErrorCode::from_code(*code),
            _ => None,
        }
    }

    /// Whether the failure is about reaching the daemon at all (as opposed
    /// to the daemon refusing one request).
    pub fn is_connection(&self) -> bool {
        !matches!(self, ClientError::Rpc { .. } | ClientError::TooLarge(_))
    }
}

impl From<jsonrpsee::core::client::Error> for ClientError {
    fn from(e: jsonrpsee::core::client::Error) -> Self {
        use jsonrpsee::core::client::Error;
        match e {
            Error::Call(obj) => ClientError::Rpc {
                code: obj.code(),
                message: obj.message().to_string(),
                data: obj.data().and_then(|d| serde_json::from_str(d.get()).ok()),
            },
            Error::RequestTimeout => ClientError::Transport("the request timed out".into()),
            Error::Custom(why) if why.starts_with("request too large") => ClientError::TooLarge(why),
            Error::RestartNeeded(inner) => ClientError::Transport(one_line(&inner.to_string())),
            other => ClientError::Transport(one_line(&other.to_string())),
        }
    }
}

/// Collapses a multi-line error text into one line.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
