//! The methods of the wire contract: one jsonrpsee `#[rpc(server, client)]`
//! trait per domain, each in the module of its types — [`crate::daemon`],
//! [`crate::thread`], [`crate::message`], [`crate::subscribe`],
//! [`crate::council`], [`crate::registry`], [`crate::library`],
//! [`crate::coord`], [`crate::exchange`], [`crate::member`],
//! [`crate::work`], [`crate::approval`], [`crate::notify`], [`crate::web`]. `kdd` implements each generated `…ApiServer` trait;
//! clients call through the `…ApiClient` traits (parameters are sent by
//! name), all in scope at once with [`prelude`]. Every method is also
//! described, with its parameters, in [`crate::openrpc`]; a test in `kdd`
//! keeps the two equal.
//!
//! Parameter lists are the wire format: grouping them into structs would
//! make `curl` calls nest one level deeper for no gain (hence
//! `clippy::too_many_arguments` allowed where a method takes many).

pub use crate::error::RpcResult;

/// Every client trait, to call any method on a client:
/// `use kd_proto::api::prelude::*;` (or `use kd_client::prelude::*;`).
pub mod prelude {
    pub use crate::approval::ApprovalApiClient;
    pub use crate::coord::CoordinationApiClient;
    pub use crate::council::CouncilApiClient;
    pub use crate::daemon::DaemonApiClient;
    pub use crate::exchange::ExchangeApiClient;
    pub use crate::library::LibraryApiClient;
    pub use crate::member::MemberApiClient;
    pub use crate::message::MessageApiClient;
    pub use crate::notify::NotifyApiClient;
    pub use crate::registry::RegistryApiClient;
    pub use crate::subscribe::SubscribeApiClient;
    pub use crate::thread::ThreadApiClient;
    pub use crate::web::WebApiClient;
    pub use crate::work::WorkApiClient;
}
