//! The JSON-RPC methods: `KdApiServer` implemented over the daemon's state,
//! one file per domain — [`daemon`], [`threads`], [`council`], [`registry`]
//! (runs, sessions, locks, events), [`exchange`] (the exchange journal), [`coordination`] (routing, queues,
//! completions, emergencies, races), [`member`] (what an agent does as
//! itself by its run's capability) and [`subscribe`] — each a thin adapter:
//! it checks parameter values ([`validate`]) and calls its subsystem; [`error`]
//! turns registry errors into stable error codes. The trait's methods here
//! only delegate.

// Parameter lists are the wire format (see kd_proto::api).
#![allow(clippy::too_many_arguments)]

pub mod check;
pub mod confine;
mod coordination;
mod council;
mod daemon;
pub mod error;
mod exchange;
mod library;
mod member;
mod messages;
pub mod params;
mod registry;
mod subscribe;
mod threads;
pub mod validate;
mod work;

use std::sync::Arc;

use jsonrpsee::core::{SubscriptionResult, async_trait};
use jsonrpsee::server::PendingSubscriptionSink;
use jsonrpsee::{Extensions, Methods, RpcModule};
use kd_proto::types::*;
use kd_proto::{
    DaemonApiServer, KdApiServer, LibraryApiServer, MemberApiServer, MessageApiServer, RegistryApiServer, RpcResult,
    ThreadApiServer, WorkApiServer,
};

use crate::state::Daemon;

/// What every method is served with: the daemon's state. Each domain's
/// file implements its trait on it.
#[derive(Clone)]
pub struct Rpc {
    d: Arc<Daemon>,
}

/// The method table served on every connection: each domain's methods,
/// merged. Their names never clash (a test checks that every documented
/// method is served).
pub fn module(d: Arc<Daemon>) -> RpcModule<()> {
    let rpc = Rpc { d };
    let domains: [(&str, Methods); 8] = [
        ("thread", ThreadApiServer::into_rpc(rpc.clone()).into()),
        ("registry", RegistryApiServer::into_rpc(rpc.clone()).into()),
        ("message", MessageApiServer::into_rpc(rpc.clone()).into()),
        ("library", LibraryApiServer::into_rpc(rpc.clone()).into()),
        ("daemon", DaemonApiServer::into_rpc(rpc.clone()).into()),
        ("King's", KdApiServer::into_rpc(rpc.clone()).into()),
        // member.*: what an agent does as itself, by its run's capability.
        ("member", MemberApiServer::into_rpc(rpc.clone()).into()),
        // work.*: the King's methods on members' work.
        ("work", WorkApiServer::into_rpc(rpc).into()),
    ];
    let mut module = RpcModule::new(());
    for (domain, methods) in domains {
        if let Err(e) = module.merge(methods) {
            tracing::error!("the {domain} methods are not served: {e}");
        }
    }
    module
}

#[async_trait]
impl KdApiServer for Rpc {
    async fn thread_subscribe(
        &self,
        pending: PendingSubscriptionSink,
        ext: &Extensions,
        thread: String,
        since_seq: Option<u64>,
        not_yet_created: Option<bool>,
    ) -> SubscriptionResult {
        let client = ext.get::<crate::client::ClientId>().copied();
        subscribe::run(self.d.clone(), pending, client, thread, since_seq, not_yet_created.unwrap_or(false)).await
    }

    async fn council_send(
        &self,
        ext: &Extensions,
        thread: String,
        body: String,
        to: Option<Vec<String>>,
        mute: Option<Vec<String>>,
        style: Option<Style>,
        timeout_s: Option<u64>,
        correlation_id: Option<String>,
        rounds: Option<u32>,
        new_thread: Option<NewThread>,
    ) -> RpcResult<Sent> {
        council::send(&self.d, ext, thread, body, to, mute, style, timeout_s, correlation_id, rounds, new_thread).await
    }

