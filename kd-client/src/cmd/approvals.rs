//! The King's approvals inbox (issue 33): `kd approvals` lists what
//! members' CLIs ask (pending ones; `--all`, `--follow`, `--json`),
//! `kd approve ID` (`--run`, `--thread` for the broader grants) and
//! `kd deny ID [--message TEXT]` decide one. What an agent wrote (a
//! command, a path) is escaped before the terminal.

use std::process::ExitCode;

use clap::Args;
use kd_client::ClientError;
use kd_client::prelude::*;
use kd_client::terminal::safe;
use kd_proto::approval::{Approval, ApprovalEvent, Decision, Scope};

use super::{Ctx, print_json};
use crate::approval_text;

#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// Every approval, decided ones too (newest first)
    #[arg(long)]
    all: bool,
    /// Only this thread's
    #[arg(long)]
    thread: Option<String>,
    /// Keep following: each request and decision as it happens, until Ctrl+C
    #[arg(long)]
    follow: bool,
    /// JSON (one object per line with --follow)
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The approval (ap-…)
    id: String,
    /// Allow it for the rest of the member's run too
    #[arg(long, conflicts_with = "thread")]
    run: bool,
    /// Allow it for this member on this thread from now on
    #[arg(long)]
    thread: bool,
}

#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The approval (ap-…)
    id: String,
    /// What the agent is told
    #[arg(long, short)]
    message: Option<String>,
}

/// One approval on one line: id, state, thread, member, what.
pub fn line(a: &Approval) -> String {
    let decided = approval_text::decided(a).map(|d| format!("  [{d}]")).unwrap_or_default();
    format!("{}  {}  {}  {}{}", a.id, a.thread, safe(&a.member), approval_text::what(a), decided)
}

pub async fn list(ctx: &Ctx, a: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    if a.follow {
        let mut sub = client.approval_subscribe().await.map_err(ClientError::from)?;
        while let Some(e) = sub.next().await {
            let e = e.map_err(|e| anyhow::anyhow!("the approvals subscription failed: {e}"))?;
            if a.json {
                outln!("{}", serde_json::to_string(&e)?)?;
                continue;
            }
            match &e {
                ApprovalEvent::Requested { approval } | ApprovalEvent::Decided { approval } => {
                    if a.thread.as_ref().is_none_or(|t| *t == approval.thread) {
                        outln!("{}", line(approval))?;
                    }
                }
                ApprovalEvent::Lagged { missed } => outln!("kd: {missed} approval event(s) missed; listing again")?,
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let all = client.approval_list(Some(a.all), a.thread, None).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&all)?;
    } else if all.is_empty() {
        outln!("{}", if a.all { "no approvals" } else { "no approval is pending" })?;
    } else {
        for ap in &all {
            outln!("{}", line(ap))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn approve(ctx: &Ctx, a: ApproveArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let scope = if a.run {
        Scope::Run
    } else if a.thread {
        Scope::Thread
    } else {
        Scope::Once
    };
    let ap = client.approval_decide(a.id, Decision::Approve, Some(scope), None).await.map_err(ClientError::from)?;
    outln!("{}", line(&ap))?;
    Ok(ExitCode::SUCCESS)
}

pub async fn deny(ctx: &Ctx, a: DenyArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let ap = client.approval_decide(a.id, Decision::Deny, None, a.message).await.map_err(ClientError::from)?;
    outln!("{}", line(&ap))?;
    Ok(ExitCode::SUCCESS)
}
