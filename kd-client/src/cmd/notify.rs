//! `kd notify test`: one test notification to each sink of this
//! workspace's `notify` configuration, and what each answered.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use kd_client::prelude::*;
use kd_client::terminal::safe;
use kd_client::{ClientError, workspace};

use super::{Ctx, print_json};
use crate::fmt::{self, Table};

#[derive(Debug, Subcommand)]
pub enum NotifyCommand {
    /// Send one test notification to each sink (notify.webhook, notify.command, notify.desktop) and say what each answered
    Test(TestArgs),
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Print JSON
    #[arg(long)]
    json: bool,
}

/// Exit status when a sink failed.
const EXIT_SINK_FAILED: u8 = 1;

pub async fn run(ctx: &Ctx, cmd: NotifyCommand) -> anyhow::Result<ExitCode> {
    let NotifyCommand::Test(a) = cmd;
    let ws = workspace::current()?.root.display().to_string();
    let client = ctx.client().await?;
    let tested = client.notify_test(ws).await.map_err(ClientError::from)?;
    let failed = tested.sinks.iter().any(|s| !s.ok);
    if a.json {
        print_json(&tested)?;
    } else if tested.sinks.is_empty() {
        outln!(
            "No notification sink is configured: set notify.webhook, notify.command or notify.desktop (docs/notify.md)."
        )?;
    } else {
        let mut t = Table::new(&["SINK", "TARGET", "ANSWER", "TIME"]);
        for s in &tested.sinks {
            let answer = if s.ok { s.answer.clone() } else { format!("FAILED: {}", s.answer) };
            t.row(vec![
                s.sink.clone(),
                safe(&s.target).into_owned(),
                safe(&fmt::one_line(&answer)).into_owned(),
                fmt::duration_ms(s.ms),
            ]);
        }
        out!("{}", t.render())?;
    }
    Ok(if failed { ExitCode::from(EXIT_SINK_FAILED) } else { ExitCode::SUCCESS })
}
