//! Read-only connections for queries, reused across calls.

use std::path::PathBuf;
use std::sync::Mutex;

use rusqlite::{Connection, OpenFlags};

use super::{DbResult, schema};

/// Idle read connections kept around; more are opened under load and closed after.
const MAX_IDLE: usize = 8;

pub(super) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    pub(super) fn new(path: PathBuf) -> ReadPool {
        ReadPool { path, idle: Mutex::new(Vec::new()) }
    }

    /// Runs `f` on an idle connection, or a new one.
    pub(super) fn with<T>(&self, f: impl FnOnce(&Connection) -> DbResult<T>) -> DbResult<T> {
        let conn = match self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            Some(conn) => conn,
            None => self.open()?,
        };
        let result = f(&conn);
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(conn);
        }
        result
    }

    pub(super) fn clear(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }

    /// A new connection, not the pool's: one that holds nothing of what an
    /// earlier read on it saw.
    pub(super) fn open(&self) -> DbResult<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        schema::configure_reader(&conn)?;
        Ok(conn)
    }
}
