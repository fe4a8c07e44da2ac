//! The one place registry errors become JSON-RPC errors.

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::NameError;
use serde_json::json;

use crate::db::DbError;

impl From<DbError> for ErrorObjectOwned {
    fn from(e: DbError) -> Self {
        let msg = e.to_string();
        match e {
            DbError::NotFound(_) => ErrorCode::NotFound.error(msg),
            DbError::Invalid(_) => ErrorCode::InvalidArgument.error(msg),
            DbError::AlreadyExists(_) => ErrorCode::AlreadyExists.error(msg),
            DbError::TrunkExists { thread, .. } => ErrorCode::AlreadyExists.error_with(msg, json!({"thread": thread})),
            DbError::Archived(thread) => ErrorCode::ThreadArchived.error_with(msg, json!({"thread": thread})),
            DbError::AlreadyImported { origin, thread } => {
                ErrorCode::AlreadyExists.error_with(msg, json!({"thread": thread, "origin": origin}))
            }
            DbError::SessionActive { session, holder, pid, node } => ErrorCode::SessionActive
                .error_with(msg, json!({"session": session, "holder": holder, "pid": pid, "node": node})),
            DbError::StaleToken { resource, token, current } => {
                ErrorCode::StaleToken.error_with(msg, json!({"resource": resource, "token": token, "current": current}))
            }
            DbError::StepTaken(_) | DbError::RunEnded { .. } | DbError::MemberBusy { .. } => {
                ErrorCode::Conflict.error(msg)
            }
            DbError::Closed => ErrorCode::ShuttingDown.error("the daemon is shutting down"),
            DbError::Unavailable(_) => {
                tracing::error!("database unavailable: {msg}");
                ErrorCode::Internal.error(msg)
            }
            DbError::Engine { .. }
            | DbError::Internal(_)
            | DbError::SchemaTooNew { .. }
            | DbError::Migration { .. }
            | DbError::ReadOnly { .. } => {
                tracing::error!("internal error: {msg}");
                ErrorCode::Internal.error(msg)
            }
        }
    }
}

/// A bad parameter value.
pub fn invalid(msg: impl Into<String>) -> ErrorObjectOwned {
    ErrorCode::InvalidArgument.error(msg)
}

pub fn bad_name(e: NameError) -> ErrorObjectOwned {
    invalid(e.to_string())
}
