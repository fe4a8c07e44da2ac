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
use kd_proto::{
    CoordinationApiServer, CouncilApiServer, DaemonApiServer, ExchangeApiServer, KdApiServer, LibraryApiServer,
    MemberApiServer, MessageApiServer, RegistryApiServer, ThreadApiServer, WorkApiServer,
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
    let domains: [(&str, Methods); 11] = [
        ("council", CouncilApiServer::into_rpc(rpc.clone()).into()),
        ("exchange", ExchangeApiServer::into_rpc(rpc.clone()).into()),
        ("coordination", CoordinationApiServer::into_rpc(rpc.clone()).into()),
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
}

#[cfg(test)]
mod tests;
