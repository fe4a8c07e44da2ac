//! `kd watch [THREAD]`: follow a thread live, as `kd ask` shows its own
//! exchange — every member's answer and the King's messages, whoever sent
//! them — until Ctrl+C.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use kd_client::style::Palette;
use kd_client::terminal::safe;
use kd_client::{ClientError, KdApiClient};

use super::Ctx;
use super::answers::View;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Thread id [default: the current thread of this workspace and branch]
    thread: Option<String>,
}

pub async fn run(ctx: &Ctx, a: WatchArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = super::thread_or_current(&client, a.thread).await?;
    let color = ctx.styled();
    let palette = match color {
        true => Palette::from_config(client.config_get(thread.workspace.clone()).await.ok().as_ref(), &thread.members),
        false => Palette::default(),
    };
    let mut sub =
        client.thread_subscribe(thread.id.clone(), Some(thread.last_seq), None).await.map_err(ClientError::from)?;
    outln!("watching thread {} · {} (Ctrl+C to stop)", thread.id, safe(&thread.workspace))?;
    let mut view = View::watching(color, palette);
    // One listener for the whole watch: a Ctrl+C that comes while an event
    // is being shown is not lost.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        tokio::select! {
            event = sub.next() => match event {
                Some(Ok(e)) => view.on_event(&e, &mut out)?,
                Some(Err(e)) => return Err(anyhow::anyhow!("bad event from kdd: {e}")),
                None => return Err(ClientError::Transport("the daemon closed the subscription".into()).into()),
            },
            _ = interrupt.recv() => break,
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
