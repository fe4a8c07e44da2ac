//! Importing a thread: the thread and its messages, with their own times,
//! in one transaction (above [`super::threads`] and [`super::messages`]).

use kd_proto::types::Thread;
use rusqlite::Connection;

use super::messages::{self, NewMessage};
use super::threads::{self, NewThread};
use super::{DbResult, Outbox};

/// Creates a thread holding `messages` (time, message), as an import: the
/// chosen id is used when it is free, a fresh one otherwise.
pub fn import(
    conn: &Connection,
    mut t: NewThread,
    created_at: i64,
    messages: Vec<(i64, NewMessage)>,
    out: &mut Outbox,
) -> DbResult<Thread> {
    if let Some(id) = &t.id
        && threads::exists(conn, id)?
    {
        t.id = None;
    }
    let thread = threads::create(conn, created_at, t, out)?;
    let messages = messages
        .into_iter()
        .map(|(at, mut m)| {
            m.thread = thread.id.clone();
            (at, m)
        })
        .collect();
    messages::import(conn, &thread.id, messages, out)?;
    threads::get(conn, &thread.id)
}

impl super::Db {
    pub async fn import_thread(
        &self,
        t: NewThread,
        created_at: i64,
        messages: Vec<(i64, NewMessage)>,
    ) -> DbResult<Thread> {
        self.write(move |c, out| import(c, t, created_at, messages, out)).await
    }
}
