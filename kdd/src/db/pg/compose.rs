//! Writes that make a thread and its messages together, in one transaction,
//! on PostgreSQL (see [`crate::db::compose`]): an import, a new thread with
//! its first messages, a question with its journal, and a routed message
//! with its inbox entries.

use deadpool_postgres::GenericClient;
use kd_proto::types::{Message, Thread};

use super::{Pg, acks, events, exchanges, inbox, messages, threads};
use crate::db::compose::{Asked, Carrier, Routed, Routing, delivered, emergency, import_title, imported_into, routed};
use crate::db::exchanges::NewExchange;
use crate::db::messages::NewMessage;
use crate::db::threads::NewThread;
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Creates a thread holding `messages` (time, message), as an import: the
/// chosen id is used when it is free, a fresh one otherwise. Each message
/// keeps its time; the import itself, `now`, is the thread's last activity,
/// so that old messages do not make the thread idle or archived at once.
pub(crate) async fn import(
    c: &impl GenericClient,
    now: i64,
    mut t: NewThread,
    created_at: i64,
    messages: Vec<(i64, NewMessage)>,
    out: &mut Outbox,
) -> DbResult<Thread> {
    if let Some(origin) = &t.origin
        && let Some(thread) = threads::by_origin(c, origin).await?
    {
        return Err(DbError::AlreadyImported { origin: origin.clone(), thread });
    }
    if let Some(id) = &t.id
        && threads::exists(c, id).await?
    {
        t.id = None;
    }
    // Untitled, it is titled as a native thread is: by the King's first message.
    if t.title.is_none() {
        t.title = import_title(&messages);
    }
    let thread = threads::create(c, created_at, t, out).await?;
    let messages = imported_into(&thread.id, messages);
    messages::import(c, &thread.id, messages, out).await?;
    let st =
        c.prepare_cached("UPDATE threads SET last_activity_at = greatest(last_activity_at, $2) WHERE id = $1").await?;
    c.execute(&st, &[&thread.id, &now]).await?;
    threads::get(c, &thread.id).await
}

/// Creates the thread `t` (its id must be free) with `m` as its first message.
pub(crate) async fn create_with_message(
    c: &impl GenericClient,
    now: i64,
    t: NewThread,
    m: NewMessage,
    out: &mut Outbox,
) -> DbResult<(Thread, Message)> {
    let (thread, mut messages) = create_with_messages(c, now, t, vec![m], out).await?;
    let message = messages.pop().ok_or_else(|| DbError::Internal("no message written".into()))?;
    Ok((thread, message))
}

/// Creates the thread `t` (its id must be free) with `messages`, in order.
pub(crate) async fn create_with_messages(
    c: &impl GenericClient,
    now: i64,
    t: NewThread,
    messages: Vec<NewMessage>,
    out: &mut Outbox,
) -> DbResult<(Thread, Vec<Message>)> {
    let thread = threads::create(c, now, t, out).await?;
    let mut written = Vec::with_capacity(messages.len());
    for mut m in messages {
        m.thread = thread.id.clone();
        written.push(messages::append(c, now, m, out).await?);
    }
    Ok((threads::get(c, &thread.id).await?, written))
}

/// Writes `messages` — the question last — to a thread (created as `t`
/// when given) and begins exchange `x` at the question, in one
/// transaction: a written question always has its journal.
pub(crate) async fn ask(
    c: &impl GenericClient,
    now: i64,
    t: Option<NewThread>,
    mut messages: Vec<NewMessage>,
    mut x: NewExchange,
    out: &mut Outbox,
) -> DbResult<Asked> {
    let (thread, message) = match t {
        Some(t) => {
            let (thread, mut written) = create_with_messages(c, now, t, messages, out).await?;
            let message = written.pop().ok_or_else(|| DbError::Internal("no question written".into()))?;
            (Some(thread), message)
        }
        None => {
            let question = messages.pop().ok_or_else(|| DbError::Internal("no question to write".into()))?;
            for m in messages {
                messages::append(c, now, m, out).await?;
            }
            (None, messages::append(c, now, question, out).await?)
        }
    };
    x.thread = message.thread.clone();
    x.seq = message.seq;
    let exchange = exchanges::begin(c, now, &x).await?;
    let steps = exchanges::steps(c, exchange.id).await?;
    Ok(Asked { thread, message, exchange, steps })
}

/// A routed message: the message, who keeps it in their inbox and how, the
/// participants, the acknowledgements an emergency owes, and the routing
/// decision's events, in one transaction.
pub(crate) async fn route(c: &impl GenericClient, now: i64, r: Routing, out: &mut Outbox) -> DbResult<Routed> {
    let message = match r.message {
        Carrier::New(m) => messages::append(c, now, m, out).await?,
        Carrier::Stored(m) => m,
    };
    let mut names = vec![message.from.clone()];
    names.extend(r.entries.iter().map(|(e, _)| e.member.clone()));
    let participants = inbox::participate(c, now, &message.thread, &names).await?;
    events::write(c, now, &routed(r.route, &r.correlation_id, &message, &participants)).await?;
    let mut kept = Vec::with_capacity(r.entries.len());
    for (mut e, how) in r.entries {
        e.seq = message.seq;
        let k = inbox::keep(c, now, &e).await?;
        events::write(c, now, &delivered(&e, how, &k, &r.correlation_id, &message)).await?;
        kept.push(k);
    }
    if let Some(broadcast) = &r.emergency {
        let members: Vec<String> = names.into_iter().skip(1).collect();
        acks::owe(c, broadcast, &message.thread, message.seq, &members).await?;
        events::write(c, now, &emergency(broadcast, &message, &members)).await?;
    }
    Ok(Routed { message, kept, participants })
}

