//! `kd mcp`: kd's MCP server on stdin/stdout ([`kd_client::mcp`]), which
//! kdd gives an agent CLI for each run. It acts with the run's capability
//! (`KD_RUN_TOKEN`) through the daemon at `KD_SOCKET` (or `--socket`),
//! reached on the first tool call and never started. It ends quietly when
//! its client closes stdin, and on SIGTERM or SIGINT, which is how the CLIs
//! end their servers (claude: SIGINT; codex: SIGTERM; the ACP adapters:
//! stdin EOF or SIGTERM to their group).

use std::path::PathBuf;
use std::process::ExitCode;

use kd_client::mcp::{Server, serve_stdio};
use tokio::signal::unix::{SignalKind, signal};

pub async fn run(socket: PathBuf) -> anyhow::Result<ExitCode> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        served = serve_stdio(Server::from_env(socket)) => {
            served.map_err(|e| anyhow::anyhow!("mcp: {e}"))?;
        }
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(ExitCode::SUCCESS)
}
