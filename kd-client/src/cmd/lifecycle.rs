//! Threads' lifecycle from the CLI: `kd fork`, `kd title`, `kd archive`,
//! `kd unarchive`, `kd delete`.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use clap::Args;
use kd_client::ClientError;
use kd_client::prelude::*;
use kd_client::terminal::safe;

use super::{Ctx, thread_or_current};

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The thread to branch from [default: the current thread of this workspace and branch]
    thread: Option<String>,
    /// The branch's title
    #[arg(long)]
    title: Option<String>,
    /// What the branch carries of its parent beside the context bundle's files
    /// [default: lifecycle.fork_carry, else conversation]
    #[arg(long, value_enum, value_name = "WHAT")]
    carry: Option<Carry>,
}

/// What a fork carries of its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Carry {
    /// The parent's conversation so far, as history
    Conversation,
    /// A summary of the parent made now (by lifecycle.summarizer, else extractive)
    Summary,
    /// Only the identity and policy files (and the parent's stored summary)
    None,
}

impl From<Carry> for kd_proto::types::Carry {
    fn from(c: Carry) -> Self {
        match c {
            Carry::Conversation => kd_proto::types::Carry::Conversation,
            Carry::Summary => kd_proto::types::Carry::Summary,
            Carry::None => kd_proto::types::Carry::None,
        }
    }
}

