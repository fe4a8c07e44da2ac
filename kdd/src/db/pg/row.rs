//! tokio-postgres's row as the interface's [`Columns`]: every integer the
//! registry reads is a `bigint`; a bad value is [`DbError::Internal`].

use tokio_postgres::Row;

use crate::db::row::Columns;
use crate::db::{DbError, DbResult};

impl Columns for Row {
    type Error = DbError;

    fn text(&self, i: usize) -> DbResult<String> {
        Ok(self.try_get(i)?)
    }

    fn opt_text(&self, i: usize) -> DbResult<Option<String>> {
        Ok(self.try_get(i)?)
    }

    fn int(&self, i: usize) -> DbResult<i64> {
        Ok(self.try_get(i)?)
    }

    fn opt_int(&self, i: usize) -> DbResult<Option<i64>> {
        Ok(self.try_get(i)?)
    }

    fn bad(&self, i: usize, what: &str, value: &str) -> DbError {
        DbError::Internal(format!("the registry holds {value:?} where a {what} belongs (column {i})"))
    }
}
