//! From a member's work to shipping it (issue 34): `kd rebase` brings a
//! member's work up to date with your branch (a merge into its branch; a
//! conflict is the member's to resolve, followed here until kd says how it
//! ended).

use std::process::ExitCode;

use clap::Args;
use kd_client::ClientError;
use kd_client::prelude::*;
use kd_client::style::bold;
use kd_client::terminal::safe;
use kd_proto::names::KD;
use kd_proto::types::ThreadEvent;
use kd_proto::work::RebaseOutcome;

use super::Ctx;
use super::work::work_thread;

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

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
            outln!("{m}'s work is already up to date with {} ({})", r.from, short(&r.onto))?;
            return Ok(ExitCode::SUCCESS);
        }
        RebaseOutcome::Merged => {
            outln!(
                "{} ({}) merged into {m}'s work cleanly ({}): kd accept {m} merges it",
                r.from,
                short(&r.onto),
                short(r.commit.as_deref().unwrap_or_default())
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        RebaseOutcome::Resolving => {}
    }
    errln!(
        "kd: {} ({}) conflicts with {m}'s work in {}: {m} is asked to resolve the conflicts in its worktree",
        r.from,
        short(&r.onto),
        safe(&r.conflicts.join(", "))
    );
    let Some(seq) = r.seq else { return Ok(ExitCode::FAILURE) };
    // Follow the member until kd says how it ended.
    let waiting = ctx.client_waiting().await?;
    let mut sub = waiting.thread_subscribe(thread.clone(), Some(seq - 1), None).await.map_err(ClientError::from)?;
    let styled = ctx.styled();
    while let Some(Ok(event)) = sub.next().await {
        if let ThreadEvent::Message { message } = event {
            if message.from == KD && message.reply_to == Some(seq) {
                outln!("{}", bold(styled, &safe(&message.body)))?;
                break;
            }
            if message.from == r.member && message.reply_to.is_some_and(|s| s >= seq) {
                outln!("{}:\n{}\n", bold(styled, &message.from), safe(&message.body))?;
            }
        }
    }
    let trees = client.work_list(None, Some(thread)).await.map_err(ClientError::from)?;
    let up_to_date = trees.iter().any(|w| w.member == r.member && w.base == r.onto);
    Ok(if up_to_date { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
