//! `daemon.*` and `rpc.discover`: who this daemon is, how it is, stopping it,
//! and the checks behind `kd doctor`.

use std::sync::atomic::Ordering;

use jsonrpsee::core::async_trait;
use kd_proto::daemon::*;
use kd_proto::{PROTOCOL_VERSION, RpcResult, VERSION};

use super::{Rpc, validate};

/// What this daemon offers beyond the basic protocol.
pub const CAPABILITIES: &[&str] = &[
    "subscriptions",
    "sessions",
    "locks",
    "events",
    "openrpc",
    "routing",
    "queues",
    "completions",
    "emergency",
    "races",
    "exchanges.durable",
];

#[async_trait]
impl DaemonApiServer for Rpc {
    async fn daemon_hello(&self) -> RpcResult<Hello> {
        Ok(Hello {
            protocol: PROTOCOL_VERSION,
            version: VERSION.to_string(),
            capabilities: CAPABILITIES.iter().map(|c| c.to_string()).collect(),
            pid: std::process::id(),
            max_request_bytes: Some(self.d.max_request_bytes),
        })
    }

    async fn daemon_status(&self) -> RpcResult<DaemonStatus> {
        Ok(DaemonStatus {
            version: VERSION.to_string(),
            protocol: PROTOCOL_VERSION,
            pid: std::process::id(),
            uptime_ms: self.d.started.elapsed().as_millis() as u64,
            socket: self.d.socket.display().to_string(),
            db: self.d.db.location(),
            engine: self.d.db.engine().to_string(),
            node: self.d.db.node().id.clone(),
            nodes: self.d.db.nodes().await.unwrap_or_else(|e| {
                tracing::warn!("cannot list the registry's nodes: {e}");
                Vec::new()
            }),
            schema_version: self.d.db.schema_version(),
            threads: self.d.db.thread_count(),
            runs_in_flight: self.d.agents.runs.count() as u64,
            clients: self.d.open_connections(),
            subscriptions: self.d.hub.subscription_count(),
            log_lines_dropped: crate::log::dropped_lines(),
            socket_activated: crate::service::socket_activated(),
        })
    }

    async fn daemon_shutdown(&self, resume: Option<bool>) -> RpcResult<ShutdownAck> {
        let resume = resume.unwrap_or(true);
        tracing::info!(resume, "shutdown requested over RPC");
        if !resume {
            // Before the token: whoever sees the shutdown sees the flag too.
            self.d.no_resume.store(true, Ordering::SeqCst);
        }
        let runs = self.d.agents.runs.count() as u64;
        self.d.shutdown.cancel();
        Ok(ShutdownAck { stopping: true, runs_cancelled: runs })
    }

    async fn daemon_doctor(&self, workspace: String, path: Option<String>) -> RpcResult<Vec<Check>> {
        validate::workspace(&workspace)?;
        validate::search_path(path.as_deref())?;
        Ok(crate::doctor::run(&self.d.db, std::path::Path::new(&workspace), path.as_deref()).await)
    }

    async fn rpc_discover(&self) -> RpcResult<serde_json::Value> {
        Ok(kd_proto::openrpc::document().clone())
    }
}
