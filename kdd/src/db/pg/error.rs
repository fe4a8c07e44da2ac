//! PostgreSQL's errors as registry errors.
//!
//! A lost or refused connection is [`DbError::Unavailable`] (kdd keeps
//! serving; each operation fails until the database is back); anything else
//! the server reports is [`DbError::Engine`] with its message and SQLSTATE.
//! A unique violation is mapped to its domain variant by the caller, which
//! knows which constraint means what: [`unique_violation`].

use std::error::Error as _;

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::db::DbError;

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> DbError {
        if is_unavailable(&e) {
            return DbError::Unavailable(text(&e));
        }
        DbError::engine(text(&e))
    }
}

impl From<PoolError> for DbError {
    fn from(e: PoolError) -> DbError {
        match e {
            PoolError::Closed => DbError::Closed,
            PoolError::Timeout(_) => DbError::Unavailable("no database connection free within 5 s".into()),
            PoolError::Backend(e) => DbError::Unavailable(format!("cannot connect: {}", text(&e))),
            PoolError::PostCreateHook(e) => DbError::Unavailable(format!("cannot set up a connection: {e}")),
            PoolError::NoRuntimeSpecified => DbError::Internal("the database pool has no runtime".into()),
        }
    }
}

/// The name of the unique constraint (or index) `e` violated, if it is a
/// unique violation (23505): the caller turns it into `AlreadyExists`,
/// `TrunkExists`, `AlreadyImported`, `SessionActive`…
pub fn unique_violation(e: &tokio_postgres::Error) -> Option<&str> {
    let db = e.as_db_error().filter(|d| *d.code() == SqlState::UNIQUE_VIOLATION)?;
    Some(db.constraint().unwrap_or(""))
}

/// A wait for a row a first try of a write holds, cut by the statement's
/// timeout: an outage for now, tried again (the server holds a try whose
/// client went without a word until `idle_in_transaction_session_timeout`;
/// `db::outage::Again`).
pub(crate) fn still_open(e: tokio_postgres::Error) -> DbError {
    match e.code() {
        Some(code) if *code == SqlState::QUERY_CANCELED => {
            DbError::Unavailable(format!("a first try of the write is still open: {e}"))
        }
        _ => e.into(),
    }
}

/// Connection lost, server shutting down, or the database refused us.
fn is_unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::TOO_MANY_CONNECTIONS,
                ]
                .contains(code)
        }
        // Not the server's error: I/O, TLS, authentication, timeouts.
        None => e.as_db_error().is_none() && e.source().is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// One line: the server's message with its detail and SQLSTATE, or the
/// driver's error with its cause.
fn text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let detail = db.detail().map(|d| format!(" ({d})")).unwrap_or_default();
        return format!("{}{detail} [{}]", db.message(), db.code().code());
    }
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::pg::testing;

    #[tokio::test]
    async fn a_unique_violation_names_its_constraint_and_other_errors_carry_sqlstate() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        let c = pg.conn().await.unwrap();
        let insert = "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('t', '/w', 1, 1)";
        c.execute(insert, &[]).await.unwrap();
        let e = c.execute(insert, &[]).await.unwrap_err();
        assert_eq!(unique_violation(&e), Some("threads_pkey"));
        let e = c.execute("SELECT nonsense FROM threads", &[]).await.unwrap_err();
        assert_eq!(unique_violation(&e), None);
        let DbError::Engine { text, .. } = DbError::from(e) else { panic!("not an engine error") };
        assert!(text.contains("nonsense") && text.contains("[42703]"), "{text}");
    }
}
