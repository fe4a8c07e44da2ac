//! The whole wire contract as one jsonrpsee trait. `kdd` implements the
//! generated `KdApiServer`; clients call through the generated `KdApiClient`
//! (parameters are sent by name). Every method here is also described, with
//! its parameters, in [`crate::openrpc`]; a test in `kdd` keeps the two equal.

// Parameter lists are the wire format; grouping them into structs would make
// `curl` calls nest one level deeper for no gain.
#![allow(clippy::too_many_arguments)]

use jsonrpsee::core::SubscriptionResult;
use jsonrpsee::proc_macros::rpc;

pub use crate::error::RpcResult;
use crate::types::*;

/// Every client trait, to call any method on a client:
/// `use kd_proto::api::prelude::*;` (or `kd_client::prelude`).
pub mod prelude {
    pub use crate::api::KdApiClient;
    pub use crate::daemon::DaemonApiClient;
    pub use crate::library::LibraryApiClient;
    pub use crate::member::MemberApiClient;
    pub use crate::message::MessageApiClient;
    pub use crate::registry::RegistryApiClient;
    pub use crate::thread::ThreadApiClient;
    pub use crate::work::WorkApiClient;
}

#[rpc(server, client)]
pub trait KdApi {
    /// Messages after `since_seq` from the registry, then live events.
    #[subscription(
        name = "thread.subscribe" => "thread.event",
        unsubscribe = "thread.unsubscribe",
        item = ThreadEvent,
        param_kind = map,
        with_extensions
    )]
    async fn thread_subscribe(
        &self,
        thread: String,
        since_seq: Option<u64>,
        // The macro's generated server uses a local named `pending`.
        #[argument(rename = "pending")] not_yet_created: Option<bool>,
    ) -> SubscriptionResult;

    /// Sends a message from the King and starts a run for each addressed member.
    #[method(name = "council.send", param_kind = map, with_extensions)]
    async fn council_send(
        &self,
        thread: String,
        body: String,
        to: Option<Vec<String>>,
        mute: Option<Vec<String>>,
        style: Option<Style>,
        timeout_s: Option<u64>,
        correlation_id: Option<String>,
        rounds: Option<u32>,
        new_thread: Option<NewThread>,
    ) -> RpcResult<Sent>;

    /// Cancels this client's runs on the thread (all runs with `all`) and
    /// stops further auto-turns until the next King message.
    #[method(name = "council.interrupt", param_kind = map, with_extensions)]
    async fn council_interrupt(&self, thread: String, all: Option<bool>) -> RpcResult<Interrupted>;

    /// Re-queries the members whose last run failed; each answer replaces
    /// the failed one.
    #[method(name = "council.retry", param_kind = map, with_extensions)]
    async fn council_retry(
        &self,
        thread: String,
        style: Option<Style>,
        timeout_s: Option<u64>,
    ) -> RpcResult<Vec<RunInfo>>;

    /// The effective configuration of a workspace, value by value, with
    /// where each came from; an invalid configuration is an error.
    #[method(name = "config.get", param_kind = map)]
    async fn config_get(&self, workspace: String) -> RpcResult<ConfigView>;

    /// Routes a message from the King or a member to members (F-X1).
    #[method(name = "message.route", param_kind = map, with_extensions)]
    async fn message_route(
        &self,
        thread: String,
        from: String,
        body: String,
        to: Option<Vec<String>>,
        cc: Option<Vec<String>>,
        reply_to: Option<u64>,
        #[argument(rename = "type")] route_type: Option<RouteType>,
        correlation_id: Option<String>,
    ) -> RpcResult<Routed>;

    /// A member's inbox (F-X3).
    #[method(name = "queue.read", param_kind = map)]
    async fn queue_read(
        &self,
        member: String,
        thread: Option<String>,
        types: Option<Vec<RouteType>>,
        status: Option<InboxStatus>,
        limit: Option<u32>,
        mark_read: Option<bool>,
    ) -> RpcResult<Vec<InboxItem>>;

    #[method(name = "queue.process", param_kind = map)]
    async fn queue_process(&self, member: String, ids: Vec<u64>, action: Option<InboxStatus>) -> RpcResult<Processed>;

    #[method(name = "queue.subscribe", param_kind = map)]
    async fn queue_subscribe(
        &self,
        thread: String,
        member: String,
        types: Vec<RouteType>,
        mode: DeliveryMode,
    ) -> RpcResult<DeliveryPrefs>;

    /// One prompt to several members in parallel (F-X2).
    #[method(name = "completion.agents", param_kind = map, with_extensions)]
    async fn completion_agents(
        &self,
        thread: String,
        body: String,
        agents: Option<Vec<String>>,
        wait: Option<Wait>,
        timeout_s: Option<u64>,
        aggregation: Option<Aggregation>,
        vote: Option<bool>,
        chair: Option<String>,
        id: Option<String>,
    ) -> RpcResult<Completion>;

    /// The daemon's view of the exchange begun by message `seq` of `thread`.
    #[method(name = "exchange.get", param_kind = map)]
    async fn exchange_get(&self, thread: String, seq: u64) -> RpcResult<ExchangeInfo>;

    /// An emergency to every member (F-X4).
    #[method(name = "emergency.broadcast", param_kind = map, with_extensions)]
    async fn emergency_broadcast(
        &self,
        thread: String,
        body: String,
        from: Option<String>,
        stop: Option<bool>,
    ) -> RpcResult<Emergency>;

    #[method(name = "emergency.ack", param_kind = map)]
    async fn emergency_ack(&self, thread: String, member: String, broadcast: Option<String>) -> RpcResult<Vec<Ack>>;

    #[method(name = "emergency.pending", param_kind = map)]
    async fn emergency_pending(&self, thread: Option<String>, all: Option<bool>) -> RpcResult<Vec<Ack>>;

    /// Declares a write of a shared resource (F-X5).
    #[method(name = "resource.write", param_kind = map)]
    async fn resource_write(
        &self,
        resource: String,
        agent: String,
        thread: Option<String>,
        window_ms: Option<u64>,
    ) -> RpcResult<RaceCheck>;

    #[method(name = "resource.read", param_kind = map)]
    async fn resource_read(&self, resource: String, agent: String, thread: Option<String>) -> RpcResult<RaceCheck>;
}
