//! The SQLite side of [`crate::db::exchanges::kd_step`]: its SQL and the engine's operations.

use kd_proto::types::Message;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::{get, open_step, settle};
use crate::db::events::Record;
use crate::db::exchanges::kd_step::{EventsOf, Fix, KdStep, fixing};
use crate::db::exchanges::no_exchange;
use crate::db::exchanges::{Exchange, ExchangeId, Kind, Opened, Purpose, Step, StepId, StepKey, StepState};
use crate::db::messages::NewMessage;
use crate::db::sqlite::Sqlite;
use crate::db::sqlite::{events, messages};
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Takes kd's own step `key` of exchange `x`: unless it is done, writes
/// `m` and the events made from it, and marks the step done with the
/// message — all in the caller's transaction.
pub fn kd_step(
    conn: &Connection,
    now: i64,
    x: ExchangeId,
    key: &StepKey,
    m: NewMessage,
    events: impl FnOnce(&Message) -> Vec<Record>,
    out: &mut Outbox,
) -> DbResult<KdStep> {
    let step = match open_step(conn, now, x, key)? {
        Opened::Step(s) => s,
        Opened::Ended(state) => return Ok(KdStep::Ended(state)),
    };
    if step.state == StepState::Done {
        let thread = m.thread.clone();
        let seq = step.message_seq.unwrap_or(0);
        return messages::one(conn, &thread, seq)?
            .map(KdStep::Already)
            .ok_or_else(|| DbError::Internal(format!("kd's step {} lost its message {seq}", step.id)));
    }
    if step.state != StepState::Pending {
        return Err(DbError::Invalid(format!("kd's step {} is {}", step.id, step.state.as_str())));
    }
    let written = messages::append(conn, now, m, out)?;
    for e in events(&written) {
        events::write(conn, now, &e)?;
    }
    conn.prepare_cached(
        "UPDATE exchange_steps SET state = 'done', message_seq = ?2, attempts = attempts + 1, updated_at = ?3 \
         WHERE id = ?1 AND state = 'pending'",
    )?
    .execute(params![step.id, written.seq as i64, now])?;
    settle(conn, now, x)?;
    Ok(KdStep::Written(written))
}

