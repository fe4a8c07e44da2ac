//! A row as the interface reads it. Both engines select each table's
//! columns in the same order and hand the row to one reader per concept
//! (`threads::read`, `messages::read`, …), which reads it through
//! [`Columns`]: the few shapes the registry stores (text, integers, JSON
//! text, names), each engine implementing them over its driver's row.

use serde_json::Value;

/// Column `i` of a row, as one of the shapes the registry stores.
pub(crate) trait Columns {
    /// What a read that fails is: the engine's own error.
    type Error;

    fn text(&self, i: usize) -> Result<String, Self::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    fn int(&self, i: usize) -> Result<i64, Self::Error>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
    /// Column `i` holds `value`, which does not read as a `what`.
    fn bad(&self, i: usize, what: &str, value: &str) -> Self::Error;

    /// A name the registry wrote (a kind, a state): one that does not parse
    /// is a bad row.
    fn named<T>(&self, i: usize, what: &str, parse: impl FnOnce(&str) -> Option<T>) -> Result<T, Self::Error> {
        let text = self.text(i)?;
        parse(&text).ok_or_else(|| self.bad(i, what, &text))
    }

    /// JSON the registry wrote: JSON that does not parse is a bad row.
    fn json(&self, i: usize, what: &str) -> Result<Value, Self::Error> {
        let text = self.text(i)?;
        serde_json::from_str(&text).map_err(|_| self.bad(i, what, &text))
    }

    /// A count or seq the registry wrote (never negative).
    fn count(&self, i: usize) -> Result<u64, Self::Error> {
        Ok(self.int(i)? as u64)
    }

    fn opt_count(&self, i: usize) -> Result<Option<u64>, Self::Error> {
        Ok(self.opt_int(i)?.map(|v| v as u64))
    }
}
