//! `exchange.get`'s read of the journal on PostgreSQL (see
//! [`crate::db::exchanges::info`]).

use deadpool_postgres::GenericClient;
use kd_proto::types::ExchangeInfo;

use super::{EXCHANGE, exchange, steps};
use crate::db::DbResult;
use crate::db::exchanges::info::wire;
use crate::db::pg::Pg;

/// The exchange begun by message `seq` of `thread` — the council or work
/// one when that message began several, else the newest — with its steps.
pub(crate) async fn info(c: &impl GenericClient, thread: &str, seq: u64) -> DbResult<Option<ExchangeInfo>> {
    let st = c
        .prepare_cached(&format!(
            "SELECT {EXCHANGE} FROM exchanges WHERE thread_id = $1 AND seq = $2 \
             ORDER BY (kind = 'council' OR kind = 'work') DESC, id DESC LIMIT 1"
        ))
        .await?;
    let Some(row) = c.query_opt(&st, &[&thread, &(seq as i64)]).await? else {
        return Ok(None);
    };
    let x = exchange(&row)?;
    let steps = steps(c, x.id).await?;
    Ok(Some(wire(x, steps)))
}

impl Pg {
    /// `exchange.get`: see [`info`].
    pub async fn exchange_info(&self, thread: String, seq: u64) -> DbResult<Option<ExchangeInfo>> {
        info(&self.conn().await?, &thread, seq).await
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::{ExchangeKind, ExchangeState as WireState, StepState as WireStep};
    use serde_json::json;

    use super::super::tests::db;
    use super::super::{
        Kind, NewExchange, Opened, Purpose, RunEnd, StepKey, begin, open_step, plan_done, step_finished, step_started,
    };
    use super::*;

    fn key(round: u32, member: &str, purpose: Purpose) -> StepKey {
        StepKey { round, member: member.into(), purpose, cause: 0 }
    }

    fn new(seq: u64, kind: Kind, members: &[&str]) -> NewExchange {
        NewExchange {
            path: None,
            thread: "t1".into(),
            seq,
            kind,
            correlation_id: None,
            plan: json!({"mode": "broadcast", "rounds": 2}),
            first_steps: members.iter().map(|m| key(1, m, Purpose::Answer)).collect(),
        }
    }

    #[tokio::test]
    async fn the_exchange_a_message_began_is_read_with_its_steps() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        assert_eq!(info(&c, "t1", 1).await.unwrap(), None, "no exchange yet");
        let x = begin(&c, 10, &new(1, Kind::Council, &["claude", "codex"])).await.unwrap();
        let Opened::Step(s) = open_step(&c, 11, x.id, &key(1, "claude", Purpose::Answer)).await.unwrap() else {
            panic!("the exchange is open")
        };
        assert!(step_started(&c, 12, s.id, "r-1", Some(1)).await.unwrap());
        step_finished(&c, 13, "r-1", &RunEnd::Done { seq: 2 }).await.unwrap();

        let got = pg.exchange_info("t1".into(), 1).await.unwrap().expect("the exchange of message 1");
        assert_eq!(
            (got.thread.as_str(), got.seq, got.kind, got.state),
            ("t1", 1, ExchangeKind::Council, WireState::Open)
        );
        assert_eq!(got.rounds, Some(2));
        let steps: Vec<_> = got
            .steps
            .iter()
            .map(|s| (s.member.as_str(), s.state, s.run.as_deref(), s.message_seq, s.attempts))
            .collect();
        assert_eq!(
            steps,
            [("claude", WireStep::Done, Some("r-1"), Some(2), 1), ("codex", WireStep::Pending, None, None, 0)]
        );
        assert_eq!(info(&c, "t1", 2).await.unwrap(), None, "message 2 began none");
        assert_eq!(info(&c, "t2", 1).await.unwrap(), None, "another thread's");
    }

    #[tokio::test]
    async fn of_several_exchanges_a_message_began_the_council_one_is_read() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        begin(&c, 10, &new(1, Kind::Council, &["claude"])).await.unwrap();
        begin(&c, 11, &new(1, Kind::Route, &["codex"])).await.unwrap();
        let got = info(&c, "t1", 1).await.unwrap().unwrap();
        assert_eq!((got.kind, got.steps.len(), got.steps[0].member.as_str()), (ExchangeKind::Council, 1, "claude"));
        // A later King message supersedes it: stopped, with why.
        begin(&c, 12, &new(3, Kind::Council, &["claude"])).await.unwrap();
        let got = info(&c, "t1", 1).await.unwrap().unwrap();
        assert_eq!(got.state, WireState::Stopped);
        assert!(got.reason.is_some_and(|r| r.contains("superseded")));
        assert_eq!(got.steps[0].state, WireStep::Cancelled);
    }

    #[tokio::test]
    async fn a_done_completion_carries_its_result() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let x = begin(&c, 10, &new(1, Kind::Completion, &[])).await.unwrap();
        let result = json!({
            "id": "c-1", "thread": "t1", "seq": 1, "wait": "all", "aggregation": "none", "parts": [],
            "summary": {"total": 0, "completed": 0, "errors": 0, "timeouts": 0, "cancelled": 0, "cost_usd": 0.0}
        });
        plan_done(&c, 20, x.id, Some(&result)).await.unwrap();
        let got = info(&c, "t1", 1).await.unwrap().unwrap();
        assert_eq!(got.state, WireState::Done);
        assert_eq!(got.result.map(|c| c.id), Some("c-1".to_string()));
    }
}
