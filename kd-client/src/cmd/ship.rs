//! From a member's work to shipping it (issue 34): `kd rebase` brings a
//! member's work up to date with your branch (a merge into its branch; a
//! conflict is the member's to resolve, followed here until kd says how it
//! ended, through a restart of kdd too); `kd pr` (and `kd accept --pr`) pushes a member's branch and
//! opens a pull request.

use std::process::ExitCode;

use clap::Args;
use kd_client::follow::{Follow, Next};
use kd_client::prelude::*;
use kd_client::style::bold;
use kd_client::terminal::{safe, safe_line};
use kd_client::{Client, ClientError};
use kd_proto::names::KD;
use kd_proto::types::ThreadEvent;
use kd_proto::work::RebaseOutcome;

use super::Ctx;
use super::work::work_thread;
use super::work_follow::RECONNECT;

use kd_proto::work::short_commit as short;

#[derive(Debug, Args)]
pub struct RebaseArgs {
    /// Whose work to bring up to date with your current branch
    member: String,
    /// The work thread [default: this workspace's newest with MEMBER's work]
    #[arg(long)]
    thread: Option<String>,
}

/// `kd rebase MEMBER`: merges the King's HEAD into the member's branch;
/// on a conflict, follows the member resolving it until kd says how it
/// ended (exit status 1 when the work is not up to date).
pub async fn rebase(ctx: &Ctx, a: RebaseArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = work_thread(&client, a.thread, Some(&a.member)).await?;
    let r = client
        .work_rebase(thread.clone(), a.member.clone(), kd_client::shell_path())
        .await
        .map_err(ClientError::from)?;
    let m = &r.member;
    match r.outcome {
        RebaseOutcome::UpToDate => {
            outln!("{m}'s work is already up to date with {}", r.merged_in())?;
            if r.commit.is_some() {
                outln!("its base is now {}: kd diff {m} shows what it adds", r.merged_in())?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        RebaseOutcome::Merged => {
            outln!(
                "{} merged into {m}'s work cleanly ({}): kd accept {m} merges it",
                r.merged_in(),
                short(r.commit.as_deref().unwrap_or_default())
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        RebaseOutcome::Resolving => {}
    }
    let conflicts = format!(
        "kd: {} conflicts with {m}'s work in {}: {m} is asked to resolve the conflicts in its worktree",
        r.merged_in(),
        r.conflicts.iter().map(|f| safe_line(f)).collect::<Vec<_>>().join(", ")
    );
    let Some(seq) = r.seq else {
        errln!("{conflicts}");
        return Ok(ExitCode::FAILURE);
    };
    // Follow the member until kd says how it ended — through a restart of
    // kdd too, which follows the member's resumed run again. Said once
    // followed.
    let subscribed = async {
        let waiting = ctx.client_waiting().await?;
        let sub = waiting.thread_subscribe(thread.clone(), Some(seq - 1), None).await.map_err(ClientError::from)?;
        anyhow::Ok((waiting, sub))
    };
    let subscribed = subscribed.await;
    errln!("{conflicts}");
    let (waiting, sub) = subscribed?;
    let mut follow = Follow::new(waiting, sub, thread.clone(), seq - 1, RECONNECT);
    let styled = ctx.styled();
    loop {
        let message = match follow.next().await {
            Next::Event(ThreadEvent::Message { message }) => message,
            Next::Event(_) => continue,
            Next::Reconnecting => {
                errln!("kd: kdd went away; reconnecting (up to {} s)…", RECONNECT.as_secs());
                continue;
            }
            Next::Reconnected => {
                errln!("kd: reconnected");
                continue;
            }
            Next::Gone(e) => return Err(e.into()),
        };
        if message.from == KD && message.reply_to == Some(seq) {
            outln!("{}", bold(styled, &safe(&message.body)))?;
            break;
        }
        if message.from == r.member && message.reply_to.is_some_and(|s| s >= seq) {
            outln!("{}:\n{}\n", bold(styled, &message.from), safe(&message.body))?;
        }
    }
    let trees = follow.client().work_list(None, Some(thread)).await.map_err(ClientError::from)?;
    let up_to_date = trees.iter().any(|w| w.member == r.member && w.base == r.onto);
    Ok(if up_to_date { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[derive(Debug, Args)]
pub struct PrArgs {
    /// Whose work to push and open a pull request of
    member: String,
    /// The work thread [default: this workspace's newest with MEMBER's work]
    #[arg(long)]
    thread: Option<String>,
}

/// `kd pr MEMBER`.
pub async fn pr(ctx: &Ctx, a: PrArgs) -> anyhow::Result<ExitCode> {
    // A push and gh may take longer than a request's usual bound: kdd
    // bounds each (2 min, 1 min) and stops them when this client goes.
    let client = ctx.client_waiting().await?;
    let thread = work_thread(&client, a.thread, Some(&a.member)).await?;
    open_pr(&client, thread, a.member, false).await
}

/// Pushes the member's branch and opens a pull request (`accept`: the work
/// is accepted by it); prints its URL, or the host's page to open one.
pub async fn open_pr(client: &Client, thread: String, member: String, accept: bool) -> anyhow::Result<ExitCode> {
    let p = client.work_pr(thread, member, Some(accept), kd_client::shell_path()).await.map_err(ClientError::from)?;
    let s = &p.shipped;
    errln!("kd: {} pushed to {} ({})", p.branch, s.remote, short(&s.commit));
    if let Some(note) = &p.note {
        errln!("kd: {}", safe(note));
    }
    if s.pr {
        outln!("{}", safe(s.url.as_deref().unwrap_or_default()))?;
    } else {
        match &s.url {
            Some(url) => {
                errln!("kd: open a pull request of {} into {} at:", p.branch, p.base);
                outln!("{}", safe(url))?;
            }
            None => errln!("kd: open a pull request of {} into {} on your host", p.branch, p.base),
        }
    }
    if p.accepted {
        errln!("kd: {}'s work is accepted by its pull request", p.member);
        if !p.superseded.is_empty() {
            errln!("kd: the work of {} is superseded", p.superseded.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
