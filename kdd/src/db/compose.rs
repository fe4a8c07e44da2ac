//! Writes that make a thread and its messages together, in one transaction
//! (above [`super::threads`] and [`super::messages`]): an import, and a new
//! thread created with its first message (so a refused first message leaves
//! no empty thread).

use kd_proto::types::{Message, Thread};
use rusqlite::Connection;

use super::messages::{self, NewMessage};
use super::threads::{self, NewThread};
use super::{DbError, DbResult, Outbox};

/// Creates a thread holding `messages` (time, message), as an import: the
/// chosen id is used when it is free, a fresh one otherwise.
pub fn import(
    conn: &Connection,
    mut t: NewThread,
    created_at: i64,
    messages: Vec<(i64, NewMessage)>,
    out: &mut Outbox,
) -> DbResult<Thread> {
    if let Some(origin) = &t.origin
        && let Some(thread) = threads::by_origin(conn, origin)?
    {
        return Err(DbError::AlreadyImported { origin: origin.clone(), thread });
    }
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

/// Creates the thread `t` (its id must be free) with `m` as its first message.
pub fn create_with_message(
    conn: &Connection,
    now: i64,
    t: NewThread,
    mut m: NewMessage,
    out: &mut Outbox,
) -> DbResult<(Thread, Message)> {
    let thread = threads::create(conn, now, t, out)?;
    m.thread = thread.id.clone();
    let message = messages::append(conn, now, m, out)?;
    Ok((threads::get(conn, &thread.id)?, message))
}

impl super::Db {
    pub async fn create_thread_with_message(&self, t: NewThread, m: NewMessage) -> DbResult<(Thread, Message)> {
        self.write(move |c, out| create_with_message(c, super::now_ms(), t, m, out)).await
    }

    pub async fn import_thread(
        &self,
        t: NewThread,
        created_at: i64,
        messages: Vec<(i64, NewMessage)>,
    ) -> DbResult<Thread> {
        self.write(move |c, out| import(c, t, created_at, messages, out)).await
    }
}
