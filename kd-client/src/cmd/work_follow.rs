//! Following members at work, as `kd work` and `kd review --send` do: the
//! runs a command started on a work thread, until each ended and its work
//! was committed and checked (and, with fix until green, fixed), and for a
//! vote until its tally is written. Each member's line is printed as its
//! work settles; an approval a member waits on is asked inline (y/a/n,
//! [`super::asking`]); the first Ctrl+C cancels the runs (kd commits what
//! each did so far), the second leaves.

use std::collections::{BTreeMap, BTreeSet};

use jsonrpsee::core::client::Subscription;
use kd_client::prelude::*;
use kd_client::terminal::safe;
use kd_client::{Client, ClientError};
use kd_proto::approval::ApprovalEvent;
use kd_proto::names::KD;
use kd_proto::types::{Purpose, ThreadEvent};
use kd_proto::work::{WorkState, Worktree};
use tokio::signal::unix::Signal;

use super::Ctx;
use super::asking::Asking;
use super::work::line;

/// The runs to follow.
pub struct Runs<'a> {
    pub thread: &'a str,
    /// The King's message they answer: what comes after it is read.
    pub seq: u64,
    /// Their ids.
    pub runs: Vec<String>,
    /// The members they are for: a member whose work settled before this
    /// client read it is told from the work list (its event may still be
    /// on its way when the list says nothing is left to wait for).
    pub members: Vec<String>,
    /// A vote: followed until its tally is written.
    pub vote: bool,
    /// Print each member's line (not with `--json`), and ask approvals on
    /// a terminal.
    pub lines: bool,
}

/// How following ended.
pub enum Followed {
    /// Every run ended, its work committed and checked: whether a run
    /// failed, and the vote's tally.
    Ended { failed: bool, tally: Option<String> },
    /// The King left (a second Ctrl+C).
    Left,
}

/// Follows `r` (see the module docs). `approvals`, subscribed before the
/// runs started, asks the King what they wait on; `interrupt` is Ctrl+C,
/// listened for from the start.
pub async fn follow(
    ctx: &Ctx,
    client: &Client,
    mut approvals: Option<Subscription<ApprovalEvent>>,
    interrupt: &mut Signal,
    r: Runs<'_>,
) -> anyhow::Result<Followed> {
    let styled = ctx.styled();
    let waiting = ctx.client_waiting().await?;
    let mut sub = waiting.thread_subscribe(r.thread.to_string(), Some(r.seq), None).await.map_err(ClientError::from)?;
    let mut pending: Vec<String> = r.runs;
    // Once the runs ended, the members whose check runs or who are sent back
    // to fix their work (none known yet: read when the runs have ended).
    let mut open: Option<BTreeSet<String>> = None;
    let mut said: BTreeMap<String, String> = Default::default();
    let mut failed = false;
    let mut tally = None;
    let mut interrupted = false;
    // Whether Ctrl+C found runs to cancel.
    let mut cancelled = false;
    // The members' lines line up.
    let width = r.members.iter().map(|m| m.chars().count()).max().unwrap_or(0);
    // An approval a member waits on is asked here, answered with a key.
    let mut asking = Asking::new(r.lines, styled);
    // A run that ended before this client listened sends no end: the
    // runs in flight now say which are still to come.
    let live = client.run_list(Some(r.thread.to_string())).await.map_err(ClientError::from)?;
    pending.retain(|id| live.iter().any(|run| run.id == *id));
    loop {
        if pending.is_empty() && open.is_none() {
            // What ended before this client listened is read once; what
            // changes after comes as events.
            let trees = client.work_list(None, Some(r.thread.to_string())).await.map_err(ClientError::from)?;
            open = Some(trees.iter().filter(|w| in_flight(w)).map(|w| w.member.clone()).collect());
            for w in trees.iter().filter(|w| r.members.contains(&w.member)) {
                tell(w, (r.lines, width), styled, &mut said)?;
            }
        }
        if pending.is_empty() && open.as_ref().is_some_and(|o| o.is_empty()) && (!r.vote || tally.is_some()) {
            break;
        }
        let event = tokio::select! {
            event = sub.next() => event,
            Some(Ok(e)) = next_approval(&mut approvals) => {
                let e = match e {
                    ApprovalEvent::Requested { approval } => ThreadEvent::ApprovalRequested { approval },
                    ApprovalEvent::Decided { approval } => ThreadEvent::ApprovalDecided { approval },
                    ApprovalEvent::Lagged { .. } => continue,
                };
                if asking.concerns(&e, |ap| ap.thread == r.thread) {
                    asking.on_event(&e, &mut std::io::stderr().lock())?;
                }
                continue;
            }
            choice = asking.choice() => {
                asking.decide(choice, client).await?;
                continue;
            }
            _ = interrupt.recv() => {
                if interrupted {
                    return Ok(Followed::Left);
                }
                interrupted = true;
                cancelled = !pending.is_empty();
                errln!("kd: cancelling the runs; kd commits what each member did so far (Ctrl+C again leaves)");
                for id in &pending {
                    let _ = client.run_cancel(r.thread.to_string(), None, Some(id.clone())).await;
                }
                continue;
            }
        };
        let Some(Ok(event)) = event else { break };
        match event {
            ThreadEvent::RunFinished { run, .. } | ThreadEvent::RunCancelled { run, .. } => {
                pending.retain(|p| *p != run);
            }
            ThreadEvent::RunError { run, member, error, .. } => {
                if pending.contains(&run) {
                    failed = true;
                    // The reason names the member already as a rule.
                    let said =
                        if error.starts_with(&format!("{member}:")) { error } else { format!("{member}: {error}") };
                    errln!("kd: {}", safe(&said));
                }
                pending.retain(|p| *p != run);
            }
            ThreadEvent::Work { worktree } => {
                if let Some(open) = &mut open {
                    if in_flight(&worktree) {
                        open.insert(worktree.member.clone());
                    } else {
                        open.remove(&worktree.member);
                    }
                }
                // Cancelled: told once its runs ended, as the cancel left it
                // (not first as the commit of what it did so far).
                if !interrupted || pending.is_empty() {
                    tell(&worktree, (r.lines, width), styled, &mut said)?;
                }
            }
            ThreadEvent::Message { message } if message.from == KD && message.purpose == Some(Purpose::Tally) => {
                tally = Some(message.body.clone());
            }
            _ => {}
        }
    }
    // Cancelled is not done.
    Ok(Followed::Ended { failed: failed || cancelled, tally })
}

/// Prints `w`'s line, once per change, when it says how a run left the
/// work (its check done) or how a try of a member sent back to fix it went.
fn tell(
    w: &Worktree,
    (lines, width): (bool, usize),
    styled: bool,
    said: &mut BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let told = !w.checking() && (w.state != WorkState::Working || w.fixing().is_some() && w.check.is_some());
    if told && lines {
        let l = line(w, styled, width);
        if said.get(&w.member) != Some(&l) {
            outln!("{l}")?;
            said.insert(w.member.clone(), l);
        }
    }
    Ok(())
}

/// The next approval event, when subscribed; else never.
async fn next_approval(
    sub: &mut Option<Subscription<ApprovalEvent>>,
) -> Option<Result<ApprovalEvent, jsonrpsee::core::client::Error>> {
    match sub {
        Some(sub) => sub.next().await.map(|e| e.map_err(Into::into)),
        None => std::future::pending().await,
    }
}

/// Whether a member's work goes on once its runs ended: its check runs, or
/// it is sent back to fix its work.
fn in_flight(w: &Worktree) -> bool {
    w.checking() || w.fixing().is_some()
}
