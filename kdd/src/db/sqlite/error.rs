//! rusqlite's errors as registry errors: each becomes
//! [`DbError::Engine`] in its own words, with its [`Cause`] read from
//! SQLite's error code — so the interface never names rusqlite.

use crate::db::{Cause, DbError};

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> DbError {
        let code = e.sqlite_error_code();
        let cause = if code == Some(rusqlite::ErrorCode::ReadOnly) {
            Cause::ReadOnly
        } else if is_outage_code(code) {
            Cause::Away
        } else {
            Cause::Failed
        };
        DbError::Engine { text: e.to_string(), cause }
    }
}

/// Whether SQLite's error `code` says the file cannot be written for now:
/// its disk full or read-only, an I/O error, the write lock held by another
/// process past the busy timeout, the file not to be opened.
pub(super) fn is_outage_code(code: Option<rusqlite::ErrorCode>) -> bool {
    use rusqlite::ErrorCode as C;
    matches!(
        code,
        Some(
            C::DiskFull
                | C::ReadOnly
                | C::SystemIoFailure
                | C::DatabaseBusy
                | C::DatabaseLocked
                | C::CannotOpen
                | C::FileLockingProtocolFailed
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlites_outage_codes_are_outages_and_its_other_errors_are_not() {
        let sqlite = |code, extended| {
            DbError::from(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error { code, extended_code: extended }, None))
        };
        assert!(sqlite(rusqlite::ErrorCode::DiskFull, rusqlite::ffi::SQLITE_FULL).is_outage());
        assert!(sqlite(rusqlite::ErrorCode::ReadOnly, rusqlite::ffi::SQLITE_READONLY).is_outage());
        assert!(sqlite(rusqlite::ErrorCode::DatabaseBusy, rusqlite::ffi::SQLITE_BUSY).is_outage());
        assert!(sqlite(rusqlite::ErrorCode::SystemIoFailure, rusqlite::ffi::SQLITE_IOERR_WRITE).is_outage());
        assert!(!sqlite(rusqlite::ErrorCode::ConstraintViolation, rusqlite::ffi::SQLITE_CONSTRAINT).is_outage());
        assert!(!sqlite(rusqlite::ErrorCode::DatabaseCorrupt, rusqlite::ffi::SQLITE_CORRUPT).is_outage());
        let e = sqlite(rusqlite::ErrorCode::ConstraintViolation, rusqlite::ffi::SQLITE_CONSTRAINT);
        assert!(e.to_string().starts_with("database error: "), "{e}");
    }
}
