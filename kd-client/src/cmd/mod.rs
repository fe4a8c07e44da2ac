//! The `kd` subcommands. Each talks to the daemon only through the public
//! RPC API (F-K3).

pub mod answers;
pub mod approvals;
pub mod ask;
pub mod asking;
pub mod burst;
pub mod check;
pub mod comment;
pub mod config;
pub mod coord;
pub mod cost;
pub mod daemon;
pub mod doctor;
pub mod inbox;
pub mod inspect;
pub mod kingdom;
pub mod lifecycle;
pub mod mcp;
pub mod notify;
pub mod runs;
pub mod search;
pub mod ship;
pub mod threads;
pub mod transfer;
pub mod watch;
pub mod web;
pub mod work;
pub mod work_follow;

use std::path::PathBuf;

use kd_client::{Client, ClientError};

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set
    #[default]
    Auto,
    Always,
    Never,
}

/// How a new thread gives agents the conversation (F-A4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Context {
    /// The whole thread in every prompt
    #[default]
    History,
    /// Each agent's own session, resumed; only what it has not seen
    Resume,
}

impl From<Context> for kd_proto::types::ContextMode {
    fn from(c: Context) -> Self {
        match c {
            Context::History => kd_proto::types::ContextMode::History,
            Context::Resume => kd_proto::types::ContextMode::Resume,
        }
    }
}

/// What every command needs: where the daemon is, how to print.
pub struct Ctx {
    pub socket: PathBuf,
    pub color: Color,
}

impl Ctx {
    pub fn new(socket: Option<PathBuf>, color: Color) -> Ctx {
        Ctx { socket: kd_client::socket_path(socket.as_deref()), color }
    }

    /// Whether stdout gets colour and styles.
    pub fn styled(&self) -> bool {
        use std::io::IsTerminal;
        match self.color {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// A connection, starting the daemon if needed (unless KD_NO_AUTOSTART=1).
    pub async fn client(&self) -> Result<Client, ClientError> {
        Client::connect_or_start(&self.socket).await
    }

    /// [`Ctx::client`], with `first` — a read — sent beside the greeting
    /// ([`Client::connect_or_start_then`]).
    pub async fn client_then<T>(
        &self,
        first: impl AsyncFn(&kd_client::WsClient) -> T,
    ) -> Result<(Client, T), ClientError> {
        Client::connect_or_start_then(&self.socket, first).await
    }

    /// A connection for a call that lasts as long as agents take (a
    /// completion): no request timeout. The daemon's going away still ends it.
    pub async fn client_waiting(&self) -> Result<Client, ClientError> {
        Client::connect_with(&self.socket, kd_client::NO_REQUEST_TIMEOUT).await
    }
}

/// The named thread, or the current one of this workspace and branch.
pub async fn thread_or_current(client: &Client, thread: Option<String>) -> anyhow::Result<kd_proto::types::Thread> {
    use kd_client::prelude::*;
    if let Some(t) = thread {
        return Ok(client.thread_get(t).await.map_err(ClientError::from)?);
    }
    let ws = kd_client::workspace::current()?;
    client
        .thread_current(ws.root.display().to_string(), ws.branch.clone())
        .await
        .map_err(ClientError::from)?
        .ok_or_else(|| anyhow::anyhow!("no current thread in {}; name one (see `kd threads`)", ws.root.display()))
}

/// Prints a value as pretty JSON.
pub fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?)?;
    Ok(())
}
