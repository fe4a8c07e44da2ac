//! The King's approvals inbox (issue 33): `kd approvals` lists what
//! members' CLIs ask (pending ones; `--all`, `--follow`, `--json`),
//! `kd approve ID` (`--run`, `--thread` for the broader grants) and
//! `kd deny ID [--message TEXT]` decide one. What an agent wrote (a
//! command, a path) is escaped before the terminal.
//!
//! `--follow` rides through a restart of kdd as `kd watch` does (says so
//! on stderr, connects again for up to `--reconnect` seconds, else exits
//! non-zero saying it lost kdd); back, or after falling behind, it lists
//! again and tells what it missed: each approval's line is shown once per
//! state, never a pending one after its decision.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use kd_client::ClientError;
use kd_client::follow::{ApprovalFeed, Following, Next};
use kd_client::prelude::*;
use kd_client::terminal::safe;
use kd_proto::approval::{Approval, ApprovalEvent, ApprovalState, Decision, Scope};

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
    /// With --follow: when kdd goes away, reconnect for up to this long and go on (0: exit at once)
    #[arg(long, value_name = "SECONDS", default_value_t = 60, requires = "follow")]
    reconnect: u64,
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
        return follow(client, a).await;
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

/// How many approvals' last shown state [`Shown`] keeps before it forgets
/// the decided ones.
const SHOWN_KEPT: usize = 4096;

/// What `--follow` has shown: each approval's state, so that a line comes
/// once per state and a pending one never after its decision (a
/// resubscription or a listing again brings the pending ones again).
#[derive(Default)]
struct Shown(HashMap<String, ApprovalState>);

impl Shown {
    /// Whether `a` is news; noted as shown if so.
    fn news(&mut self, a: &Approval) -> bool {
        match self.0.get(&a.id) {
            Some(s) if *s == a.state || !s.is_pending() => return false,
            _ => {}
        }
        if self.0.len() >= SHOWN_KEPT {
            self.0.retain(|_, s| s.is_pending());
        }
        self.0.insert(a.id.clone(), a.state);
        true
    }
}

async fn follow(client: kd_client::Client, a: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let sub = client.approval_subscribe().await.map_err(ClientError::from)?;
    let mut follow = Following::of(client, sub, ApprovalFeed, Duration::from_secs(a.reconnect));
    let mut shown = Shown::default();
    // One listener for the whole follow: a Ctrl+C that comes while a line
    // is being shown is not lost.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        tokio::select! {
            next = follow.next() => match next {
                Next::Event(ApprovalEvent::Lagged { missed }) => {
                    errln!("kd: {missed} approval event(s) missed; listing again");
                    caught_up(follow.client()?, &a, &mut shown).await?;
                }
                Next::Event(ApprovalEvent::Requested { approval } | ApprovalEvent::Decided { approval }) => {
                    show(&a, &approval, &mut shown)?;
                }
                Next::Reconnecting => errln!("kd: kdd went away; reconnecting (up to {} s)…", a.reconnect),
                Next::Reconnected => {
                    errln!("kd: reconnected");
                    caught_up(follow.client()?, &a, &mut shown).await?;
                }
                Next::Gone(e) => return Err(e.into()),
            },
            _ = interrupt.recv() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// Shows `approval` if it is of the thread followed and news.
fn show(a: &ApprovalsArgs, approval: &Approval, shown: &mut Shown) -> anyhow::Result<()> {
    if a.thread.as_ref().is_some_and(|t| *t != approval.thread) || !shown.news(approval) {
        return Ok(());
    }
    if a.json {
        let e = match approval.state.is_pending() {
            true => ApprovalEvent::Requested { approval: Box::new(approval.clone()) },
            false => ApprovalEvent::Decided { approval: Box::new(approval.clone()) },
        };
        outln!("{}", serde_json::to_string(&e)?)?;
    } else {
        outln!("{}", line(approval))?;
    }
    Ok(())
}

/// After an outage or falling behind: what was missed, oldest first — the
/// pending ones not shown, and the decisions of those shown pending (the
/// latest page of approvals).
async fn caught_up(client: &kd_client::Client, a: &ApprovalsArgs, shown: &mut Shown) -> anyhow::Result<()> {
    let all = client.approval_list(Some(true), a.thread.clone(), None).await.map_err(ClientError::from)?;
    for ap in all.iter().rev() {
        let missed = match ap.state.is_pending() {
            true => true,
            false => shown.0.get(&ap.id).is_some_and(|s| s.is_pending()),
        };
        if missed {
            show(a, ap, shown)?;
        }
    }
    Ok(())
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