/// Fixes choice `name` of exchange `x`'s plan to `value` unless it was
/// fixed before (null is not fixed); the choice as it stands (the first
/// write wins).
pub fn fix(conn: &Connection, now: i64, x: ExchangeId, name: &str, value: Value) -> DbResult<Value> {
    let ex = get(conn, x)?.ok_or_else(|| no_exchange(x))?;
    let text = match fixing(x, ex.plan, name, &value)? {
        Fix::Fixed(fixed) => return Ok(fixed),
        Fix::Write(text) => text,
    };
    conn.prepare_cached("UPDATE exchanges SET plan = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![x, text, now])?;
    Ok(value)
}

/// Cancels the pending steps of `x` for `purpose` (the other answers once
/// the first is taken); how many.
pub fn cancel_pending(conn: &Connection, now: i64, x: ExchangeId, purpose: Purpose, reason: &str) -> DbResult<usize> {
    let n = conn
        .prepare_cached(
            "UPDATE exchange_steps SET state = 'cancelled', reason = ?3, updated_at = ?4 \
             WHERE exchange_id = ?1 AND purpose = ?2 AND state = 'pending'",
        )?
        .execute(params![x, purpose.as_str(), reason, now])?;
    settle(conn, now, x)?;
    Ok(n)
}

/// Cancels pending step `step` (its member cannot be asked).
pub fn cancel_step(conn: &Connection, now: i64, step: StepId, reason: &str) -> DbResult<()> {
    let x: Option<ExchangeId> = conn
        .prepare_cached("SELECT exchange_id FROM exchange_steps WHERE id = ?1")?
        .query_row(params![step], |r| r.get(0))
        .optional()?;
    conn.prepare_cached(
        "UPDATE exchange_steps SET state = 'cancelled', reason = ?2, updated_at = ?3 WHERE id = ?1 AND state = 'pending'",
    )?
    .execute(params![step, reason, now])?;
    match x {
        Some(x) => settle(conn, now, x),
        None => Ok(()),
    }
}

/// The exchange of `thread` its client named `id` (a completion's id).
pub fn by_correlation(conn: &Connection, thread: &str, id: &str) -> DbResult<Option<Exchange>> {
    let x: Option<ExchangeId> = conn
        .prepare_cached("SELECT id FROM exchanges WHERE thread_id = ?1 AND correlation_id = ?2 ORDER BY id DESC")?
        .query_row(params![thread, id], |r| r.get(0))
        .optional()?;
    match x {
        Some(x) => get(conn, x),
        None => Ok(None),
    }
}

/// The exchange of `kind` that message `seq` of `thread` began.
pub fn at(conn: &Connection, thread: &str, seq: u64, kind: Kind) -> DbResult<Option<ExchangeId>> {
    Ok(conn
        .prepare_cached("SELECT id FROM exchanges WHERE thread_id = ?1 AND seq = ?2 AND kind = ?3 ORDER BY id DESC")?
        .query_row(params![thread, seq as i64, kind.as_str()], |r| r.get(0))
        .optional()?)
}

/// Every step of `x` with the message its run (or kd) wrote last for it:
/// the answer, the error, or what a cancelled run had said.
pub fn steps_with_messages(conn: &Connection, x: ExchangeId) -> DbResult<Vec<(Step, Option<Message>)>> {
    let Some(ex) = get(conn, x)? else { return Ok(vec![]) };
    let mut out = Vec::new();
    for s in super::steps(conn, x)? {
        let seq = match s.message_seq {
            Some(seq) => Some(seq),
            None => match &s.run_id {
                Some(run) => conn
                    .prepare_cached("SELECT message_seq FROM runs WHERE id = ?1")?
                    .query_row(params![run], |r| r.get::<_, Option<i64>>(0))
                    .optional()?
                    .flatten()
                    .map(|s| s as u64),
                None => None,
            },
        };
        let m = match seq {
            Some(seq) => messages::one(conn, &ex.thread, seq)?,
            None => None,
        };
        out.push((s, m));
    }
    Ok(out)
}

impl Sqlite {
    pub async fn kd_step(&self, x: ExchangeId, key: StepKey, m: NewMessage, events: EventsOf) -> DbResult<KdStep> {
        self.write(move |c, out| kd_step(c, now_ms(), x, &key, m, events, out)).await
    }

    pub async fn cancel_step(&self, step: StepId, reason: String) -> DbResult<()> {
        self.write(move |c, _| cancel_step(c, now_ms(), step, &reason)).await
    }

    pub async fn fix_choice(&self, x: ExchangeId, name: &'static str, value: Value) -> DbResult<Value> {
        self.write(move |c, _| fix(c, now_ms(), x, name, value)).await
    }

    pub async fn cancel_pending_steps(&self, x: ExchangeId, purpose: Purpose, reason: String) -> DbResult<usize> {
        self.write(move |c, _| cancel_pending(c, now_ms(), x, purpose, &reason)).await
    }

    pub async fn exchange_by_correlation(&self, thread: String, id: String) -> DbResult<Option<Exchange>> {
        self.read(move |c| by_correlation(c, &thread, &id)).await
    }

    pub async fn exchange_at(&self, thread: String, seq: u64, kind: Kind) -> DbResult<Option<ExchangeId>> {
        self.read(move |c| at(c, &thread, seq, kind)).await
    }

    pub async fn steps_with_messages(&self, x: ExchangeId) -> DbResult<Vec<(Step, Option<Message>)>> {
        self.read(move |c| steps_with_messages(c, x)).await
    }
}

#[cfg(test)]
mod tests {
    use crate::db::exchanges::ExchangeState;
    use kd_proto::types::MessageKind;
    use serde_json::json;

    use super::super::{NewExchange, begin, plan_done, steps, stop};
    use super::*;

    fn completion(conn: &Connection) -> Exchange {
        let x = NewExchange {
            path: None,
            thread: "t1".into(),
            seq: 1,
            kind: Kind::Completion,
            correlation_id: Some("c-1".into()),
            plan: json!({"members": ["a", "b"]}),
            first_steps: vec![StepKey::answer(1, "a"), StepKey::answer(1, "b")],
        };
        begin(conn, 10, &x).unwrap()
    }

    fn tally() -> StepKey {
        StepKey { round: 1, member: String::new(), purpose: Purpose::Tally, cause: 0 }
    }

    fn note(body: &str) -> NewMessage {
        NewMessage::new("t1", "kd", vec!["king".into()], MessageKind::System, body.into())
    }

    #[test]
    fn a_kd_step_is_written_once_with_its_message_and_read_back_after() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let x = completion(&conn);
        let mut out = Outbox::default();
        let first = kd_step(&conn, 20, x.id, &tally(), note("Vote: a wins."), |_| vec![], &mut out).unwrap();
        let KdStep::Written(m) = first else { panic!("{first:?}") };
        let again = kd_step(&conn, 30, x.id, &tally(), note("Vote: b wins."), |_| vec![], &mut out).unwrap();
        assert_eq!(again, KdStep::Already(m.clone()), "the second write reads the first back");
        let page = crate::db::messages::Page::all_after(0);
        let tallies = messages::list(&conn, "t1", page).unwrap().into_iter().filter(|m| m.from == "kd").count();
        assert_eq!(tallies, 1);
        let s = steps(&conn, x.id).unwrap().into_iter().find(|s| s.key == tally()).unwrap();
        assert_eq!((s.state, s.message_seq), (StepState::Done, Some(m.seq)));
        // A stopped exchange takes no more of kd's steps.
        stop(&conn, 40, x.id, "cancelled").unwrap();
        let merge = StepKey { purpose: Purpose::Merge, ..tally() };
        let ended = kd_step(&conn, 50, x.id, &merge, note("merged"), |_| vec![], &mut out).unwrap();
        assert_eq!(ended, KdStep::Ended(ExchangeState::Stopped));
    }

    #[test]
    fn a_choice_is_fixed_by_its_first_write() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let x = completion(&conn);
        assert_eq!(fix(&conn, 20, x.id, "labels", json!(["b", "a"])).unwrap(), json!(["b", "a"]));
        assert_eq!(fix(&conn, 30, x.id, "labels", json!(["a", "b"])).unwrap(), json!(["b", "a"]));
        let plan = get(&conn, x.id).unwrap().unwrap().plan;
        assert_eq!(plan, json!({"members": ["a", "b"], "labels": ["b", "a"]}), "the rest of the plan is kept");
    }

    #[test]
    fn pending_steps_cancelled_let_the_exchange_settle() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let x = completion(&conn);
        plan_done(&conn, 20, x.id, Some(&json!({"done": true}))).unwrap();
        assert_eq!(get(&conn, x.id).unwrap().unwrap().state, ExchangeState::Open);
        assert_eq!(cancel_pending(&conn, 30, x.id, Purpose::Answer, "first answer taken").unwrap(), 2);
        let ex = get(&conn, x.id).unwrap().unwrap();
        assert_eq!((ex.state, ex.result), (ExchangeState::Done, Some(json!({"done": true}))));
        assert_eq!(by_correlation(&conn, "t1", "c-1").unwrap().map(|e| e.id), Some(x.id));
        assert_eq!(by_correlation(&conn, "t1", "c-2").unwrap(), None);
        assert_eq!(at(&conn, "t1", 1, Kind::Completion).unwrap(), Some(x.id));
        assert_eq!(at(&conn, "t1", 1, Kind::Work).unwrap(), None);
        let with = steps_with_messages(&conn, x.id).unwrap();
        assert!(with.iter().all(|(s, m)| s.state == StepState::Cancelled && m.is_none()), "{with:?}");
    }
}
