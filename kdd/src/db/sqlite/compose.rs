//! The SQLite side of [`crate::db::compose`]: its SQL and the engine's operations.

use kd_proto::types::{Message, Thread};
use rusqlite::Connection;

use super::{acks, events, exchanges, inbox, messages, threads};
use crate::db::compose::{Asked, Carrier, Routed, Routing, delivered, emergency, import_title, imported_into, routed};
use crate::db::exchanges::NewExchange;
use crate::db::messages::NewMessage;
use crate::db::threads::NewThread;
use crate::db::{DbError, DbResult, Outbox};

/// Creates a thread holding `messages` (time, message), as an import: the
/// chosen id is used when it is free, a fresh one otherwise. Each message
/// keeps its time; the import itself, `now`, is the thread's last activity,
/// so that old messages do not make the thread idle or archived at once.
pub fn import(
    conn: &Connection,
    now: i64,
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
    // Untitled, it is titled as a native thread is: by the King's first message.
    if t.title.is_none() {
        t.title = import_title(&messages);
    }
    let thread = threads::create(conn, created_at, t, out)?;
    let messages = imported_into(&thread.id, messages);
    messages::import(conn, &thread.id, messages, out)?;
    conn.prepare_cached("UPDATE threads SET last_activity_at = max(last_activity_at, ?2) WHERE id = ?1")?
        .execute(rusqlite::params![thread.id, now])?;
    threads::get(conn, &thread.id)
}

/// Creates the thread `t` (its id must be free) with `m` as its first message.
pub fn create_with_message(
    conn: &Connection,
    now: i64,
    t: NewThread,
    m: NewMessage,
    out: &mut Outbox,
) -> DbResult<(Thread, Message)> {
    let (thread, mut messages) = create_with_messages(conn, now, t, vec![m], out)?;
    let message = messages.pop().ok_or_else(|| DbError::Internal("no message written".into()))?;
    Ok((thread, message))
}

/// Creates the thread `t` (its id must be free) with `messages`, in order.
pub fn create_with_messages(
    conn: &Connection,
    now: i64,
    t: NewThread,
    messages: Vec<NewMessage>,
    out: &mut Outbox,
) -> DbResult<(Thread, Vec<Message>)> {
    let thread = threads::create(conn, now, t, out)?;
    let mut written = Vec::with_capacity(messages.len());
    for mut m in messages {
        m.thread = thread.id.clone();
        written.push(messages::append(conn, now, m, out)?);
    }
    Ok((threads::get(conn, &thread.id)?, written))
}

/// Writes `messages` — the question last — to a thread (created as `t`
/// when given) and begins exchange `x` at the question, in one
/// transaction: a written question always has its journal.
pub fn ask(
    conn: &Connection,
    now: i64,
    t: Option<NewThread>,
    mut messages: Vec<NewMessage>,
    mut x: NewExchange,
    out: &mut Outbox,
) -> DbResult<Asked> {
    let (thread, message) = match t {
        Some(t) => {
            let (thread, mut written) = create_with_messages(conn, now, t, messages, out)?;
            let message = written.pop().ok_or_else(|| DbError::Internal("no question written".into()))?;
            (Some(thread), message)
        }
        None => {
            let question = messages.pop().ok_or_else(|| DbError::Internal("no question to write".into()))?;
            for m in messages {
                messages::append(conn, now, m, out)?;
            }
            (None, messages::append(conn, now, question, out)?)
        }
    };
    x.thread = message.thread.clone();
    x.seq = message.seq;
    let exchange = exchanges::begin(conn, now, &x)?;
    let steps = exchanges::steps(conn, exchange.id)?;
    Ok(Asked { thread, message, exchange, steps })
}

impl super::Sqlite {
    pub async fn ask(&self, t: Option<NewThread>, messages: Vec<NewMessage>, x: NewExchange) -> DbResult<Asked> {
        let small = messages.iter().map(|m| m.body.len()).sum::<usize>() <= super::SMALL_TEXT;
        self.write_if_small(small, move |c, out| ask(c, crate::db::now_ms(), t, messages, x, out)).await
    }

    pub async fn create_thread_with_message(&self, t: NewThread, m: NewMessage) -> DbResult<(Thread, Message)> {
        self.write(move |c, out| create_with_message(c, crate::db::now_ms(), t, m, out)).await
    }

    pub async fn create_thread_with_messages(
        &self,
        t: NewThread,
        messages: Vec<NewMessage>,
    ) -> DbResult<(Thread, Vec<Message>)> {
        self.write(move |c, out| create_with_messages(c, crate::db::now_ms(), t, messages, out)).await
    }

    pub async fn import_thread(
        &self,
        t: NewThread,
        created_at: i64,
        messages: Vec<(i64, NewMessage)>,
    ) -> DbResult<Thread> {
        self.write(move |c, out| import(c, crate::db::now_ms(), t, created_at, messages, out)).await
    }
}

pub fn route(conn: &Connection, now: i64, r: Routing, out: &mut Outbox) -> DbResult<Routed> {
    let message = match r.message {
        Carrier::New(m) => messages::append(conn, now, m, out)?,
        Carrier::Stored(m) => m,
    };
    let mut names = vec![message.from.clone()];
    names.extend(r.entries.iter().map(|(e, _)| e.member.clone()));
    let participants = inbox::participate(conn, now, &message.thread, &names)?;
    events::write(conn, now, &routed(r.route, &r.correlation_id, &message, &participants))?;
    let mut kept = Vec::with_capacity(r.entries.len());
    for (mut e, how) in r.entries {
        e.seq = message.seq;
        let k = inbox::keep(conn, now, &e)?;
        events::write(conn, now, &delivered(&e, how, &k, &r.correlation_id, &message))?;
        kept.push(k);
    }
    if let Some(broadcast) = &r.emergency {
        let members: Vec<String> = names.into_iter().skip(1).collect();
        acks::owe(conn, broadcast, &message.thread, message.seq, &members)?;
        events::write(conn, now, &emergency(broadcast, &message, &members))?;
    }
    Ok(Routed { message, kept, participants })
}

impl super::Sqlite {
    pub async fn route(&self, r: Routing) -> DbResult<Routed> {
        self.write(move |c, out| route(c, crate::db::now_ms(), r, out)).await
    }
}
