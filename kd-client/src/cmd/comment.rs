//! Line comments on members' work from the CLI (issue 34): `kd comment`
//! adds one on lines of a member's diff (or `--resolve`s one), `kd
//! comments` lists them, `kd review --send` sends the pending ones to the
//! member as one review and follows its revising run.

use std::process::ExitCode;

use clap::Args;
use kd_client::ClientError;
use kd_client::prelude::*;
use kd_client::terminal::safe;
use kd_proto::comment::{Comment, CommentState};

use super::work::work_thread;
use super::work_follow::{Followed, Runs, follow};
use super::{Ctx, print_json};
use crate::fmt::Table;

#[derive(Debug, Args)]
pub struct CommentArgs {
    /// Whose work
    #[arg(value_name = "MEMBER", required_unless_present = "resolve")]
    member: Option<String>,
    /// The lines: PATH:LINE or PATH:FIRST-LAST (new side of the diff)
    #[arg(value_name = "PATH:LINE[-LINE]", required_unless_present = "resolve")]
    at: Option<String>,
    /// What should change
    #[arg(value_name = "TEXT", required_unless_present = "resolve")]
    text: Vec<String>,
    /// The work thread [default: this workspace's newest with MEMBER's work]
    #[arg(long)]
    thread: Option<String>,
    /// Mark the comment ID resolved instead
    #[arg(long, value_name = "ID", conflicts_with_all = ["member", "at", "text"])]
    resolve: Option<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn comment(ctx: &Ctx, a: CommentArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    if let Some(id) = a.resolve {
        let c = client.work_resolve_comment(id).await.map_err(ClientError::from)?;
        if a.json {
            print_json(&c)?;
        } else {
            outln!("comment {} on {}'s {} is resolved", c.id, c.member, safe(&c.location()))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (Some(member), Some(at)) = (a.member, a.at) else { anyhow::bail!("say MEMBER PATH:LINE TEXT") };
    let Some((path, (first, last))) = location(&at) else {
        anyhow::bail!("{at} is not PATH:LINE or PATH:FIRST-LAST (lines from 1, first ≤ last)")
    };
    let thread = work_thread(&client, a.thread, Some(&member)).await?;
    let body = a.text.join(" ");
    let c = client.work_comment(thread, member, path, first, Some(last), body).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&c)?;
    } else {
        outln!(
            "comment {} on {}'s {} (pending: kd review --send {} sends it)",
            c.id,
            c.member,
            safe(&c.location()),
            c.member
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `PATH:LINE` or `PATH:FIRST-LAST`.
pub fn location(s: &str) -> Option<(String, (u32, u32))> {
    let (path, lines) = s.rsplit_once(':')?;
    let (a, b) = match lines.split_once('-') {
        Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
        None => {
            let a = lines.parse().ok()?;
            (a, a)
        }
    };
    (!path.is_empty() && a >= 1 && a <= b).then(|| (path.to_string(), (a, b)))
}

#[derive(Debug, Args)]
pub struct CommentsArgs {
    /// Only this member's work
    member: Option<String>,
    /// The work thread [default: this workspace's newest with work (of MEMBER)]
    #[arg(long)]
    thread: Option<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn comments(ctx: &Ctx, a: CommentsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = work_thread(&client, a.thread, a.member.as_deref()).await?;
    let all = client.work_comments(thread, a.member).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&all)?;
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        outln!("no comments: kd comment MEMBER PATH:LINE \"TEXT\" adds one")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["ID", "MEMBER", "STATE", "WHERE", "BY", "COMMENT"]);
    for c in &all {
        let first: String = c.body.lines().next().unwrap_or_default().chars().take(60).collect();
        t.row(vec![
            c.id.clone(),
            c.member.clone(),
            state(c),
            safe(&c.location()).into_owned(),
            c.author.clone(),
            safe(&first).into_owned(),
        ]);
    }
    out!("{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}

/// `pending`, `sent (#12)`, `resolved (by 1a2b3c4d5e6f)`, `resolved (by the King)`.
fn state(c: &Comment) -> String {
    match c.state {
        CommentState::Pending => "pending".into(),
        CommentState::Sent => format!("sent (#{})", c.sent_seq.unwrap_or_default()),
        CommentState::Resolved => match &c.resolved_by {
            Some(commit) => format!("resolved (by {})", &commit[..commit.len().min(12)]),
            None => "resolved (by the King)".into(),
        },
    }
}

/// `kd review --send MEMBER [--message TEXT] [--async]`: the pending
/// comments as one review to the member; follows its revising run as `kd
/// work` follows its runs (approvals asked inline, Ctrl+C cancels) until
/// its work is committed and checked, then says how many comments its
/// commit resolved. `--async` returns at once, saying how to follow.
pub async fn send(
    ctx: &Ctx,
    member: String,
    thread: Option<String>,
    message: Option<String>,
    no_wait: bool,
) -> anyhow::Result<ExitCode> {
    // Listened for from the start, so that none is lost.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let client = ctx.client().await?;
    let thread = work_thread(&client, thread, Some(&member)).await?;
    // Listening for approvals before the member starts, the King is asked
    // what it asks from its first step.
    let approvals = match no_wait {
        true => None,
        false => Some(client.approval_subscribe().await.map_err(ClientError::from)?),
    };
    let sent = client
        .work_send_review(thread.clone(), member.clone(), message, kd_client::shell_path())
        .await
        .map_err(ClientError::from)?;
    let n = sent.comments.len();
    errln!(
        "kd: sent {n} comment{} to {member} (message #{} on thread {thread}); {member} revises in its worktree",
        if n == 1 { "" } else { "s" },
        sent.seq
    );
    if no_wait {
        errln!(
            "kd: its run {}: kd watch {thread} follows it, kd work --list --thread {thread} shows its work",
            sent.runs.join(", ")
        );
        outln!("{thread}")?;
        return Ok(ExitCode::SUCCESS);
    }
    let members = vec![member.to_string()];
    let runs = Runs { thread: &thread, seq: sent.seq, runs: sent.runs.clone(), members, vote: false, lines: true };
    let Followed::Ended { failed, client: fresh, .. } = follow(ctx, &client, approvals, &mut interrupt, runs).await?
    else {
        return Ok(ExitCode::from(130));
    };
    let client = fresh.map_or(client, |c| *c);
    let now = client.work_comments(thread.clone(), Some(member.clone())).await.map_err(ClientError::from)?;
    let resolved =
        now.iter().filter(|c| sent.comments.iter().any(|s| s.id == c.id) && c.state == CommentState::Resolved);
    outln!("{} of the {n} comments resolved by its commit (kd comments {member})", resolved.count())?;
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
