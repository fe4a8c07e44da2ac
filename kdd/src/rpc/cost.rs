//! `cost.report`: what the members' answers cost.

use kd_proto::RpcResult;
use kd_proto::types::{CostBy, CostReport};

use super::validate;
use crate::db::cost::Filter;
use crate::state::Daemon;

pub async fn report(
    d: &Daemon,
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
    Ok(d.db.cost_report(f, by.unwrap_or_default()).await?)
}
