//! Following members at work, as `kd work` and `kd review --send` do: the
//! runs a command started on a work thread, until each ended and its work
//! was committed and checked (and, with fix until green, fixed), and for a
//! vote until its tally is written. Each member's line is printed as its
//! work settles; an approval a member waits on is asked inline (y/a/n,
//! [`super::asking`]); the first Ctrl+C cancels the runs (kd commits what
//! each did so far), the second leaves. It rides through a restart of
//! kdd ([`Follow`], for [`RECONNECT`] at most): the runs a restart cut are
//! resumed as new ones, so once back it waits for every member whose work
//! is still in progress, as the work list says.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jsonrpsee::core::client::Subscription;
use kd_client::follow::{Follow, Next};
use kd_client::prelude::*;
use kd_client::terminal::safe;
use kd_client::{Client, ClientError};
use kd_proto::approval::ApprovalEvent;
use kd_proto::names::KD;
use kd_proto::types::{ExchangeState, Purpose, RoundState, RunStatus, ThreadEvent};
use kd_proto::work::{WorkState, Worktree};
use tokio::signal::unix::Signal;

use super::Ctx;
use super::asking::Asking;
use super::work::line;

/// How long to try to reconnect when kdd goes away.
pub const RECONNECT: Duration = Duration::from_secs(60);

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
    /// failed, the vote's tally, and the connection to use on (a new one
    /// after kdd came back).
    Ended { failed: bool, tally: Option<String>, client: Option<Box<Client>> },
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
    // After kdd came back: a connection of its own (the follower's is its).
    let mut fresh: Option<Client> = None;
    let styled = ctx.styled();
    // kdd gone before the subscription is made: followed from reconnecting.
    let waiting = ctx.client_waiting().await;
    let mut follow = Follow::start_after(waiting, client.socket(), r.thread.to_string(), r.seq, RECONNECT).await?;
    // Since kdd came back: the runs it resumed are new ones, so the work
    // list says what is still to come.
    let mut resumed = false;
    // Since kdd came back, while the exchange is open: kdd goes on with it
    // (its runs resumed, or about to be).
    let mut exchange_open = false;
    let mut pending: Vec<String> = r.runs.clone();
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
    // (kdd gone meanwhile: the follower reconnects, and the work list says.)
    match client.run_list(Some(r.thread.to_string())).await.map_err(ClientError::from) {
        Ok(live) => pending.retain(|id| live.iter().any(|run| run.id == *id)),
        Err(e) if e.is_connection() => {}
        Err(e) => return Err(e.into()),
    }
    loop {
        let client = fresh.as_ref().unwrap_or(client);
        if pending.is_empty() && open.is_none() {
            // What ended before this client listened is read once; what
            // changes after comes as events.
            let trees = client.work_list(None, Some(r.thread.to_string())).await.map_err(ClientError::from)?;
            let going = |w: &Worktree| in_flight(w) || resumed && w.state == WorkState::Working;
            open = Some(trees.iter().filter(|w| going(w)).map(|w| w.member.clone()).collect());
            for w in trees.iter().filter(|w| r.members.contains(&w.member) && !(exchange_open && cut(w))) {
                tell(w, (r.lines, width), styled, &mut said)?;
            }
        }
        let settled = open.as_ref().is_some_and(|o| o.is_empty()) && !exchange_open;
        if pending.is_empty() && settled && (!r.vote || tally.is_some()) {
            break;
        }
        let next = tokio::select! {
            next = follow.next() => next,
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
                errln!("kd: cancelling the runs; kd commits what each member did so far (Ctrl+C again leaves)");
                // Since kdd came back, its resumed runs are new ones: the
                // members' runs on the thread now (during an outage: once
                // back).
                cancelled = cancel(client, (r.thread, &r.members), &pending, resumed).await || !pending.is_empty();
                continue;
            }
        };
        let event = match next {
            Next::Event(e) => e,
            Next::Reconnecting => {
                errln!("kd: kdd went away; reconnecting (up to {} s)…", RECONNECT.as_secs());
                continue;
            }
            Next::Reconnected => {
                errln!("kd: reconnected");
                let again = ctx.client().await?;
                if approvals.is_some() {
                    approvals = again.approval_subscribe().await.ok();
                }
                let going = again.exchange_get(r.thread.to_string(), r.seq).await;
                exchange_open = going.is_ok_and(|x| x.state == ExchangeState::Open);
                // A Ctrl+C during the outage reached no kdd: it is made now.
                if interrupted {
                    cancelled |= cancel(&again, (r.thread, &r.members), &[], true).await;
                }
                fresh = Some(again);
                (resumed, pending, open) = (true, Vec::new(), None);
                continue;
            }
            Next::Gone(e) => return Err(e.into()),
        };
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
                    if in_flight(&worktree) || resumed && worktree.state == WorkState::Working {
                        open.insert(worktree.member.clone());
                    } else {
                        open.remove(&worktree.member);
                    }
                }
                // Cancelled: told once its runs ended, as the cancel left it
                // (not first as the commit of what it did so far). Cut by
                // kdd stopping: told as the resumed run leaves it.
                if (!interrupted || pending.is_empty()) && !(cut(&worktree) && (!resumed || exchange_open)) {
                    tell(&worktree, (r.lines, width), styled, &mut said)?;
                }
            }
            ThreadEvent::Round { exchange, state, .. } if exchange == r.seq && state != RoundState::Running => {
                exchange_open = false;
                // What its last runs left is read again.
                open = None;
            }
            ThreadEvent::Message { message } if message.from == KD && message.purpose == Some(Purpose::Tally) => {
                // A vote's exchange ends with its tally.
                exchange_open = false;
                tally = Some(message.body.clone());
            }
            _ => {}
        }
    }
    // Cancelled is not done.
    Ok(Followed::Ended { failed: failed || cancelled, tally, client: fresh.map(Box::new) })
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

/// Cancels the runs followed: `pending`, or (`resumed`: kdd came back and
/// resumed them as new runs) the followed members' runs on the thread.
/// Whether there were any.
async fn cancel(client: &Client, (thread, members): (&str, &[String]), pending: &[String], resumed: bool) -> bool {
    let mut ids: Vec<String> = pending.to_vec();
    if resumed && let Ok(live) = client.run_list(Some(thread.to_string())).await {
        ids.extend(live.into_iter().filter(|run| members.contains(&run.member)).map(|run| run.id));
    }
    for id in &ids {
        let _ = client.run_cancel(thread.to_string(), None, Some(id.clone())).await;
    }
    !ids.is_empty()
}

/// Whether the work's last run was cut by kdd stopping (kdd resumes it).
fn cut(w: &Worktree) -> bool {
    w.last_run == Some(RunStatus::Interrupted)
}

/// Whether a member's work goes on once its runs ended: its check runs, or
/// it is sent back to fix its work.
fn in_flight(w: &Worktree) -> bool {
    w.checking() || w.fixing().is_some()
}