impl Pg {
    pub async fn ask(&self, t: Option<NewThread>, messages: Vec<NewMessage>, x: NewExchange) -> DbResult<Asked> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let asked = ask(&tx, now_ms(), t, messages, x, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(asked)
    }

    pub async fn create_thread_with_message(&self, t: NewThread, m: NewMessage) -> DbResult<(Thread, Message)> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let made = create_with_message(&tx, now_ms(), t, m, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(made)
    }

    pub async fn create_thread_with_messages(
        &self,
        t: NewThread,
        messages: Vec<NewMessage>,
    ) -> DbResult<(Thread, Vec<Message>)> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let made = create_with_messages(&tx, now_ms(), t, messages, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(made)
    }

    pub async fn import_thread(
        &self,
        t: NewThread,
        created_at: i64,
        messages: Vec<(i64, NewMessage)>,
    ) -> DbResult<Thread> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let thread = import(&tx, now_ms(), t, created_at, messages, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(thread)
    }

    pub async fn route(&self, r: Routing) -> DbResult<Routed> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let routed = route(&tx, now_ms(), r, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(routed)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use kd_proto::types::{MessageKind, Overflow, Role, RouteType};
    use serde_json::json;

    use super::*;
    use crate::db::exchanges::{Kind, StepKey};
    use crate::db::inbox::Entry;
    use crate::db::pg::exchanges::tests::{db, pg_events};

    pub(crate) fn note(thread: &str, body: &str) -> NewMessage {
        NewMessage::new(thread, "kd", vec!["king".into()], MessageKind::System, body.into())
    }

    pub(crate) fn question(thread: &str) -> NewMessage {
        NewMessage::new(thread, "king", vec!["all".into()], MessageKind::King, "What now?".into())
    }

    pub(crate) fn council() -> NewExchange {
        NewExchange {
            path: None,
            thread: String::new(),
            seq: 0,
            kind: Kind::Council,
            correlation_id: None,
            plan: json!({"rounds": 1}),
            first_steps: vec![StepKey::answer(1, "claude"), StepKey::answer(1, "codex")],
        }
    }

    pub(crate) fn new_thread(id: &str) -> NewThread {
        NewThread { id: Some(id.into()), ..NewThread::in_workspace(&format!("/w/{id}")) }
    }

    pub(crate) fn routing(thread: &str, emergency: bool) -> Routing {
        let entry = |member: &str, role: Role| {
            (
                Entry {
                    thread: thread.into(),
                    member: member.into(),
                    seq: 0,
                    from: "claude".into(),
                    route: RouteType::Multicast,
                    role,
                    limit: 1,
                    overflow: Overflow::DropOldest,
                    correlation_id: "c-9".into(),
                },
                "queued",
            )
        };
        Routing {
            message: Carrier::New(NewMessage {
                cc: vec!["gemini".into()],
                route: Some(RouteType::Multicast),
                ..NewMessage::new(thread, "claude", vec!["codex".into()], MessageKind::Agent, "look".into())
            }),
            route: RouteType::Multicast,
            entries: vec![entry("codex", Role::To), entry("gemini", Role::Cc)],
            emergency: emergency.then(|| "b-1".to_string()),
            correlation_id: "c-9".into(),
        }
    }

    pub(crate) async fn on_postgres(c: &impl GenericClient) -> DbResult<Vec<String>> {
        let mut out = Outbox::default();
        let mut got = vec![];
        let asked = ask(c, 20, None, vec![note("t1", "context"), question("t1")], council(), &mut out).await?;
        got.push(format!("{asked:?}"));
        let asked = ask(c, 21, Some(new_thread("t2")), vec![question("")], council(), &mut out).await?;
        got.push(format!("{asked:?}"));
        let asked = ask(c, 22, None, vec![question("t1")], council(), &mut out).await?;
        got.push(format!("{asked:?}"));
        got.push(format!("{:?}", create_with_message(c, 23, new_thread("t3"), note("", "hi"), &mut out).await?));
        let imported = vec![(5, question("")), (6, note("", "an old answer"))];
        let t = NewThread { origin: Some("kingdom:/x".into()), ..new_thread("t4") };
        got.push(format!("{:?}", import(c, 24, t.clone(), 4, imported.clone(), &mut out).await?));
        got.push(format!("{:?}", import(c, 25, t, 4, imported, &mut out).await));
        got.push(format!("{:?}", route(c, 26, routing("t1", false), &mut out).await?));
        got.push(format!("{:?}", route(c, 27, routing("t1", true), &mut out).await?));
        got.push(format!("{:?}", out.events));
        got.push(format!("{}", out.threads_added));
        got.push(format!("{:?}", pg_events(c).await));
        Ok(got)
    }

    #[tokio::test]
    async fn a_question_refused_leaves_no_thread_and_no_journal() {
        let Some((pg, _db)) = db().await else { return };
        // The thread's id is taken: nothing of the question is written.
        let refused = pg.ask(Some(new_thread("t1")), vec![question("")], council()).await;
        assert!(refused.is_err(), "{refused:?}");
        let c = pg.conn().await.unwrap();
        let counts: (i64, i64, i64) = {
            let r = c
                .query_one(
                    "SELECT (SELECT count(*) FROM threads), (SELECT count(*) FROM messages), \
                     (SELECT count(*) FROM exchanges)",
                    &[],
                )
                .await
                .unwrap();
            (r.get(0), r.get(1), r.get(2))
        };
        assert_eq!(counts, (1, 0, 0));
        let asked = pg.ask(Some(new_thread("t2")), vec![question("")], council()).await.unwrap();
        assert_eq!((asked.message.seq, asked.steps.len()), (1, 2));
        assert_eq!(pg.thread_count(), 1, "the new thread is counted (t1 was made behind its back)");
    }
}
