//! # kd-proto — the wire contract between `kdd` and its clients
//!
//! Everything that crosses the daemon's Unix socket is defined here and
//! nowhere else; `kdd` converts its database rows into these types at the
//! edge, and clients use them as they are.
//!
//! - [`api`]: the jsonrpsee `#[rpc]` trait — `KdApiServer` for the daemon,
//!   `KdApiClient` for clients;
//! - [`member`]: the member surface, what an agent does as itself by its
//!   run's capability (`MemberApiServer`, `MemberApiClient`);
//! - [`types`]: params, results and subscription items (serde + JSON Schema);
//! - [`coord`]: the coordination layer's types (routing, inboxes,
//!   completions, emergencies, races), re-exported by [`types`];
//! - [`exchange`]: an exchange's journal as `exchange.get` answers it,
//!   re-exported by [`types`];
//! - [`color`]: member colours as configured, and the palette;
//! - [`order`]: the one order a thread is shown in;
//! - [`error`]: the stable JSON-RPC error codes;
//! - [`openrpc`]: the OpenRPC document served by `rpc.discover`;
//! - [`paths`]: where the socket and database live (F-D1);
//! - [`names`]: validation of ids and names that could reach a path;
//! - [`title`]: what a thread's title may be, wherever it is set.

pub mod api;
pub mod color;
pub mod coord;
pub mod council;
pub mod daemon;
pub mod duration;
pub mod error;
pub mod exchange;
pub mod library;
pub mod member;
pub mod message;
pub mod names;
pub mod openrpc;
pub mod order;
pub mod paths;
pub mod registry;
pub mod thread;
pub mod title;
pub mod types;
pub mod work;

pub use api::{KdApiClient, KdApiServer};
pub use coord::{CoordinationApiClient, CoordinationApiServer};
pub use council::{CouncilApiClient, CouncilApiServer};
pub use daemon::{DaemonApiClient, DaemonApiServer};
pub use error::{ErrorCode, RpcResult};
pub use exchange::{ExchangeApiClient, ExchangeApiServer};
pub use library::{LibraryApiClient, LibraryApiServer};
pub use member::{MemberApiClient, MemberApiServer};
pub use message::{MessageApiClient, MessageApiServer};
pub use registry::{RegistryApiClient, RegistryApiServer};
pub use thread::{ThreadApiClient, ThreadApiServer};
pub use work::{WorkApiClient, WorkApiServer};

/// Version of the wire protocol, independent of the release version. A
/// client refuses a daemon that speaks another one.
pub const PROTOCOL_VERSION: u32 = 1;

/// Release version of this crate (all kd crates share it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the binaries were built from (`unknown commit` outside
/// a git checkout).
pub const COMMIT: &str = env!("KD_GIT_COMMIT");

/// What `--version` says: `0.1.0 (0123456789ab)`.
pub const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("KD_GIT_COMMIT"), ")");

/// The HTTP URL clients use on the Unix socket (the host part is ignored).
pub const SOCKET_URL: &str = "ws://kd/";
