//! The member surface: what an agent may do through kd while it runs, as
//! itself, on its own thread — by the capability (`token`) kd gave its run,
//! never by a name it claims. There is no identity parameter: the token is
//! the identity (F-B6). `kd mcp` serves these as MCP tools; `kd send`,
//! `kd inbox`, `kd ack` and `kd claim` use them inside a run
//! (`KD_RUN_TOKEN`). A token that is unknown, whose run has ended, or whose
//! thread is not the one acted on, is refused (`forbidden`).

// Parameter lists are the wire format (see `api.rs`).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::proc_macros::rpc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::coord::{Ack, InboxItem, RaceCheck, RouteType, Routed};
use crate::error::RpcResult;
use crate::library::SearchHit;

/// What a run's capability stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Grant {
    /// The thread the member acts on.
    pub thread: String,
    /// The member it acts as.
    pub member: String,
    /// The run it was given to (none for a codex thread an app-server keeps
    /// loaded across the member's runs on the thread).
    pub run: Option<String>,
    /// The thread's workspace.
    pub workspace: String,
}

/// What a claim on a shared resource declares (F-X5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClaimMode {
    /// A write: refused while another member writes it.
    #[default]
    Write,
    /// A read: warned while another member writes it.
    Read,
}

#[rpc(server, client)]
pub trait MemberApi {
    /// Who the token stands for.
    #[method(name = "member.whoami", param_kind = map, with_extensions)]
    async fn member_whoami(&self, token: String) -> RpcResult<Grant>;

    /// A message from the member on its thread to other members (F-X1).
    #[method(name = "member.send", param_kind = map, with_extensions)]
    async fn member_send(
        &self,
        token: String,
        to: Vec<String>,
        body: String,
        cc: Option<Vec<String>>,
        #[argument(rename = "type")] route_type: Option<RouteType>,
    ) -> RpcResult<Routed>;

    /// The member's inbox on its thread, oldest first (F-X3).
    #[method(name = "member.inbox", param_kind = map, with_extensions)]
    async fn member_inbox(
        &self,
        token: String,
        unread: Option<bool>,
        types: Option<Vec<RouteType>>,
        limit: Option<u32>,
        mark_read: Option<bool>,
    ) -> RpcResult<Vec<InboxItem>>;

    /// Acknowledges the emergency broadcasts the member owes on its thread.
    #[method(name = "member.ack", param_kind = map, with_extensions)]
    async fn member_ack(&self, token: String, broadcast: Option<String>) -> RpcResult<Vec<Ack>>;

    /// Declares a write (or read) of a shared resource (F-X5).
    #[method(name = "member.claim", param_kind = map, with_extensions)]
    async fn member_claim(&self, token: String, resource: String, mode: Option<ClaimMode>) -> RpcResult<RaceCheck>;

    /// The thread's recent messages, as the history format shows them.
    #[method(name = "member.thread", param_kind = map, with_extensions)]
    async fn member_thread(&self, token: String, last: Option<u32>) -> RpcResult<String>;

    /// Full-text search over the threads of the member's workspace.
    #[method(name = "member.search", param_kind = map, with_extensions)]
    async fn member_search(&self, token: String, query: String, limit: Option<u32>) -> RpcResult<Vec<SearchHit>>;

    /// The member's CLI asks permission to use a tool (claude's permission
    /// prompt tool, relayed by `kd mcp`): allow with the input, or deny
    /// with a message. Waits for the King when the policy says `ask`.
    #[method(name = "member.permission", param_kind = map, with_extensions)]
    async fn member_permission(
        &self,
        token: String,
        tool_name: String,
        input: serde_json::Value,
        tool_use_id: Option<String>,
    ) -> RpcResult<crate::approval::PermissionAnswer>;
}
