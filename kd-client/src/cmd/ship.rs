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
use kd_proto::names::KING;
use kd_proto::types::{ExchangeState, ThreadEvent};
use kd_proto::work::RebaseOutcome;

use super::Ctx;
use super::work::work_thread;
use super::work_follow::RECONNECT;

use kd_proto::work::short_commit as short;

/// How long `kd rebase` waits for kd's word on the outcome once a
/// restarted kdd has no open exchange of the member's resolving: the
/// restarted kdd says it at once, when it follows the request again.
const OUTCOME_AFTER_RESTART: std::time::Duration = std::time::Duration::from_secs(10);

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
    // kdd too (one before the subscription is made included), which
    // follows the member's resumed run again. Said once followed.
    let waiting = ctx.client_waiting().await;
    let follow = Follow::start_after(waiting, client.socket(), thread.clone(), seq - 1, RECONNECT).await;
    errln!("{conflicts}");
    let mut follow = follow?;
    let styled = ctx.styled();
    // The King's latest message on the thread (kd asks the member again
    // while markers are left), and when kd's word is given up on: a restarted kdd follows
    // again only a request it left open, so once back with none open, kd's
    // word is waited for only while something still asks the member.
    let (mut latest, mut until) = (seq, None);
    loop {
        let next = match until {
            Some(at) => match tokio::time::timeout_at(at, follow.next()).await {
                Ok(next) => next,
                Err(_) if asked(&follow, &thread, latest, m).await => {
                    until = Some(tokio::time::Instant::now() + OUTCOME_AFTER_RESTART);
                    continue;
                }
                Err(_) => {
                    errln!(
                        "kd: kdd restarted and did not say how bringing {m}'s work up to date ended: kd rebase {m} \
                         takes up a merge left in progress, kd diff {m} shows the work"
                    );
                    return Ok(ExitCode::FAILURE);
                }
            },
            None => follow.next().await,
        };
        let message = match next {
            Next::Event(ThreadEvent::Message { message }) => message,
            Next::Event(_) => continue,
            Next::Reconnecting => {
                errln!("kd: kdd went away; reconnecting (up to {} s)…", RECONNECT.as_secs());
                continue;
            }
            Next::Reconnected => {
                errln!("kd: reconnected");
                // From now on kd's word is waited for while `asked`.
                until = Some(tokio::time::Instant::now() + OUTCOME_AFTER_RESTART);
                continue;
            }
            Next::Gone(e) => return Err(e.into()),
        };
        if message.is_kd_answer_to(seq) {
            outln!("{}", bold(styled, &safe(&message.body)))?;
            break;
        }
        // Asked again, or anything else asked on the thread (kd waits for
        // what may ask the member too).
        if message.from == KING && message.seq > latest {
            latest = message.seq;
        }
        if message.from == r.member && message.reply_to.is_some_and(|s| s >= seq) {
            outln!("{}:\n{}\n", bold(styled, &message.from), safe(&message.body))?;
        }
    }
    let trees = follow.client()?.work_list(None, Some(thread)).await.map_err(ClientError::from)?;
    let up_to_date = trees.iter().any(|w| w.member == r.member && w.base == r.onto);
    Ok(if up_to_date { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Whether something may still ask `member` on `thread`: the exchange
/// begun by the King's latest message there is open, or a run of the
/// member is in flight (kd's word on a rebase comes once nothing does).
async fn asked(follow: &Follow, thread: &str, latest: u64, member: &str) -> bool {
    let Ok(client) = follow.client() else { return true };
    // Gone again: the follower says so, and looks again once back.
    match client.exchange_get(thread.to_string(), latest).await.map_err(ClientError::from) {
        Ok(x) if x.state == ExchangeState::Open => return true,
        Err(e) if e.is_connection() => return true,
        _ => {}
    }
    match client.run_list(Some(thread.to_string())).await.map_err(ClientError::from) {
        Ok(runs) => runs.iter().any(|r| r.member == member),
        Err(e) => e.is_connection(),
    }
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
