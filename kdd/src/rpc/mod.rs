//! The JSON-RPC methods, one file per domain, each implementing its
//! domain's trait of `kd_proto` on [`Rpc`]: [`daemon`], [`threads`],
//! [`messages`], [`subscribe`] (`thread.subscribe`), [`council`],
//! [`registry`] (runs, sessions, locks, events), [`library`] (search,
//! cost), [`coordination`] (routing, queues, completions, emergencies,
//! races), [`exchange`] (the exchange journal), [`member`] (what an agent
//! does as itself by its run's capability), [`work`] (members' work) and
//! [`web`] (kd web).
//! Each is a thin adapter: it checks parameter values ([`validate`], once
//! per method) and calls its subsystem; [`error`] turns registry errors
//! into stable error codes. This file only builds the method table
//! ([`module`]); the checks every call passes first — its parameter names
//! ([`params`]) and, for an agent's process, which methods it may call
//! ([`confine`]) — are the server's middleware ([`check`]).

mod approval;
pub mod check;
pub mod confine;
mod coordination;
mod council;
mod daemon;
pub mod error;
mod exchange;
mod feed;
mod library;
mod member;
mod messages;
mod notify;
pub mod params;
mod registry;
mod subscribe;
mod threads;
pub mod validate;
mod web;
mod work;

use std::sync::Arc;

use jsonrpsee::{Methods, RpcModule};
use kd_proto::{
    ApprovalApiServer, CoordinationApiServer, CouncilApiServer, DaemonApiServer, ExchangeApiServer, LibraryApiServer,
    MemberApiServer, MessageApiServer, NotifyApiServer, RegistryApiServer, SubscribeApiServer, ThreadApiServer,
    WebApiServer, WorkApiServer,
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
    let domains: [(&str, Methods); 14] = [
        ("daemon", DaemonApiServer::into_rpc(rpc.clone()).into()),
        ("thread", ThreadApiServer::into_rpc(rpc.clone()).into()),
        ("message", MessageApiServer::into_rpc(rpc.clone()).into()),
        ("subscribe", SubscribeApiServer::into_rpc(rpc.clone()).into()),
        ("council", CouncilApiServer::into_rpc(rpc.clone()).into()),
        ("registry", RegistryApiServer::into_rpc(rpc.clone()).into()),
        ("library", LibraryApiServer::into_rpc(rpc.clone()).into()),
        ("coordination", CoordinationApiServer::into_rpc(rpc.clone()).into()),
        ("exchange", ExchangeApiServer::into_rpc(rpc.clone()).into()),
        // member.*: what an agent does as itself, by its run's capability.
        ("member", MemberApiServer::into_rpc(rpc.clone()).into()),
        // work.*: the King's methods on members' work.
        ("work", WorkApiServer::into_rpc(rpc.clone()).into()),
        // approval.*: the King's inbox of what members' CLIs ask.
        ("approval", ApprovalApiServer::into_rpc(rpc.clone()).into()),
        // notify.*: the King's notification sinks.
        ("notify", NotifyApiServer::into_rpc(rpc.clone()).into()),
        // web.*: kd web, the King's.
        ("web", WebApiServer::into_rpc(rpc).into()),
    ];
    let mut module = RpcModule::new(());
    for (domain, methods) in domains {
        if let Err(e) = module.merge(methods) {
            tracing::error!("the {domain} methods are not served: {e}");
        }
    }
    module
}

#[cfg(test)]
mod tests;
