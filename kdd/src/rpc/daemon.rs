//! `daemon.*` and `rpc.discover`: who this daemon is, how it is, stopping it,
//! and the checks behind `kd doctor`.

use std::sync::atomic::Ordering;

use kd_proto::types::*;
use kd_proto::{PROTOCOL_VERSION, RpcResult, VERSION};

use super::{CAPABILITIES, validate};
use crate::state::Daemon;

pub async fn hello(d: &Daemon) -> RpcResult<Hello> {
    Ok(Hello {
        protocol: PROTOCOL_VERSION,
        version: VERSION.to_string(),
        capabilities: CAPABILITIES.iter().map(|c| c.to_string()).collect(),
        pid: std::process::id(),
        max_request_bytes: Some(d.max_request_bytes),
    })
}

pub async fn status(d: &Daemon) -> RpcResult<DaemonStatus> {
    Ok(DaemonStatus {
        version: VERSION.to_string(),
        protocol: PROTOCOL_VERSION,
        pid: std::process::id(),
        uptime_ms: d.started.elapsed().as_millis() as u64,
        socket: d.socket.display().to_string(),
        db: d.db.location(),
        engine: d.db.engine().to_string(),
        node: d.db.node().id.clone(),
        nodes: d.db.nodes().await.unwrap_or_else(|e| {
            tracing::warn!("cannot list the registry's nodes: {e}");
            Vec::new()
        }),
        schema_version: d.db.schema_version(),
        threads: d.db.thread_count(),
        runs_in_flight: d.agents.runs.count() as u64,
        clients: d.open_connections(),
        subscriptions: d.hub.subscription_count(),
        log_lines_dropped: crate::log::dropped_lines(),
        socket_activated: crate::service::socket_activated(),
    })
}

pub async fn shutdown(d: &Daemon, resume: Option<bool>) -> RpcResult<ShutdownAck> {
    let resume = resume.unwrap_or(true);
    tracing::info!(resume, "shutdown requested over RPC");
    if !resume {
        // Before the token: whoever sees the shutdown sees the flag too.
        d.no_resume.store(true, Ordering::SeqCst);
    }
    let runs = d.agents.runs.count() as u64;
    d.shutdown.cancel();
    Ok(ShutdownAck { stopping: true, runs_cancelled: runs })
}

pub async fn doctor(d: &Daemon, workspace: String, path: Option<String>) -> RpcResult<Vec<Check>> {
    validate::workspace(&workspace)?;
    validate::search_path(path.as_deref())?;
    Ok(crate::doctor::run(&d.db, std::path::Path::new(&workspace), path.as_deref()).await)
}

pub async fn discover() -> RpcResult<serde_json::Value> {
    Ok(kd_proto::openrpc::document().clone())
}
