//! rusqlite's row as the interface's [`Columns`]: a bad value is rusqlite's
//! conversion error, as a column of the wrong type would be.

use rusqlite::Row;
use rusqlite::types::Type;

use crate::db::row::Columns;

impl Columns for Row<'_> {
    type Error = rusqlite::Error;

    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }

    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }

    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }

    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }

    fn bad(&self, i: usize, what: &str, value: &str) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(i, Type::Text, format!("not a {what}: {value:?}").into())
    }
}
