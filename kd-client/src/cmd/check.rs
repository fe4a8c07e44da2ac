//! `kd check [MEMBER]`: runs the check (`work.check`) again in a member's
//! worktree — or in each member's of the thread — on its last commit, and
//! prints each result as it comes (`work.check`, then the thread's `work`
//! events). Exits non-zero unless every check passed.

use std::collections::BTreeSet;
use std::process::ExitCode;

use clap::Args;
use kd_client::ClientError;
use kd_client::prelude::*;
use kd_client::style::{bold, dim};
use kd_client::terminal::safe;
use kd_proto::types::ThreadEvent;
use kd_proto::work::{CheckStatus, WorkCheck, Worktree};

use super::work::{check_line, work_thread};
use super::{Ctx, print_json};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Whose work to check [default: every member's with work on the thread]
    member: Option<String>,
    /// The work thread [default: this workspace's newest with MEMBER's work]
    #[arg(long)]
    thread: Option<String>,
    /// Print the worktrees as JSON once checked
    #[arg(long)]
    json: bool,
}

pub async fn run(ctx: &Ctx, a: CheckArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = work_thread(&client, a.thread, a.member.as_deref()).await?;
    let members: Vec<String> = match a.member {
        Some(m) => vec![m],
        None => {
            let trees = client.work_list(None, Some(thread.clone())).await.map_err(ClientError::from)?;
            let open: Vec<String> = trees
                .iter()
                .filter(|w| w.state.takes_work() && w.removed_at_ms.is_none())
                .map(|w| w.member.clone())
                .collect();
            if open.is_empty() {
                anyhow::bail!("thread {thread} has no work to check (kd work --list shows what there is)");
            }
            open
        }
    };
    // Listening first, so that no result is missed.
    let waiting = ctx.client_waiting().await?;
    let mut sub = waiting.thread_subscribe(thread.clone(), None, None).await.map_err(ClientError::from)?;
    let mut open = BTreeSet::new();
    let mut done: Vec<Worktree> = Vec::new();
    for m in &members {
        let w =
            client.work_check(thread.clone(), m.clone(), kd_client::shell_path()).await.map_err(ClientError::from)?;
        if w.checking() {
            open.insert(m.clone());
        } else {
            done.push(w);
        }
    }
    let styled = ctx.styled();
    if !a.json && !open.is_empty() {
        errln!("kd: checking the work of {} on thread {thread}", open.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    while !open.is_empty() {
        let Some(Ok(event)) = sub.next().await else { break };
        if let ThreadEvent::Work { worktree } = event
            && open.contains(&worktree.member)
            && !worktree.checking()
        {
            open.remove(&worktree.member);
            done.push(*worktree);
        }
    }
    if !open.is_empty() {
        anyhow::bail!(
            "the daemon went away before the check of {} ended",
            open.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    let passed = done.iter().all(|w| w.check.as_ref().is_some_and(|c| c.status == CheckStatus::Pass));
    if a.json {
        print_json(&done)?;
    } else {
        for w in &done {
            let Some(c) = &w.check else { continue };
            outln!("{}  {}", bold(styled, &w.member), check_line(c, styled))?;
            for l in failure_tail(c) {
                outln!("  {}", dim(styled, &l))?;
            }
        }
    }
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The last 20 lines of what a check that did not pass printed, escaped
/// for a terminal (none for a pass).
pub fn failure_tail(c: &WorkCheck) -> Vec<String> {
    if c.status == CheckStatus::Pass || c.output.trim().is_empty() {
        return Vec::new();
    }
    let lines: Vec<&str> = c.output.lines().collect();
    lines[lines.len().saturating_sub(20)..].iter().map(|l| safe(l).into_owned()).collect()
}
