//! `kd watch [THREAD]`: follow a thread live, as `kd ask` shows its own
//! exchange — every member's answer and the King's messages, whoever sent
//! them — until Ctrl+C.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use kd_client::ClientError;
use kd_client::follow::{Follow, Next};
use kd_client::prelude::*;
use kd_client::style::Palette;
use kd_client::terminal::safe;

use super::Ctx;
use super::answers::View;
use super::burst::Burst;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Thread id [default: the current thread of this workspace and branch]
    thread: Option<String>,
    /// When kdd goes away, reconnect for up to this long and go on (0: exit at once)
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    reconnect: u64,
}

pub async fn run(ctx: &Ctx, a: WatchArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = super::thread_or_current(&client, a.thread).await?;
    let color = ctx.styled();
    let palette = match color {
        true => Palette::from_config(
            client.config_get(thread.workspace.clone(), kd_client::shell_path()).await.ok().as_ref(),
            &thread.members,
        ),
        false => Palette::default(),
    };
    let sub =
        client.thread_subscribe(thread.id.clone(), Some(thread.last_seq), None).await.map_err(ClientError::from)?;
    outln!("watching thread {} · {} (Ctrl+C to stop)", thread.id, safe(&thread.workspace))?;
    let mut view = View::watching(color, palette);
    // Rides through a restart of kdd: from the last message seen, once.
    let mut follow = Follow::new(client, sub, thread.id.clone(), thread.last_seq, Duration::from_secs(a.reconnect));
    // One listener for the whole watch: a Ctrl+C that comes while an event
    // is being shown is not lost.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let stdout = std::io::stdout();
    let mut out = Burst::new(stdout.lock());
    loop {
        tokio::select! {
            // Events first, written when nothing more is there.
            biased;
            _ = interrupt.recv() => break,
            next = follow.next() => match next {
                Next::Event(e) => view.on_event(&e, &mut out)?,
                Next::Reconnecting => {
                    out.flush()?;
                    errln!("kd: kdd went away; reconnecting (up to {} s)…", a.reconnect);
                }
                Next::Reconnected => {
                    out.flush()?;
                    errln!("kd: reconnected");
                    view.reconnected();
                }
                Next::Gone(e) => return Err(e.into()),
            },
            () = std::future::ready(()), if out.holds() => out.flush()?,
        }
    }
    view.finish(&mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
