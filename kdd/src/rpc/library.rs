//! `cost.report` and `search.query`: the library's views across threads.

use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::library::{CostBy, CostReport, LibraryApiServer, SearchHit};

use super::error::invalid;
use super::{Rpc, validate};
use crate::db::cost::Filter;
use crate::db::search;
use crate::state::Daemon;

#[async_trait]
impl LibraryApiServer for Rpc {
    async fn cost_report(
        &self,
        thread: Option<String>,
        workspace: Option<String>,
        since_ms: Option<i64>,
        by: Option<CostBy>,
    ) -> RpcResult<CostReport> {
        if let Some(t) = &thread {
            validate::thread_id(t)?;
        }
        validate::path("workspace", workspace.as_deref())?;
        let f = Filter { thread, workspace, since_ms };
        Ok(self.d.db.cost_report(f, by.unwrap_or_default()).await?)
    }

    async fn search_query(
        &self,
        query: String,
        thread: Option<String>,
        from: Option<String>,
        since_ms: Option<i64>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<SearchHit>> {
        if let Some(t) = &thread {
            validate::thread_id(t)?;
        }
        validate::label("from", from.as_deref())?;
        search_in(&self.d, query, search::Filter { thread, from, since_ms, limit, workspace: None }).await
    }
}

/// Longest query taken.
const MAX_QUERY_CHARS: usize = 1000;

/// A search whose filter is checked.
pub async fn search_in(d: &Daemon, query: String, f: search::Filter) -> RpcResult<Vec<SearchHit>> {
    if query.trim().is_empty() || query.chars().count() > MAX_QUERY_CHARS {
        return Err(invalid(format!("a search query is 1 to {MAX_QUERY_CHARS} characters")));
    }
    Ok(d.db.search(query, f).await?)
}
