//! Members' work from the CLI (F-W1..W6): `kd work` gives a task to
//! members, each in a git worktree of its own, and follows their runs;
//! `kd work --list` lists the worktrees; `kd diff` shows what each changed;
//! `kd review` has the council judge a member's diff; `kd accept` merges
//! one into the King's branch; `kd reject` turns one down; `kd check`
//! (`check.rs`) runs a member's check again.

use std::process::ExitCode;

use clap::Args;
use kd_client::prelude::*;
use kd_client::style::{bold, dim, paint};
use kd_client::terminal::{safe, safe_line};
use kd_client::{Client, ClientError};
use kd_proto::names::KD;
use kd_proto::types::{RunStatus, ThreadEvent};
use kd_proto::work::{CheckStatus, MemberDiff, Shipped, WorkCheck, WorkState, Worktree};

use super::work_follow::{Followed, Runs, follow};
use super::{Ctx, print_json};
use crate::fmt::Table;

#[derive(Debug, Args)]
pub struct WorkArgs {
    /// What the members should do
    #[arg(value_name = "TASK", required_unless_present = "list")]
    task: Vec<String>,
    /// Only these members (comma-separated or repeated) [default: every member]
    #[arg(long, value_delimiter = ',')]
    to: Vec<String>,
    /// Best of N: once all are done, the members rank each other's diffs, anonymised
    #[arg(long)]
    vote: bool,
    /// Return once the task is given, without following the runs
    #[arg(long = "async")]
    no_wait: bool,
    /// Send a member whose check (work.check) fails back to fix it, up to N times [default: work.fix_rounds]
    #[arg(long = "until-green", value_name = "N")]
    until_green: Option<u32>,
    /// List the worktrees of this workspace (or of --thread) instead
    #[arg(long)]
    list: bool,
    /// With --list: only this thread's
    #[arg(long)]
    thread: Option<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

fn workspace() -> anyhow::Result<String> {
    Ok(kd_client::workspace::current()?.root.display().to_string())
}

pub async fn run(ctx: &Ctx, a: WorkArgs) -> anyhow::Result<ExitCode> {
    if a.list {
        return list(ctx, a).await;
    }
    // The first Ctrl+C cancels the members' runs (kd commits what they did
    // so far); the second leaves at once. Listened for from the start, so
    // that none is lost.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let client = ctx.client().await?;
    let task = a.task.join(" ");
    let to = (!a.to.is_empty()).then_some(a.to);
    // Listening for approvals before the members start, the King is asked
    // what they ask from their first step (the work's thread is made by
    // `work.start`: its subscription comes after).
    let approvals = match a.no_wait || a.json {
        true => None,
        false => Some(client.approval_subscribe().await.map_err(ClientError::from)?),
    };
    let started = client
        .work_start(workspace()?, task, to, Some(a.vote), kd_client::shell_path(), a.until_green)
        .await
        .map_err(ClientError::from)?;
    if a.json && a.no_wait {
        print_json(&started)?;
        return Ok(ExitCode::SUCCESS);
    }
    let styled = ctx.styled();
    let names: Vec<&str> = started.worktrees.iter().map(|w| w.member.as_str()).collect();
    let each = if names.len() == 1 { "in its own worktree" } else { "each in its own worktree" };
    errln!(
        "kd: thread {} — {} at work, {each}{}",
        started.thread,
        names.join(", "),
        if started.vote { "; then they rank the diffs" } else { "" }
    );
    if a.no_wait {
        errln!(
            "kd: what members ask permission for, and the approvals policy leaves to you, is refused unless a \
             King's client follows them: kd approvals --follow (or kd watch {})",
            started.thread
        );
        outln!("{}", started.thread)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Follow the runs until each ended and its work was committed (and,
    // for a vote, until the tally is written).
    let runs = Runs {
        thread: &started.thread,
        seq: started.seq,
        runs: started.runs.clone(),
        members: names.iter().map(|m| m.to_string()).collect(),
        vote: started.vote,
        lines: !a.json,
    };
    let Followed::Ended { failed, tally, client: fresh } =
        follow(ctx, &client, approvals, &mut interrupt, runs).await?
    else {
        return Ok(ExitCode::from(130));
    };
    let client = fresh.map_or(client, |c| *c);
    let trees = client.work_list(None, Some(started.thread.clone())).await.map_err(ClientError::from)?;
    // A check that did not pass (after its tries to fix it) fails kd work.
    let unchecked: Vec<&Worktree> = trees
        .iter()
        .filter(|w| {
            w.check
                .as_ref()
                .is_some_and(|c| matches!(c.status, CheckStatus::Fail | CheckStatus::Timeout | CheckStatus::Error))
        })
        .collect();
    if a.json {
        print_json(&trees)?;
    } else {
        for w in trees.iter().filter(|w| w.uncommitted.is_some()) {
            let why = w.uncommitted.as_deref().unwrap_or_default();
            errln!(
                "kd: {}'s last run is not committed ({}): its changes are in {} only, until its next run's end \
                 commits them",
                safe(&w.member),
                safe(why),
                safe(&w.path)
            );
        }
        if let Some(t) = &tally {
            outln!("\n{}", safe(t))?;
        }
        outln!(
            "\n{}",
            dim(
                styled,
                &format!(
                    "kd show {t} · kd diff {t} · kd review MEMBER --thread {t} · kd accept MEMBER --thread {t}",
                    t = started.thread
                )
            )
        )?;
    }
    for w in &unchecked {
        let summary = w.check.as_ref().map(|c| c.summary()).unwrap_or_default();
        errln!("kd: the check of {}'s work did not pass ({})", safe(&w.member), safe(&summary));
    }
    Ok(if failed || !unchecked.is_empty() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `1 file`, `3 files`.
fn files(n: usize) -> String {
    if n == 1 { "1 file".into() } else { format!("{n} files") }
}

/// One member's work in a line: member (padded to `width`, the longest
/// name of the lines said together), state, size, check, branch.
pub(super) fn line(w: &Worktree, styled: bool, width: usize) -> String {
    let size = if w.head == w.base {
        "no changes".to_string()
    } else {
        format!(
            "{}, {} {}",
            files(w.files as usize),
            paint(styled, 32, &format!("+{}", w.added)),
            paint(styled, 31, &format!("−{}", w.removed))
        )
    };
    let check = match &w.check {
        Some(c) => {
            let code = match c.status {
                CheckStatus::Pass => 32,
                CheckStatus::Running => 33,
                _ => 31,
            };
            format!("  {}", paint(styled, code, &c.summary()))
        }
        None => String::new(),
    };
    let member = format!("{:<width$}", w.member);
    format!("{}  {}  {size}{check}  {}", bold(styled, &member), state(w), dim(styled, &w.branch))
}

/// Where the work stands, and how its last run ended when that was not an
/// answer (`done (last run: error)`), or that its worktree is gone.
fn state(w: &Worktree) -> String {
    let mut s = w.fixing().unwrap_or_else(|| w.state.as_str().to_string());
    if let Some(last) = w.last_run.filter(|r| *r != RunStatus::Done && w.state == WorkState::Done) {
        s = format!("{s} (last run: {})", last.as_str().replace('_', " "));
    }
    if w.uncommitted.is_some() {
        s.push_str(" (last run not committed)");
    }
    if let Some(shipped) = &w.shipped {
        s.push_str(if shipped.pr { " (pull request)" } else { " (pushed)" });
    }
    if w.removed_at_ms.is_some() {
        s.push_str(" (removed)");
    }
    s
}

/// What was shipped of a member's work (`kd pr`), in a line: `pull request
/// URL (pushed to origin, 1a2b3c4d5e6f)`, or the page to open one.
pub fn shipped_line(s: &Shipped) -> String {
    let (remote, commit) = (safe(&s.remote), short(&s.commit));
    let pushed = format!("pushed to {remote} ({commit})");
    match (&s.url, s.pr) {
        (Some(url), true) => format!("pull request {} (pushed to {remote}, {commit})", safe(url)),
        (Some(url), false) => format!("{pushed}: open a pull request at {}", safe(url)),
        (None, _) => format!("{pushed}: open a pull request on your host"),
    }
}

async fn list(ctx: &Ctx, a: WorkArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let ws = if a.thread.is_some() { None } else { Some(workspace()?) };
    let trees = client.work_list(ws, a.thread).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&trees)?;
        return Ok(ExitCode::SUCCESS);
    }
    if trees.is_empty() {
        outln!("no work here: kd work \"TASK\" gives members some")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["THREAD", "MEMBER", "STATE", "CHECK", "FILES", "+/−", "BRANCH", "BASE", "WORKTREE"]);
    for w in &trees {
        t.row(vec![
            w.thread.clone(),
            w.member.clone(),
            state(w),
            w.check.as_ref().map(|c| c.summary().trim_start_matches("check ").to_string()).unwrap_or("-".into()),
            w.files.to_string(),
            format!("+{} −{}", w.added, w.removed),
            w.branch.clone(),
            w.base.chars().take(12).collect(),
            safe(&w.path).into_owned(),
        ]);
    }
    out!("{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}

/// The work thread named, or the newest of this workspace that has work
/// of `member` (any member when none is named).
pub async fn work_thread(client: &Client, thread: Option<String>, member: Option<&str>) -> anyhow::Result<String> {
    if let Some(t) = thread {
        return Ok(t);
    }
    let trees = client.work_list(Some(workspace()?), None).await.map_err(ClientError::from)?;
    trees
        .iter()
        .filter(|w| w.removed_at_ms.is_none())
        .find(|w| member.is_none_or(|m| w.member == m))
        .map(|w| w.thread.clone())
        .ok_or_else(|| match member {
            Some(m) => anyhow::anyhow!("{m} has no work in this workspace (kd work --list shows what there is)"),
            None => anyhow::anyhow!("no work in this workspace: kd work \"TASK\" gives members some"),
        })
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// [THREAD] [MEMBER]: the work thread [default: this workspace's newest] and one member [default: all]
    #[arg(value_name = "THREAD|MEMBER", num_args = 0..=2)]
    what: Vec<String>,
    /// The work thread (as the other work commands take it); then a lone word is the member
    #[arg(long)]
    thread: Option<String>,
    /// Only the files changed, with lines added and removed
    #[arg(long)]
    stat: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

/// `kd diff [THREAD] [MEMBER]`: a lone word is a member when this
/// workspace has work of a member of that name, else a thread.
pub async fn diff(ctx: &Ctx, a: DiffArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let (thread, member) = match (a.thread, a.what.as_slice()) {
        (Some(t), []) => (Some(t), None),
        (Some(t), [m]) => (Some(t), Some(m.clone())),
        (Some(_), _) => anyhow::bail!("with --thread, name only the member: kd diff MEMBER --thread T"),
        (None, []) => (None, None),
        (None, [one]) => {
            let trees = client.work_list(Some(workspace()?), None).await.map_err(ClientError::from)?;
            if trees.iter().any(|w| &w.member == one) { (None, Some(one.clone())) } else { (Some(one.clone()), None) }
        }
        (None, [t, m, ..]) => (Some(t.clone()), Some(m.clone())),
    };
    let thread = work_thread(&client, thread, member.as_deref()).await?;
    let diffs =
        client.work_diff(thread.clone(), member, Some(a.stat), None, None, None).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&diffs)?;
        return Ok(ExitCode::SUCCESS);
    }
    // What of it was pushed is on the worktree.
    let trees = client.work_list(None, Some(thread.clone())).await.map_err(ClientError::from)?;
    let styled = ctx.styled();
    for (i, d) in diffs.iter().enumerate() {
        if i > 0 {
            outln!()?;
        }
        let shipped = trees.iter().find(|w| w.member == d.member).and_then(|w| w.shipped.as_ref());
        print_diff(d, shipped, &thread, styled)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_diff(d: &MemberDiff, shipped: Option<&Shipped>, thread: &str, styled: bool) -> anyhow::Result<()> {
    let (added, removed) = d.files.iter().fold((0, 0), |(a, r), f| (a + f.added, r + f.removed));
    outln!(
        "{} {}  {}, +{added} −{removed}  {}",
        bold(styled, &d.member),
        d.state.as_str(),
        files(d.files.len()),
        dim(styled, &format!("{} {}..{}", d.branch, short(&d.base), short(&d.head)))
    )?;
    if let Some(c) = &d.check {
        outln!("  {}", check_line(c, styled))?;
    }
    if let Some(s) = shipped {
        outln!("  {}", shipped_line(s))?;
        // The work moved on since (a rebase, a review's revision).
        if s.commit != d.head {
            let again = format!("kd pr {} --thread {}", safe(&d.member), safe(thread));
            outln!("  {}", dim(styled, &format!("behind the work ({}): {again} pushes it", short(&d.head))))?;
        }
    }
    for f in &d.files {
        let counts = if f.binary { "binary".into() } else { format!("+{} −{}", f.added, f.removed) };
        outln!("  {}  {counts}", safe_line(&f.path))?;
    }
    if let Some(patch) = &d.patch {
        if !patch.is_empty() {
            outln!()?;
        }
        for l in patch.lines() {
            let l = safe(l);
            let code = match l.as_bytes().first() {
                Some(b'+') if !l.starts_with("+++") => Some(32),
                Some(b'-') if !l.starts_with("---") => Some(31),
                Some(b'@') => Some(36),
                _ => None,
            };
            match code {
                Some(c) => outln!("{}", paint(styled, c, &l))?,
                None if l.starts_with("diff --git") => outln!("{}", bold(styled, &l))?,
                None => outln!("{l}")?,
            }
        }
        if d.truncated {
            outln!("{}", dim(styled, "… (cut: the diff is larger; kd diff --json, or git diff in the worktree)"))?;
        }
    }
    Ok(())
}

use kd_proto::work::short_commit as short;

/// A check in a line: `check fail (exit 1) on 1a2b3c4d5e6f, 2.1 s`.
pub fn check_line(c: &WorkCheck, styled: bool) -> String {
    let code = match c.status {
        CheckStatus::Pass => 32,
        CheckStatus::Running => 33,
        _ => 31,
    };
    let took = if c.status == CheckStatus::Running {
        String::new()
    } else {
        format!(", {:.1} s", c.duration_ms as f64 / 1000.0)
    };
    format!("{} on {}{took}", paint(styled, code, &c.summary()), short(&c.commit))
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// Whose work to review (a member with work here), or a git revision: a commit or a branch
    #[arg(value_name = "MEMBER|REV")]
    what: String,
    /// Reviewers (comma-separated or repeated) [default: every other member]
    #[arg(long, value_delimiter = ',')]
    to: Vec<String>,
    /// The thread [default: MEMBER's newest work thread; for a revision, the current thread]
    #[arg(long)]
    thread: Option<String>,
    /// Send MEMBER the pending line comments on its work (kd comment) as one review; it revises
    #[arg(long, conflicts_with = "to")]
    send: bool,
    /// With --send: your words before the comments
    #[arg(long, requires = "send")]
    message: Option<String>,
    /// With --send: return once the review is sent, without following the member's run
    #[arg(long = "async", requires = "send")]
    no_wait: bool,
}

/// `kd review MEMBER|REV`: a lone word is a member when this workspace has
/// work of a member of that name, else a git revision, reviewed in the
/// current thread (made if there is none).
pub async fn review(ctx: &Ctx, a: ReviewArgs) -> anyhow::Result<ExitCode> {
    if a.send {
        return super::comment::send(ctx, a.what, a.thread, a.message, a.no_wait).await;
    }
    let client = ctx.client().await?;
    let ws = kd_client::workspace::current()?;
    let trees = client.work_list(Some(ws.root.display().to_string()), None).await.map_err(ClientError::from)?;
    let is_member = trees.iter().any(|w| w.member == a.what && a.thread.as_ref().is_none_or(|t| *t == w.thread));
    let to = (!a.to.is_empty()).then_some(a.to);
    let (thread, seq) = if is_member {
        let thread = work_thread(&client, a.thread, Some(&a.what)).await?;
        let seq = client
            .work_review(thread.clone(), Some(a.what), None, to, kd_client::shell_path())
            .await
            .map_err(ClientError::from)?;
        (thread, seq)
    } else {
        if a.thread.is_none() && !ws.root.join(".git").exists() {
            anyhow::bail!(
                "{} is not in a git repository and has no member's work named {}: nothing to review",
                ws.root.display(),
                a.what
            );
        }
        let thread = match a.thread {
            Some(t) => t,
            None => match client
                .thread_current(ws.root.display().to_string(), ws.branch.clone())
                .await
                .map_err(ClientError::from)?
            {
                Some(t) => t.id,
                None => {
                    let root = ws.root.display().to_string();
                    let t = client.thread_create(root, ws.branch, None, None, None, None, None, Some(true), None);
                    t.await.map_err(ClientError::from)?.id
                }
            },
        };
        let seq = client
            .work_review(thread.clone(), None, Some(a.what), to, kd_client::shell_path())
            .await
            .map_err(ClientError::from)?;
        (thread, seq)
    };
    // Follow the reviewers until kd counted their verdicts.
    let waiting = ctx.client_waiting().await?;
    let mut sub = waiting.thread_subscribe(thread.clone(), Some(seq - 1), None).await.map_err(ClientError::from)?;
    let styled = ctx.styled();
    while let Some(Ok(event)) = sub.next().await {
        if let ThreadEvent::Message { message } = event {
            if message.reply_to != Some(seq) {
                continue;
            }
            if message.from == KD {
                outln!("\n{}", bold(styled, &safe(&message.body)))?;
                break;
            }
            outln!("{}:\n{}\n", bold(styled, &message.from), safe(&message.body))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct AcceptArgs {
    /// Whose work to merge into your current branch
    member: String,
    /// One commit instead of a merge
    #[arg(long)]
    squash: bool,
    /// Only check that it would merge cleanly; change nothing
    #[arg(long)]
    check: bool,
    /// Accept it by a pull request instead: push its branch and open one (see kd pr)
    #[arg(long, conflicts_with_all = ["squash", "check"])]
    pr: bool,
    /// The work thread [default: this workspace's newest with MEMBER's work]
    #[arg(long)]
    thread: Option<String>,
}

pub async fn accept(ctx: &Ctx, a: AcceptArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = work_thread(&client, a.thread, Some(&a.member)).await?;
    if a.pr {
        let waiting = ctx.client_waiting().await?;
        return super::ship::open_pr(&waiting, thread, a.member, true).await;
    }
    let done = client.work_accept(thread, a.member, Some(a.squash), Some(a.check)).await.map_err(ClientError::from)?;
    if done.checked {
        outln!("{}'s work merges cleanly into {}", done.member, done.into)?;
    } else if done.commit.is_none() {
        outln!("{}'s work is in {} already: accepted, nothing merged", done.member, done.into)?;
    } else {
        let how = if done.squash { "squashed into" } else { "merged into" };
        outln!("{}'s work {how} {} ({})", done.member, done.into, short(done.commit.as_deref().unwrap_or_default()))?;
    }
    if !done.superseded.is_empty() {
        let verb = if done.checked { "would be" } else { "is" };
        outln!("the work of {} {verb} superseded", done.superseded.join(", "))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct RejectArgs {
    /// Whose work to turn down
    member: String,
    /// The work thread [default: this workspace's newest with MEMBER's work]
    #[arg(long)]
    thread: Option<String>,
}

pub async fn reject(ctx: &Ctx, a: RejectArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = work_thread(&client, a.thread, Some(&a.member)).await?;
    let w = client.work_reject(thread, a.member).await.map_err(ClientError::from)?;
    let branch = match w.removed_at_ms {
        Some(_) => format!("its branch {} is removed (the thread is archived)", w.branch),
        None => format!("its branch {} goes when the thread is archived", w.branch),
    };
    outln!("{}'s work on thread {} is rejected; {branch}", w.member, w.thread)?;
    Ok(ExitCode::SUCCESS)
}
