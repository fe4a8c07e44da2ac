//! The member surface (`kd_proto::member`, F-B6): what an agent does as
//! itself, on its own thread, by the capability kd gave its run. It
//! implements `MemberApiServer` directly (no delegation through
//! [`super::Rpc`]); every method first turns the token into the grant it
//! stands for, or refuses the call (`forbidden`).

// Parameter lists are the wire format (see kd_proto::member).
#![allow(clippy::too_many_arguments)]

use std::sync::Arc;

use jsonrpsee::Extensions;
use jsonrpsee::core::async_trait;
use kd_proto::member::{ClaimMode, Grant, MemberApiServer};
use kd_proto::types::{Ack, InboxItem, RaceCheck, RouteType, Routed, SearchHit};
use kd_proto::{ErrorCode, RpcResult};

use crate::state::Daemon;

pub struct Member {
    d: Arc<Daemon>,
}

impl Member {
    pub fn new(d: Arc<Daemon>) -> Member {
        Member { d }
    }

    /// The grant `token` stands for, while its run is in flight.
    fn grant(&self, token: &str) -> RpcResult<Grant> {
        let g = self
            .d
            .agents
            .grants
            .check(token, &self.d.agents.runs)
            .map_err(|e| ErrorCode::Forbidden.error(e.to_string()))?;
        Ok(Grant { thread: g.thread, member: g.member, run: g.run, workspace: g.workspace })
    }

    /// The refusal of a call the member surface does not serve yet.
    fn refuse<T>(&self, token: &str) -> RpcResult<T> {
        self.grant(token).and_then(|_| Err(ErrorCode::Forbidden.error("not yet served")))
    }
}

#[async_trait]
impl MemberApiServer for Member {
    async fn member_whoami(&self, token: String) -> RpcResult<Grant> {
        self.grant(&token)
    }

    async fn member_send(
        &self,
        _ext: &Extensions,
        token: String,
        _to: Vec<String>,
        _body: String,
        _cc: Option<Vec<String>>,
        _route_type: Option<RouteType>,
    ) -> RpcResult<Routed> {
        self.refuse(&token)
    }

    async fn member_inbox(
        &self,
        token: String,
        _unread: Option<bool>,
        _types: Option<Vec<RouteType>>,
        _limit: Option<u32>,
        _mark_read: Option<bool>,
    ) -> RpcResult<Vec<InboxItem>> {
        self.refuse(&token)
    }

    async fn member_ack(&self, token: String, _broadcast: Option<String>) -> RpcResult<Vec<Ack>> {
        self.refuse(&token)
    }

    async fn member_claim(&self, token: String, _resource: String, _mode: Option<ClaimMode>) -> RpcResult<RaceCheck> {
        self.refuse(&token)
    }

    async fn member_thread(&self, token: String, _last: Option<u32>) -> RpcResult<String> {
        self.refuse(&token)
    }

    async fn member_search(&self, token: String, _query: String, _limit: Option<u32>) -> RpcResult<Vec<SearchHit>> {
        self.refuse(&token)
    }
}
