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
    pub use crate::council::CouncilApiClient;
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
}
