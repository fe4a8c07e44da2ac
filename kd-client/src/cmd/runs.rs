//! `kd runs` and `kd cancel`.

use std::process::ExitCode;

use clap::Args;
use kd_client::ClientError;
use kd_client::prelude::*;

use super::{Ctx, print_json};
use crate::fmt::{self, Table};

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this thread
    #[arg(long)]
    thread: Option<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn list(ctx: &Ctx, a: RunsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let runs = client.run_list(a.thread).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&runs)?;
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        outln!("no runs in flight")?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = fmt::now_ms();
    let mut t = Table::new(&["RUN", "THREAD", "MEMBER", "BACKEND", "STATUS", "PID", "CHARS", "STARTED"]);
    for r in &runs {
        t.row(vec![
            r.id.clone(),
            r.thread.clone(),
            r.member.clone(),
            r.backend.clone(),
            match &r.approval {
                Some(a) => format!("waiting on {a}"),
                None => r.status.as_str().into(),
            },
            r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            r.chars.to_string(),
            fmt::ago_ms(r.started_at_ms, now),
        ]);
    }
    out!("{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Thread id [default: the current thread of this workspace and branch]
    thread: Option<String>,
    /// Only this member's run (pending auto-turns go on)
    #[arg(long)]
    member: Option<String>,
}

pub async fn cancel(ctx: &Ctx, a: CancelArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = super::thread_or_current(&client, a.thread).await?.id;
    let (cancelled, stopped) = match a.member {
        Some(m) => (client.run_cancel(thread.clone(), Some(m), None).await.map_err(ClientError::from)?, false),
        None => {
            let i = client.council_interrupt(thread.clone(), Some(true)).await.map_err(ClientError::from)?;
            (i.runs, i.stopped_exchange)
        }
    };
    if stopped {
        outln!("stopped the pending auto-turns on {thread}")?;
    }
    if cancelled.is_empty() {
        outln!("no runs in flight on {thread}")?;
    }
    for r in &cancelled {
        outln!(
            "cancelled {} ({}, pid {})",
            r.member,
            r.id,
            r.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into())
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    /// Thread id [default: the current thread of this workspace and branch]
    thread: Option<String>,
}

pub async fn retry(ctx: &Ctx, a: RetryArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = super::thread_or_current(&client, a.thread).await?.id;
    let runs =
        client.council_retry(thread.clone(), None, None, kd_client::shell_path()).await.map_err(ClientError::from)?;
    if runs.is_empty() {
        outln!("no failed members to retry on {thread}")?;
    }
    for r in &runs {
        outln!(
            "retrying {} ({}, replacing #{})",
            r.member,
            r.id,
            r.replaces.map(|s| s.to_string()).unwrap_or_default()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
