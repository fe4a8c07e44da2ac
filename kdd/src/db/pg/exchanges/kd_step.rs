//! kd's own steps and a plan's choices, on PostgreSQL (see
//! [`crate::db::exchanges::kd_step`]): a step kd takes itself is written
//! with its message and events in one transaction, only if it was not done
//! yet; a choice is fixed by its first write; and what a completion's
//! driver reads back.

use deadpool_postgres::GenericClient;
use kd_proto::types::Message;
use serde_json::Value;

use super::{
    Exchange, ExchangeId, Kind, Opened, Purpose, Step, StepId, StepKey, StepState, get, lock_thread, locked, open_step,
    settle,
};
use crate::db::events::Record;
use crate::db::exchanges::kd_step::{EventsOf, Fix, KdStep, fixing};
use crate::db::exchanges::no_exchange;
use crate::db::messages::NewMessage;
use crate::db::pg::{Pg, events, messages};
use crate::db::{DbError, DbResult, Outbox, now_ms};

/// Takes kd's own step `key` of exchange `x`: unless it is done, writes
/// `m` and the events made from it, and marks the step done with the
/// message — all in the caller's transaction.
pub(crate) async fn kd_step(
    c: &impl GenericClient,
    now: i64,
    x: ExchangeId,
    key: &StepKey,
    m: NewMessage,
    events: impl FnOnce(&Message) -> Vec<Record>,
    out: &mut Outbox,
) -> DbResult<KdStep> {
    // The thread first, as its append would: the lock order.
    lock_thread(c, &m.thread).await?;
    let step = match open_step(c, now, x, key).await? {
        Opened::Step(s) => s,
        Opened::Ended(state) => return Ok(KdStep::Ended(state)),
    };
    if step.state == StepState::Done {
        let seq = step.message_seq.unwrap_or(0);
        return messages::one(c, &m.thread, seq)
            .await?
            .map(KdStep::Already)
            .ok_or_else(|| DbError::Internal(format!("kd's step {} lost its message {seq}", step.id)));
    }
    if step.state != StepState::Pending {
        return Err(DbError::Invalid(format!("kd's step {} is {}", step.id, step.state.as_str())));
    }
    let written = messages::append(c, now, m, out).await?;
    for e in events(&written) {
        events::write(c, now, &e).await?;
    }
    let st = c
        .prepare_cached(
            "UPDATE exchange_steps SET state = 'done', message_seq = $2, attempts = attempts + 1, updated_at = $3 \
             WHERE id = $1 AND state = 'pending'",
        )
        .await?;
    c.execute(&st, &[&step.id, &(written.seq as i64), &now]).await?;
    settle(c, now, x).await?;
    Ok(KdStep::Written(written))
}

/// Fixes choice `name` of exchange `x`'s plan to `value` unless it was
/// fixed before (null is not fixed); the choice as it stands (the first
/// write wins: the plan is read under its row's lock).
pub(crate) async fn fix(c: &impl GenericClient, now: i64, x: ExchangeId, name: &str, value: Value) -> DbResult<Value> {
    let ex = locked(c, x).await?.ok_or_else(|| no_exchange(x))?;
    let text = match fixing(x, ex.plan, name, &value)? {
        Fix::Fixed(fixed) => return Ok(fixed),
        Fix::Write(text) => text,
    };
    let st = c.prepare_cached("UPDATE exchanges SET plan = $2, updated_at = $3 WHERE id = $1").await?;
    c.execute(&st, &[&x, &text, &now]).await?;
    Ok(value)
}

/// Cancels the pending steps of `x` for `purpose` (the other answers once
/// the first is taken); how many.
pub(crate) async fn cancel_pending(
    c: &impl GenericClient,
    now: i64,
    x: ExchangeId,
    purpose: Purpose,
    reason: &str,
) -> DbResult<usize> {
    locked(c, x).await?;
    let st = c
        .prepare_cached(
            "UPDATE exchange_steps SET state = 'cancelled', reason = $3, updated_at = $4 \
             WHERE exchange_id = $1 AND purpose = $2 AND state = 'pending'",
        )
        .await?;
    let n = c.execute(&st, &[&x, &purpose.as_str(), &reason, &now]).await?;
    settle(c, now, x).await?;
    Ok(n as usize)
}

/// Cancels pending step `step` (its member cannot be asked).
pub(crate) async fn cancel_step(c: &impl GenericClient, now: i64, step: StepId, reason: &str) -> DbResult<()> {
    let st = c.prepare_cached("SELECT exchange_id FROM exchange_steps WHERE id = $1").await?;
    let x: Option<ExchangeId> = match c.query_opt(&st, &[&step]).await? {
        Some(row) => Some(row.try_get(0)?),
        None => None,
    };
    if let Some(x) = x {
        locked(c, x).await?;
    }
    let st = c
        .prepare_cached(
            "UPDATE exchange_steps SET state = 'cancelled', reason = $2, updated_at = $3 WHERE id = $1 AND state = 'pending'",
        )
        .await?;
    c.execute(&st, &[&step, &reason, &now]).await?;
    match x {
        Some(x) => settle(c, now, x).await,
        None => Ok(()),
    }
}

