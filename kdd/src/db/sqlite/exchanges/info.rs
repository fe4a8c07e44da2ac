//! The SQLite side of [`crate::db::exchanges::info`]: its SQL and the engine's operations.

use kd_proto::types::ExchangeInfo;
use rusqlite::{Connection, OptionalExtension, params};

use super::{EXCHANGE, exchange, steps};
use crate::db::DbResult;
use crate::db::exchanges::info::wire;

/// The exchange begun by message `seq` of `thread` — the council or work
/// one when that message began several, else the newest — with its steps.
pub fn info(conn: &Connection, thread: &str, seq: u64) -> DbResult<Option<ExchangeInfo>> {
    let Some(x) = conn
        .prepare_cached(&format!(
            "SELECT {EXCHANGE} FROM exchanges WHERE thread_id = ?1 AND seq = ?2 \
             ORDER BY (kind = 'council' OR kind = 'work') DESC, id DESC LIMIT 1"
        ))?
        .query_row(params![thread, seq as i64], exchange)
        .optional()?
    else {
        return Ok(None);
    };
    let steps = steps(conn, x.id)?;
    Ok(Some(wire(x, steps)))
}

impl crate::db::sqlite::Sqlite {
    /// `exchange.get`: see [`info`].
    pub async fn exchange_info(&self, thread: String, seq: u64) -> DbResult<Option<ExchangeInfo>> {
        self.read(move |c| info(c, &thread, seq)).await
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::{ExchangeKind, ExchangeState as WireState, StepState as WireStep};
    use serde_json::json;

    use super::super::{
        NewExchange, Opened, RunEnd, StepKey, begin, open_step, plan_done, step_finished, step_started,
    };
    use super::*;
    use crate::db::exchanges::{Kind, Purpose};

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

    #[test]
    fn the_exchange_a_message_began_is_read_with_its_steps() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        assert_eq!(info(&conn, "t1", 1).unwrap(), None, "no exchange yet");
        let x = begin(&conn, 10, &new(1, Kind::Council, &["claude", "codex"])).unwrap();
        let Opened::Step(s) = open_step(&conn, 11, x.id, &key(1, "claude", Purpose::Answer)).unwrap() else {
            panic!("the exchange is open")
        };
        assert!(step_started(&conn, 12, s.id, "r-1", Some(1)).unwrap());
        step_finished(&conn, 13, "r-1", &RunEnd::Done { seq: 2 }).unwrap();

        let got = info(&conn, "t1", 1).unwrap().expect("the exchange of message 1");
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
        assert_eq!(info(&conn, "t1", 2).unwrap(), None, "message 2 began none");
        assert_eq!(info(&conn, "t2", 1).unwrap(), None, "another thread's");
    }

    #[test]
    fn of_several_exchanges_a_message_began_the_council_one_is_read() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let council = begin(&conn, 10, &new(1, Kind::Council, &["claude"])).unwrap();
        begin(&conn, 11, &new(1, Kind::Route, &["codex"])).unwrap();
        let got = info(&conn, "t1", 1).unwrap().unwrap();
        assert_eq!((got.kind, got.steps.len(), got.steps[0].member.as_str()), (ExchangeKind::Council, 1, "claude"));
        // A later King message supersedes it: stopped, with why.
        begin(&conn, 12, &new(3, Kind::Council, &["claude"])).unwrap();
        let got = info(&conn, "t1", 1).unwrap().unwrap();
        assert_eq!(got.state, WireState::Stopped);
        assert!(got.reason.is_some_and(|r| r.contains("superseded")));
        assert_eq!(got.steps[0].state, WireStep::Cancelled);
        let _ = council;
    }

    #[test]
    fn a_done_completion_carries_its_result() {
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let x = begin(&conn, 10, &new(1, Kind::Completion, &[])).unwrap();
        let result = json!({
            "id": "c-1", "thread": "t1", "seq": 1, "wait": "all", "aggregation": "none", "parts": [],
            "summary": {"total": 0, "completed": 0, "errors": 0, "timeouts": 0, "cancelled": 0, "cost_usd": 0.0}
        });
        plan_done(&conn, 20, x.id, Some(&result)).unwrap();
        let got = info(&conn, "t1", 1).unwrap().unwrap();
        assert_eq!(got.state, WireState::Done);
        assert_eq!(got.result.map(|c| c.id), Some("c-1".to_string()));
    }
}
