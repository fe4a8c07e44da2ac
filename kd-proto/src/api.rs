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
    pub use crate::coord::CoordinationApiClient;
    pub use crate::daemon::DaemonApiClient;
    pub use crate::exchange::ExchangeApiClient;
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
}
