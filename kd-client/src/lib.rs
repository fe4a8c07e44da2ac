//! # kd-client — talk to `kdd` from Rust
//!
//! The library half of the `kd` binary, usable by other tools:
//!
//! ```no_run
//! # async fn demo() -> Result<(), kd_client::ClientError> {
//! use kd_client::Client;
//! use kd_client::prelude::*;
//! let client = Client::connect_or_start(&kd_client::socket_path(None)).await?;
//! let threads = client.thread_list(None, None, Some(10)).await?;
//! # Ok(()) }
//! ```
//!
//! - [`Client`]: a WebSocket JSON-RPC connection over the daemon's Unix
//!   socket that has checked the daemon's protocol version; it derefs to the
//!   jsonrpsee client, so every method of the client traits [`prelude`]
//!   brings in scope is available on it;
//! - [`follow::Follow`]: a thread's subscription that rides through a
//!   restart of the daemon (reconnects, resubscribes after the last message);
//!   [`follow::Following`] any other, e.g. the approvals';
//! - [`autostart`]: starting `kdd` when no one answers (F-D5);
//! - [`http`]: one call over plain HTTP, which gets in when WebSockets cannot;
//! - [`ClientError`]: failures worded for a one-line message;
//! - [`terminal::safe`]: text made safe to print on a terminal;
//! - [`keys::Keys`]: single keys from the terminal, as they are pressed;
//! - [`reading::InOrder`]: a thread of any length, in display order, page by page;
//! - [`mcp`]: `kd mcp`, the MCP server through which an agent acts as its member.

#![forbid(unsafe_code)]

pub mod autostart;
mod client;
mod error;
pub mod follow;
pub mod frontmatter;
pub mod http;
pub mod keys;
pub mod markdown;
pub mod mcp;
pub mod reading;
pub mod style;
pub mod terminal;
pub mod workspace;

pub use client::{Client, NO_REQUEST_TIMEOUT, REQUEST_TIMEOUT, WsClient};

/// A fresh thread id, `[a-z0-9]{8}`, for a thread `council.send` is to
/// create (`new_thread`): the client subscribes to it first, so it misses
/// nothing of the exchange.
pub fn new_thread_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..8).map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char).collect()
}
/// This process's `PATH`, for the `path` of a request that starts runs:
/// the daemon finds the members' CLIs on it and runs them with it, as this
/// shell would. None when unset or not UTF-8 (the daemon then uses its own).
pub fn shell_path() -> Option<String> {
    std::env::var("PATH").ok()
}

pub use error::ClientError;
pub use kd_proto;
pub use kd_proto::api::prelude;
pub use kd_proto::paths::socket_path;