    async fn council_interrupt(&self, ext: &Extensions, thread: String, all: Option<bool>) -> RpcResult<Interrupted> {
        council::interrupt(&self.d, ext, thread, all).await
    }

    async fn council_retry(
        &self,
        ext: &Extensions,
        thread: String,
        style: Option<Style>,
        timeout_s: Option<u64>,
    ) -> RpcResult<Vec<RunInfo>> {
        council::retry(&self.d, ext, thread, style, timeout_s).await
    }

    async fn config_get(&self, workspace: String) -> RpcResult<ConfigView> {
        council::config(workspace).await
    }

    async fn message_route(
        &self,
        ext: &Extensions,
        thread: String,
        from: String,
        body: String,
        to: Option<Vec<String>>,
        cc: Option<Vec<String>>,
        reply_to: Option<u64>,
        route_type: Option<RouteType>,
        correlation_id: Option<String>,
    ) -> RpcResult<Routed> {
        coordination::message_route(&self.d, ext, thread, from, body, to, cc, reply_to, route_type, correlation_id)
            .await
    }

    async fn queue_read(
        &self,
        member: String,
        thread: Option<String>,
        types: Option<Vec<RouteType>>,
        status: Option<InboxStatus>,
        limit: Option<u32>,
        mark_read: Option<bool>,
    ) -> RpcResult<Vec<InboxItem>> {
        coordination::queue_read(&self.d, member, thread, types, status, limit, mark_read).await
    }

    async fn queue_process(&self, member: String, ids: Vec<u64>, action: Option<InboxStatus>) -> RpcResult<Processed> {
        coordination::queue_process(&self.d, member, ids, action).await
    }

    async fn queue_subscribe(
        &self,
        thread: String,
        member: String,
        types: Vec<RouteType>,
        mode: DeliveryMode,
    ) -> RpcResult<DeliveryPrefs> {
        coordination::queue_subscribe(&self.d, thread, member, types, mode).await
    }

    async fn completion_agents(
        &self,
        ext: &Extensions,
        thread: String,
        body: String,
        agents: Option<Vec<String>>,
        wait: Option<Wait>,
        timeout_s: Option<u64>,
        aggregation: Option<Aggregation>,
        vote: Option<bool>,
        chair: Option<String>,
        id: Option<String>,
    ) -> RpcResult<Completion> {
        coordination::completion_agents(
            &self.d,
            ext,
            thread,
            body,
            agents,
            wait,
            timeout_s,
            aggregation,
            vote,
            chair,
            id,
        )
        .await
    }

    async fn exchange_get(&self, thread: String, seq: u64) -> RpcResult<ExchangeInfo> {
        exchange::get(&self.d, thread, seq).await
    }

    async fn emergency_broadcast(
        &self,
        ext: &Extensions,
        thread: String,
        body: String,
        from: Option<String>,
        stop: Option<bool>,
    ) -> RpcResult<Emergency> {
        coordination::emergency_broadcast(&self.d, ext, thread, body, from, stop).await
    }

    async fn emergency_ack(&self, thread: String, member: String, broadcast: Option<String>) -> RpcResult<Vec<Ack>> {
        coordination::emergency_ack(&self.d, thread, member, broadcast).await
    }

    async fn emergency_pending(&self, thread: Option<String>, all: Option<bool>) -> RpcResult<Vec<Ack>> {
        coordination::emergency_pending(&self.d, thread, all).await
    }

    async fn resource_write(
        &self,
        resource: String,
        agent: String,
        thread: Option<String>,
        window_ms: Option<u64>,
    ) -> RpcResult<RaceCheck> {
        coordination::resource(&self.d, resource, agent, thread, Access::Write, window_ms).await
    }

    async fn resource_read(&self, resource: String, agent: String, thread: Option<String>) -> RpcResult<RaceCheck> {
        coordination::resource(&self.d, resource, agent, thread, Access::Read, None).await
    }
}

#[cfg(test)]
mod tests;
