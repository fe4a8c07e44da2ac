//! The `kd` subcommands. Each talks to the daemon only through the public
//! RPC API (F-K3).

pub mod ask;
pub mod daemon;
pub mod inspect;
pub mod runs;

use std::path::PathBuf;

use kd_client::{Client, ClientError};

/// What every command needs: where the daemon is.
pub struct Ctx {
    pub socket: PathBuf,
}

impl Ctx {
    pub fn new(socket: Option<PathBuf>) -> Ctx {
        Ctx { socket: kd_client::socket_path(socket.as_deref()) }
    }

    /// A connection, starting the daemon if needed (unless KD_NO_AUTOSTART=1).
    pub async fn client(&self) -> Result<Client, ClientError> {
        Client::connect_or_start(&self.socket).await
    }
}

/// Prints a value as pretty JSON.
pub fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}
