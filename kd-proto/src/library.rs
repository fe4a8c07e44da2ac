//! The library's views across threads (`LibraryApiServer`,
//! `LibraryApiClient`): full-text search (`search.query`) and what the
//! answers cost (`cost.report`).

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::RpcResult;

/// One hit of `search.query`: a message, or a thread by its title or summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchHit {
    pub thread: String,
    /// The message found; none for a thread found by its title or summary.
    pub seq: Option<u64>,
    /// Its sender (a message), or `title` / `summary`.
    pub from: String,
    /// The message's time, or the thread's last activity.
    pub at_ms: i64,
    /// Words around the hits, each hit marked «like this».
    pub snippet: String,
    /// FTS5's bm25 rank: lower is better.
    pub rank: f64,
}

/// How `cost.report` groups the answers' cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CostBy {
    #[default]
    Member,
    Thread,
    /// The UTC day the answer was written, `YYYY-MM-DD`.
    Day,
    /// The King's message whose exchange the answer belongs to (one thread).
    Exchange,
    /// The exchange and round, `EXCHANGE/ROUND` (one thread).
    Round,
}

/// What answers cost, as their agents reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Cost {
    /// The member, thread id, day or exchange seq; `total` for the sum.
    pub key: String,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Answers (and failures) of runs counted.
    pub answers: u64,
}

/// Answer to `cost.report`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostReport {
    pub by: CostBy,
    /// Highest cost first.
    pub rows: Vec<Cost>,
    pub total: Cost,
}

#[rpc(server, client)]
pub trait LibraryApi {
    #[method(name = "search.query", param_kind = map)]
    async fn search_query(
        &self,
        query: String,
        thread: Option<String>,
        from: Option<String>,
        since_ms: Option<i64>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<SearchHit>>;

    #[method(name = "cost.report", param_kind = map)]
    async fn cost_report(
        &self,
        thread: Option<String>,
        workspace: Option<String>,
        since_ms: Option<i64>,
        by: Option<CostBy>,
    ) -> RpcResult<CostReport>;
}