/// The exchange of `thread` its client named `id` (a completion's id).
pub(crate) async fn by_correlation(c: &impl GenericClient, thread: &str, id: &str) -> DbResult<Option<Exchange>> {
    let st = c
        .prepare_cached(
            "SELECT id FROM exchanges WHERE thread_id = $1 AND correlation_id = $2 ORDER BY id DESC LIMIT 1",
        )
        .await?;
    match c.query_opt(&st, &[&thread, &id]).await? {
        Some(row) => get(c, row.try_get(0)?).await,
        None => Ok(None),
    }
}

/// The exchange of `kind` that message `seq` of `thread` began.
pub(crate) async fn at(c: &impl GenericClient, thread: &str, seq: u64, kind: Kind) -> DbResult<Option<ExchangeId>> {
    let st = c
        .prepare_cached(
            "SELECT id FROM exchanges WHERE thread_id = $1 AND seq = $2 AND kind = $3 ORDER BY id DESC LIMIT 1",
        )
        .await?;
    match c.query_opt(&st, &[&thread, &(seq as i64), &kind.as_str()]).await? {
        Some(row) => Ok(Some(row.try_get(0)?)),
        None => Ok(None),
    }
}

/// Every step of `x` with the message its run (or kd) wrote last for it:
/// the answer, the error, or what a cancelled run had said.
pub(crate) async fn steps_with_messages(
    c: &impl GenericClient,
    x: ExchangeId,
) -> DbResult<Vec<(Step, Option<Message>)>> {
    let Some(ex) = get(c, x).await? else { return Ok(vec![]) };
    let run_seq = c.prepare_cached("SELECT message_seq FROM runs WHERE id = $1").await?;
    let mut out = Vec::new();
    for s in super::steps(c, x).await? {
        let seq = match s.message_seq {
            Some(seq) => Some(seq),
            None => match &s.run_id {
                Some(run) => match c.query_opt(&run_seq, &[run]).await? {
                    Some(row) => row.try_get::<_, Option<i64>>(0)?.map(|s| s as u64),
                    None => None,
                },
                None => None,
            },
        };
        let m = match seq {
            Some(seq) => messages::one(c, &ex.thread, seq).await?,
            None => None,
        };
        out.push((s, m));
    }
    Ok(out)
}

