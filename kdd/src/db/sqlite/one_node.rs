//! What several nodes ask of a shared registry (PostgreSQL's leases), on
//! SQLite: one file, one kdd — every thread is this node's, nothing is
//! routed here from elsewhere, no node dies while another goes on.

use kd_proto::types::RunInfo;
use serde_json::Value;

use super::Sqlite;
use crate::db::compose::Asked;
use crate::db::exchanges::{Exchange, ExchangeId, NewExchange};
use crate::db::messages::NewMessage;
use crate::db::runs::Cancel;
use crate::db::{DbError, DbResult, now_ms};

impl Sqlite {
    pub async fn thread_node(&self, _id: String) -> DbResult<Option<(String, bool)>> {
        Ok(None)
    }

    pub async fn ask_node(&self, _m: NewMessage, _x: NewExchange, node: String) -> DbResult<Asked> {
        Err(DbError::Invalid(format!("node {node} does not share this registry: a SQLite registry has one node")))
    }

    pub async fn cancel_on_node(&self, node: String, _c: Cancel) -> DbResult<Vec<RunInfo>> {
        Err(DbError::Invalid(format!("node {node} does not share this registry: a SQLite registry has one node")))
    }

    pub async fn reap_dead_nodes(&self) -> DbResult<Vec<(String, usize)>> {
        Ok(Vec::new())
    }

    pub async fn orphan_exchanges(&self) -> DbResult<Vec<(ExchangeId, String)>> {
        Ok(Vec::new())
    }

    pub async fn claim_exchanges(&self, _adopt: Vec<ExchangeId>) -> DbResult<Vec<Exchange>> {
        Ok(Vec::new())
    }

    pub async fn plan_exchange(&self, x: ExchangeId, plan: Value) -> DbResult<bool> {
        let plan = plan.to_string();
        self.write(move |c, _| {
            let n = c.execute(
                "UPDATE exchanges SET plan = ?2, updated_at = ?3 WHERE id = ?1 AND state = 'open' \
                 AND json_extract(plan, '$.routed') IS NOT NULL",
                rusqlite::params![x, plan, now_ms()],
            )?;
            Ok(n == 1)
        })
        .await
    }
}
