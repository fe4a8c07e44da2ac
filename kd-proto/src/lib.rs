//! # kd-proto — the wire contract between `kdd` and its clients
//!
//! Everything that crosses the daemon's Unix socket is defined here and
//! nowhere else; `kdd` converts its database rows into these types at the
//! edge, and clients use them as they are.
//!
//! - [`api`]: the methods — one jsonrpsee `#[rpc]` trait per domain,
//!   each beside its types (`…ApiServer` for the daemon, `…ApiClient` for
//!   clients; [`api::prelude`] has every client trait):
//!   - [`daemon`]: `daemon.*` and `rpc.discover`;
//!   - [`thread`]: `thread.*`, threads and their lineage;
//!   - [`message`]: a message, `message.append`, `thread.messages`' pages;
//!   - [`subscribe`]: `thread.subscribe` and its [`types::ThreadEvent`]s;
//!   - [`council`]: `council.*` and `config.get`;
//!   - [`registry`]: runs, sessions, locks and the event log;
//!   - [`library`]: `search.query` and `cost.report`;
//!   - [`coord`]: the coordination layer (routing, inboxes, completions,
//!     emergencies, races);
//!   - [`exchange`]: an exchange's journal as `exchange.get` answers it;
//!   - [`member`]: the member surface, what an agent does as itself by its
//!     run's capability;
//!   - [`work`]: members' work in worktrees of their own;
//!   - [`approval`]: the permissions members' CLIs ask, decided by policy
//!     or by the King;
//!   - [`notify`]: attention, what kd sends the King's notification sinks,
//!     and `notify.test`;
//!   - [`web`]: kd web, the web client kdd serves, and its paired browsers;
//! - [`types`]: every domain's params, results and subscription items
//!   (serde + JSON Schema) by one path;
//! - [`color`]: member colours as configured, and the palette;
//! - [`order`]: the one order a thread is shown in;
//! - [`error`]: the stable JSON-RPC error codes;
//! - [`openrpc`]: the OpenRPC document served by `rpc.discover`;
//! - [`paths`]: where the socket and database live (F-D1);
//! - [`names`]: validation of ids and names that could reach a path;
//! - [`title`]: what a thread's title may be, wherever it is set.

pub mod api;
pub mod approval;
pub mod color;
pub mod comment;
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
pub mod notify;
pub mod openrpc;
pub mod order;
pub mod paths;
pub mod registry;
pub mod subscribe;
pub mod thread;
pub mod title;
pub mod types;
pub mod web;
pub mod work;

pub use approval::{ApprovalApiClient, ApprovalApiServer};
pub use coord::{CoordinationApiClient, CoordinationApiServer};
pub use council::{CouncilApiClient, CouncilApiServer};
pub use daemon::{DaemonApiClient, DaemonApiServer};
pub use error::{ErrorCode, RpcResult};
pub use exchange::{ExchangeApiClient, ExchangeApiServer};
pub use library::{LibraryApiClient, LibraryApiServer};
pub use member::{MemberApiClient, MemberApiServer};
pub use message::{MessageApiClient, MessageApiServer};
pub use notify::{NotifyApiClient, NotifyApiServer};
pub use registry::{RegistryApiClient, RegistryApiServer};
pub use subscribe::{SubscribeApiClient, SubscribeApiServer};
pub use thread::{ThreadApiClient, ThreadApiServer};
pub use web::{WebApiClient, WebApiServer};
pub use work::{WorkApiClient, WorkApiServer};

/// Version of the wire protocol, independent of the release version. A
/// client refuses a daemon that speaks another one.
pub const PROTOCOL_VERSION: u32 = 1;

/// The smallest request limit a daemon takes (`kdd --max-request-bytes`):
/// a request this large goes before the daemon has said its own limit
/// (`kd ask`'s question beside the greeting, `council.ask`).
pub const SMALLEST_REQUEST_LIMIT: u32 = 4096;

/// Release version of this crate (all kd crates share it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the binaries were built from (`unknown commit` outside
/// a git checkout).
pub const COMMIT: &str = env!("KD_GIT_COMMIT");

/// What `--version` says: `0.1.0 (0123456789ab)`.
pub const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("KD_GIT_COMMIT"), ")");

/// The HTTP URL clients use on the Unix socket (the host part is ignored).
pub const SOCKET_URL: &str = "ws://kd/";

/// Most calls in one JSON-RPC batch: kdd answers a larger batch with one
/// error (-32010), running none of its calls.
pub const MAX_BATCH: usize = 64;