impl Pg {
    pub async fn kd_step(&self, x: ExchangeId, key: StepKey, m: NewMessage, events: EventsOf) -> DbResult<KdStep> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let mut out = Outbox::default();
        let taken = kd_step(&tx, now_ms(), x, &key, m, events, &mut out).await?;
        self.commit(tx, out).await?;
        Ok(taken)
    }

    pub async fn cancel_step(&self, step: StepId, reason: String) -> DbResult<()> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        cancel_step(&tx, now_ms(), step, &reason).await?;
        self.commit(tx, Outbox::default()).await
    }

    pub async fn fix_choice(&self, x: ExchangeId, name: &'static str, value: Value) -> DbResult<Value> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let fixed = fix(&tx, now_ms(), x, name, value).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(fixed)
    }

    pub async fn cancel_pending_steps(&self, x: ExchangeId, purpose: Purpose, reason: String) -> DbResult<usize> {
        let mut c = self.conn().await?;
        let tx = c.transaction().await?;
        let n = cancel_pending(&tx, now_ms(), x, purpose, &reason).await?;
        self.commit(tx, Outbox::default()).await?;
        Ok(n)
    }

    pub async fn exchange_by_correlation(&self, thread: String, id: String) -> DbResult<Option<Exchange>> {
        by_correlation(&self.conn().await?, &thread, &id).await
    }

    pub async fn exchange_at(&self, thread: String, seq: u64, kind: Kind) -> DbResult<Option<ExchangeId>> {
        at(&self.conn().await?, &thread, seq, kind).await
    }

    pub async fn steps_with_messages(&self, x: ExchangeId) -> DbResult<Vec<(Step, Option<Message>)>> {
        steps_with_messages(&self.conn().await?, x).await
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::MessageKind;
    use serde_json::json;

    use super::super::tests::db;
    use super::super::{ExchangeState, NewExchange, begin, plan_done, steps, stop};
    use super::*;

    async fn completion(c: &impl GenericClient) -> Exchange {
        let x = NewExchange {
            path: None,
            thread: "t1".into(),
            seq: 1,
            kind: Kind::Completion,
            correlation_id: Some("c-1".into()),
            plan: json!({"members": ["a", "b"]}),
            first_steps: vec![StepKey::answer(1, "a"), StepKey::answer(1, "b")],
        };
        begin(c, 10, &x).await.unwrap()
    }

    fn tally() -> StepKey {
        StepKey { round: 1, member: String::new(), purpose: Purpose::Tally, cause: 0 }
    }

    fn note(body: &str) -> NewMessage {
        NewMessage::new("t1", "kd", vec!["king".into()], MessageKind::System, body.into())
    }

    fn told(m: &Message) -> Vec<Record> {
        vec![Record {
            kind: "coord.tally".into(),
            thread: Some(m.thread.clone()),
            data: json!({"seq": m.seq}),
            ..Default::default()
        }]
    }

    #[tokio::test]
    async fn a_kd_step_is_written_once_with_its_message_and_read_back_after() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let x = completion(&c).await;
        let mut out = Outbox::default();
        let first = kd_step(&c, 20, x.id, &tally(), note("Vote: a wins."), told, &mut out).await.unwrap();
        let KdStep::Written(m) = first else { panic!("{first:?}") };
        let again = kd_step(&c, 30, x.id, &tally(), note("Vote: b wins."), told, &mut out).await.unwrap();
        assert_eq!(again, KdStep::Already(m.clone()), "the second write reads the first back");
        let tallies: i64 = c.query_one("SELECT count(*) FROM messages WHERE sender = 'kd'", &[]).await.unwrap().get(0);
        assert_eq!(tallies, 1);
        let events: i64 = c
            .query_one("SELECT count(*) FROM conversation_events WHERE kind = 'coord.tally'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(events, 1, "its events are written with it, once");
        let s = steps(&c, x.id).await.unwrap().into_iter().find(|s| s.key == tally()).unwrap();
        assert_eq!((s.state, s.message_seq), (StepState::Done, Some(m.seq)));
        // A stopped exchange takes no more of kd's steps.
        stop(&c, 40, x.id, "cancelled").await.unwrap();
        let merge = StepKey { purpose: Purpose::Merge, ..tally() };
        let ended = kd_step(&c, 50, x.id, &merge, note("merged"), |_| vec![], &mut out).await.unwrap();
        assert_eq!(ended, KdStep::Ended(ExchangeState::Stopped));
    }

    #[tokio::test]
    async fn a_choice_is_fixed_by_its_first_write() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let x = completion(&c).await;
        assert_eq!(fix(&c, 20, x.id, "labels", json!(["b", "a"])).await.unwrap(), json!(["b", "a"]));
        assert_eq!(fix(&c, 30, x.id, "labels", json!(["a", "b"])).await.unwrap(), json!(["b", "a"]));
        let plan = get(&c, x.id).await.unwrap().unwrap().plan;
        assert_eq!(plan, json!({"members": ["a", "b"], "labels": ["b", "a"]}), "the rest of the plan is kept");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn of_choices_fixed_at_once_the_first_wins_for_all() {
        let Some((pg, _db)) = db().await else { return };
        let pg = std::sync::Arc::new(pg);
        let x = completion(&pg.conn().await.unwrap()).await;
        let tries: Vec<_> = (0..8)
            .map(|i| {
                let pg = pg.clone();
                tokio::spawn(async move { pg.fix_choice(x.id, "labels", json!([i])).await.unwrap() })
            })
            .collect();
        let mut seen = vec![];
        for t in tries {
            seen.push(t.await.unwrap());
        }
        let fixed = pg.exchange(x.id).await.unwrap().plan["labels"].clone();
        assert!(seen.iter().all(|v| *v == fixed), "{seen:?} vs {fixed}");
    }

    #[tokio::test]
    async fn pending_steps_cancelled_let_the_exchange_settle() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let x = completion(&c).await;
        plan_done(&c, 20, x.id, Some(&json!({"done": true}))).await.unwrap();
        assert_eq!(get(&c, x.id).await.unwrap().unwrap().state, ExchangeState::Open);
        assert_eq!(cancel_pending(&c, 30, x.id, Purpose::Answer, "first answer taken").await.unwrap(), 2);
        let ex = get(&c, x.id).await.unwrap().unwrap();
        assert_eq!((ex.state, ex.result), (ExchangeState::Done, Some(json!({"done": true}))));
        assert_eq!(by_correlation(&c, "t1", "c-1").await.unwrap().map(|e| e.id), Some(x.id));
        assert_eq!(by_correlation(&c, "t1", "c-2").await.unwrap(), None);
        assert_eq!(at(&c, "t1", 1, Kind::Completion).await.unwrap(), Some(x.id));
        assert_eq!(at(&c, "t1", 1, Kind::Work).await.unwrap(), None);
        let with = steps_with_messages(&c, x.id).await.unwrap();
        assert!(with.iter().all(|(s, m)| s.state == StepState::Cancelled && m.is_none()), "{with:?}");
    }
}