pub async fn fork(ctx: &Ctx, a: ForkArgs) -> anyhow::Result<ExitCode> {
    // A summary made at the fork is a member's run: no request timeout.
    let client = match a.carry {
        Some(Carry::Summary) => ctx.client_waiting().await?,
        _ => ctx.client().await?,
    };
    let parent = thread_or_current(&client, a.thread).await?.id;
    let t = client
        .thread_fork(parent.clone(), a.title, a.carry.map(Into::into), kd_client::shell_path())
        .await
        .map_err(ClientError::from)?;
    let bundle = match t.last_seq {
        0 => None,
        _ => {
            client.thread_messages(t.id.clone(), None, Some(1), None, None).await.ok().and_then(|m| m.into_vec().pop())
        }
    };
    let carried = bundle.map(|m| bundle_parts(&m.body)).filter(|p| !p.is_empty());
    outln!("{}", t.id)?;
    errln!("kd: forked {parent} into branch {}; it is now the current thread", t.id);
    match carried {
        Some(parts) => errln!("kd: its context bundle: {}", safe(&parts.join(" · "))),
        None => errln!("kd: it starts with nothing of {parent}'s (no bundle files, nothing said)"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The parts of a context bundle, from its `=== … ===` headings: the files,
/// the parent's summary, and what the fork carried (last; what follows its
/// heading is the parent's conversation, whose own headings are not the
/// bundle's).
fn bundle_parts(body: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for line in body.lines() {
        let Some(part) = line.strip_prefix("=== ").and_then(|l| l.strip_suffix(" ===")) else { continue };
        parts.push(part.to_string());
        if part.starts_with("conversation of thread ") || part.contains("made at the fork") {
            break;
        }
    }
    parts
}

#[derive(Debug, Args)]
pub struct TitleArgs {
    /// The thread
    thread: String,
    /// Its new title (one line)
    #[arg(required = true, value_name = "TITLE")]
    title: Vec<String>,
}

pub async fn title(ctx: &Ctx, a: TitleArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let t = client.thread_set_title(a.thread, a.title.join(" ")).await.map_err(ClientError::from)?;
    outln!("{}: {}", t.id, safe(t.title.as_deref().unwrap_or_default()))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct ThreadArg {
    /// The thread [default: the current thread of this workspace and branch]
    thread: Option<String>,
}

pub async fn archive(ctx: &Ctx, a: ThreadArg) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let id = thread_or_current(&client, a.thread).await?.id;
    // Archiving stops the thread's runs: say whose.
    let running: Vec<String> =
        client.run_list(Some(id.clone())).await.map_err(ClientError::from)?.into_iter().map(|r| r.member).collect();
    let t = client.thread_archive(id).await.map_err(ClientError::from)?;
    outln!("archived thread {}", t.id)?;
    if !running.is_empty() {
        outln!("cancelled the runs in flight of {} (a member's work so far is committed)", running.join(", "))?;
    }
    // Members' work that was neither accepted nor rejected stays.
    let kept: Vec<String> = client
        .work_list(None, Some(t.id.clone()))
        .await
        .map_err(ClientError::from)?
        .into_iter()
        .filter(|w| w.removed_at_ms.is_none())
        .map(|w| format!("{} ({})", w.member, safe(&w.path)))
        .collect();
    if !kept.is_empty() {
        outln!(
            "kept the work of {}: kd accept or kd reject it, or kd delete {} --force to discard it",
            kept.join(", "),
            t.id
        )?;
    }
    if let Some(s) = &t.summary {
        outln!("\n{}", safe(s))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn summarize(ctx: &Ctx, a: ThreadArg) -> anyhow::Result<ExitCode> {
    // The summarizer may take as long as any run: no request timeout.
    let id = thread_or_current(&ctx.client().await?, a.thread).await?.id;
    let client = ctx.client_waiting().await?;
    let t = client.thread_summarize(id, kd_client::shell_path()).await.map_err(ClientError::from)?;
    outln!("{}", safe(t.summary.as_deref().unwrap_or_default()))?;
    Ok(ExitCode::SUCCESS)
}

pub async fn unarchive(ctx: &Ctx, a: ThreadArg) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let id = thread_or_current(&client, a.thread).await?.id;
    let t = client.thread_unarchive(id).await.map_err(ClientError::from)?;
    outln!("thread {} is active again", t.id)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The thread
    thread: String,
    /// Do not ask (needed when stdin is not a terminal)
    #[arg(long, short = 'y')]
    yes: bool,
    /// Cancel the thread's runs in flight first, and discard members' work not accepted or rejected
    #[arg(long)]
    force: bool,
}

pub async fn delete(ctx: &Ctx, a: DeleteArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let t = client.thread_get(a.thread.clone()).await.map_err(ClientError::from)?;
    if !a.force {
        let running = client.run_list(Some(t.id.clone())).await.map_err(ClientError::from)?.len();
        if running > 0 {
            let s = if running == 1 { "" } else { "s" };
            anyhow::bail!(
                "thread {} has {running} run{s} in flight; `kd delete {} --force` cancels them first",
                t.id,
                t.id
            );
        }
    }
    if !a.force {
        // Members' work kd would refuse to lose: said before asking.
        let unsettled: Vec<String> = client
            .work_list(None, Some(t.id.clone()))
            .await
            .map_err(ClientError::from)?
            .into_iter()
            .filter(|w| w.removed_at_ms.is_none() && !w.state.is_settled() && w.head != w.base)
            .map(|w| w.member)
            .collect();
        if !unsettled.is_empty() {
            anyhow::bail!(
                "thread {} holds work not accepted or rejected, of {}: kd accept or kd reject it, or `kd delete {} \
                 --yes --force` discards it",
                t.id,
                unsettled.join(", "),
                t.id
            );
        }
    }
    if !a.yes {
        if !std::io::stdin().is_terminal() {
            anyhow::bail!(
                "deleting thread {} takes its {} with it; pass --yes to confirm",
                t.id,
                crate::fmt::count(t.last_seq, "message")
            );
        }
        let title = t.title.as_deref().map(|x| format!(" ({})", safe(x))).unwrap_or_default();
        errln!("Delete thread {}{title} and its {}? [y/N] ", t.id, crate::fmt::count(t.last_seq, "message"));
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            outln!("kept thread {}", t.id)?;
            return Ok(ExitCode::FAILURE);
        }
    }
    let d = client.thread_delete(t.id, Some(a.force)).await.map_err(ClientError::from)?;
    let cancelled = match d.cancelled_runs {
        0 => String::new(),
        n => format!(", {n} run{} cancelled", if n == 1 { "" } else { "s" }),
    };
    outln!("deleted thread {} ({}{cancelled})", d.thread, crate::fmt::count(d.messages, "message"))?;
    Ok(ExitCode::SUCCESS)
}
