//! Stable JSON-RPC error codes of the kd API.
//!
//! Standard JSON-RPC codes (-32700 parse error, -32600 invalid request,
//! -32601 method not found, -32602 invalid params, -32603 internal) keep
//! their usual meaning. kd's own codes are in the 1000 range and never change
//! meaning once released; the `data` member carries details where noted.

use jsonrpsee::types::ErrorObjectOwned;
use serde::Serialize;

/// Result type of every method.
pub type RpcResult<T> = Result<T, ErrorObjectOwned>;

/// kd's application error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrorCode {
    /// Something failed inside the daemon (database I/O, …). Retrying may help.
    Internal = 1000,
    /// A parameter has a bad value (not a bad type: that is -32602).
    InvalidArgument = 1001,
    /// The thread, session or message named does not exist.
    NotFound = 1002,
    /// `session.resume` of a session that is already active.
    /// `data`: `{"session", "holder", "pid"}`.
    SessionActive = 1003,
    /// A write carried a fencing token that is not the lock's current one.
    /// `data`: `{"resource", "token", "current"}`.
    StaleToken = 1004,
    /// A bound was hit (connections, subscriptions, request size, …).
    LimitExceeded = 1005,
    /// The daemon is shutting down and takes no new work.
    ShuttingDown = 1006,
    /// The connecting process belongs to another user.
    PermissionDenied = 1007,
    /// The thing to create already exists (e.g. a thread id that is taken).
    AlreadyExists = 1008,
    /// A message to an archived thread (`thread.unarchive` opens it again).
    /// `data`: `{"thread"}`.
    ThreadArchived = 1009,
    /// The caller may not do this: an agent's process acting beyond what
    /// its run's capability allows (another member, another thread, the
    /// King's actions), or a capability that is unknown or whose run ended.
    Forbidden = 1010,
    /// What is asked cannot be done as things stand, and nothing was
    /// changed: the user's tree has uncommitted changes, a merge would
    /// conflict, a member is still working, work would be lost.
    Conflict = 1011,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 12] = [
        ErrorCode::Internal,
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::SessionActive,
        ErrorCode::StaleToken,
        ErrorCode::LimitExceeded,
        ErrorCode::ShuttingDown,
        ErrorCode::PermissionDenied,
        ErrorCode::AlreadyExists,
        ErrorCode::ThreadArchived,
        ErrorCode::Forbidden,
        ErrorCode::Conflict,
    ];

    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<ErrorCode> {
        Self::ALL.into_iter().find(|c| c.code() == code)
    }

    /// Short stable name, used in docs and logs.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Internal => "internal",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::SessionActive => "session_active",
            ErrorCode::StaleToken => "stale_token",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::ThreadArchived => "thread_archived",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Conflict => "conflict",
        }
    }

    /// An error object with this code and a message.
    pub fn error(self, message: impl Into<String>) -> ErrorObjectOwned {
        ErrorObjectOwned::owned::<()>(self.code(), message.into(), None)
    }

    /// An error object with this code, a message and structured data.
    pub fn error_with(self, message: impl Into<String>, data: impl Serialize) -> ErrorObjectOwned {
        ErrorObjectOwned::owned(self.code(), message.into(), Some(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c));
            assert!(seen.insert(c.code()), "duplicate code {}", c.code());
            assert!(!(-32768..=-32000).contains(&c.code()), "reserved range");
        }
        assert_eq!(ErrorCode::from_code(-32601), None);
    }
}
