//! The requests the chat's loop makes without waiting: each runs as a task
//! whose answer comes back on a channel as a [`Reply`], and [`on_reply`]
//! says what each answer does to the state. (What must happen before the
//! loop goes on — opening a thread, a fork — is the loop's own.)

use std::sync::Arc;

use kd_client::prelude::*;
use kd_client::{Client, ClientError};
use kd_proto::approval::Approval;
use kd_proto::comment::ReviewSent;
use kd_proto::types::{Aggregation, Completion, CostReport, RunInfo, Sent, Style, Thread};
use kd_proto::work::{Accepted, MemberDiff, PullRequest, Rebased, WorkStarted, Worktree};
use tokio::sync::mpsc;

use super::app::{App, Effect, Overlay};
use super::diff;

/// Answers to requests made from the loop.
pub(super) enum Reply {
    /// The answer to a message sent: the message as typed, and `council.send`'s answer.
    Sent(String, Result<Box<Sent>, ClientError>),
    Interrupted(Result<usize, ClientError>),
    Retried(Result<Vec<RunInfo>, ClientError>),
    Threads(Result<Vec<Thread>, ClientError>),
    Titled(Result<Thread, ClientError>),
    Found(Result<Vec<kd_proto::types::SearchHit>, ClientError>),
    Archived(Result<Thread, ClientError>),
    Unarchived(Result<Thread, ClientError>),
    Deleted(Result<kd_proto::types::Deleted, ClientError>),
    WorkStarted(Result<Box<WorkStarted>, ClientError>),
    Diffed(Result<Vec<MemberDiff>, ClientError>),
    Accepted(Result<Accepted, ClientError>),
    Rejected(Result<Worktree, ClientError>),
    Commented(Result<kd_proto::comment::Comment, ClientError>),
    /// `work.check`'s answers, the checks running.
    Checking(Result<Vec<Worktree>, ClientError>),
    Rebased(Result<Rebased, ClientError>),
    Shipped(Result<PullRequest, ClientError>),
    /// The council reviews member `.0`'s work: the review's message.
    Reviewing(String, Result<u64, ClientError>),
    ReviewSent(String, Result<ReviewSent, ClientError>),
    /// The chat's pending thread, made for a completion.
    Created(Thread),
    Completed(Result<Box<Completion>, ClientError>),
    Cancelled(Result<(Vec<RunInfo>, bool), ClientError>),
    Cost(Result<CostReport, ClientError>),
    Forked(Result<Thread, ClientError>),
    Approvals(Result<Vec<Approval>, ClientError>),
    /// The answer to a decision on approval `.0`.
    Decided(String, Result<Approval, ClientError>),
}

/// Sends a request without blocking the loop; the answer comes back as a [`Reply`].
pub(super) fn request(client: &Arc<Client>, app: &App, effect: Effect, tx: mpsc::UnboundedSender<Reply>) {
    let client = client.clone();
    let thread = app.thread.id.clone();
    let workspace = app.thread.workspace.clone();
    let new_thread = app.pending_new.clone();
    tokio::spawn(async move {
        let reply = match effect {
            Effect::Send { body, mute } => Reply::Sent(
                body.clone(),
                client
                    .council_send(
                        thread,
                        body,
                        None,
                        Some(mute),
                        Some(Style::Chat),
                        None,
                        None,
                        None,
                        new_thread,
                        kd_client::shell_path(),
                    )
                    .await
                    .map(Box::new)
                    .map_err(ClientError::from),
            ),
            Effect::Interrupt => Reply::Interrupted(
                client.council_interrupt(thread, None).await.map(|i| i.runs.len()).map_err(ClientError::from),
            ),
            Effect::Retry => Reply::Retried(
                client
                    .council_retry(thread, Some(Style::Chat), None, kd_client::shell_path())
                    .await
                    .map_err(ClientError::from),
            ),
            Effect::ListThreads => {
                Reply::Threads(client.thread_list(Some(workspace), None, Some(20)).await.map_err(ClientError::from))
            }
            Effect::SetTitle(title) => {
                Reply::Titled(client.thread_set_title(thread, title).await.map_err(ClientError::from))
            }
            Effect::Search(q) => {
                Reply::Found(client.search_query(q, None, None, None, Some(50)).await.map_err(ClientError::from))
            }
            Effect::Archive => Reply::Archived(client.thread_archive(thread).await.map_err(ClientError::from)),
            Effect::Unarchive => Reply::Unarchived(client.thread_unarchive(thread).await.map_err(ClientError::from)),
            // Runs in flight refuse it: the daemon's message says so.
            Effect::Delete => Reply::Deleted(client.thread_delete(thread, None).await.map_err(ClientError::from)),
            Effect::Work { task, to, vote } => Reply::WorkStarted(
                client
                    .work_start(workspace, task, to, Some(vote), kd_client::shell_path(), None)
                    .await
                    .map(Box::new)
                    .map_err(ClientError::from),
            ),
            // The daemon bounds the patch; the view shows where it is cut.
            Effect::Diff(member) => Reply::Diffed(
                client.work_diff(thread, Some(member), Some(false), None, None, None).await.map_err(ClientError::from),
            ),
            Effect::Accept { member, squash } => {
                Reply::Accepted(client.work_accept(thread, member, Some(squash), None).await.map_err(ClientError::from))
            }
            Effect::Comment { member, path, lines: (first, last), text } => Reply::Commented(
                client.work_comment(thread, member, path, first, Some(last), text).await.map_err(ClientError::from),
            ),
            Effect::Check(members) => {
                let mut trees = Vec::new();
                let mut failed = None;
                for m in members {
                    match client.work_check(thread.clone(), m, kd_client::shell_path()).await {
                        Ok(w) => trees.push(w),
                        Err(e) => {
                            failed = Some(ClientError::from(e));
                            break;
                        }
                    }
                }
                match failed {
                    // Those asked before the refusal still run: said when they end.
                    Some(e) if trees.is_empty() => Reply::Checking(Err(e)),
                    _ => Reply::Checking(Ok(trees)),
                }
            }
            Effect::Rebase(member) => Reply::Rebased(
                client.work_rebase(thread, member, kd_client::shell_path()).await.map_err(ClientError::from),
            ),
            // Over a connection without a request timeout (the loop's): a
            // push and gh are bounded by the daemon.
            Effect::Pr { member, accept } => Reply::Shipped(
                client.work_pr(thread, member, Some(accept), kd_client::shell_path()).await.map_err(ClientError::from),
            ),
            Effect::Review(member) => {
                let seq = client.work_review(thread, Some(member.clone()), None, None, kd_client::shell_path()).await;
                Reply::Reviewing(member, seq.map_err(ClientError::from))
            }
            Effect::SendReview { member, message } => {
                let sent = client.work_send_review(thread, member.clone(), message, kd_client::shell_path()).await;
                Reply::ReviewSent(member, sent.map_err(ClientError::from))
            }
            Effect::Reject(member) => {
                Reply::Rejected(client.work_reject(thread, member).await.map_err(ClientError::from))
            }
            Effect::Cancel(Some(member)) => Reply::Cancelled(
                client.run_cancel(thread, Some(member), None).await.map(|r| (r, false)).map_err(ClientError::from),
            ),
            Effect::Cancel(None) => Reply::Cancelled(
                client
                    .council_interrupt(thread, Some(true))
                    .await
                    .map(|i| (i.runs, i.stopped_exchange))
                    .map_err(ClientError::from),
            ),
            Effect::Fork { title, carry } => Reply::Forked(
                client.thread_fork(thread, title, carry, kd_client::shell_path()).await.map_err(ClientError::from),
            ),
            Effect::Cost => Reply::Cost(
                client
                    .cost_report(Some(thread), None, None, Some(kd_proto::types::CostBy::Member))
                    .await
                    .map_err(ClientError::from),
            ),
            Effect::ListApprovals => {
                Reply::Approvals(client.approval_list(None, None, None).await.map_err(ClientError::from))
            }
            Effect::Decide { id, decision, scope, message } => {
                let answer = client.approval_decide(id.clone(), decision, scope, message).await;
                Reply::Decided(id, answer.map_err(ClientError::from))
            }
            Effect::NewThread | Effect::Open(_) | Effect::OpenAt(..) | Effect::Complete { .. } | Effect::Exit => return,
        };
        let _ = tx.send(reply);
    });
}

/// A completion on the chat's thread (made first when it is still
/// pending), over `c`, a connection without a request timeout; what it
/// writes comes by the subscription, its outcome as a [`Reply`].
pub(super) fn complete(
    c: Arc<Client>,
    app: &App,
    question: String,
    vote: bool,
    chair: Option<String>,
    tx: mpsc::UnboundedSender<Reply>,
) {
    let thread = app.thread.id.clone();
    let pending = app.pending_new.clone();
    tokio::spawn(async move {
        if let Some(n) = pending {
            let made = c
                .thread_create(
                    n.workspace,
                    n.branch,
                    n.title,
                    None,
                    Some(thread.clone()),
                    n.lineage,
                    None,
                    Some(n.set_current),
                    n.context,
                )
                .await
                .map_err(ClientError::from);
            match made {
                Ok(t) => {
                    let _ = tx.send(Reply::Created(t));
                }
                Err(e) => {
                    let _ = tx.send(Reply::Completed(Err(e)));
                    return;
                }
            }
        }
        let aggregation = if chair.is_some() { Aggregation::Synthesize } else { Aggregation::Vote };
        let done = c
            .completion_agents(
                thread,
                question,
                None,
                None,
                None,
                Some(aggregation),
                Some(vote),
                chair,
                None,
                kd_client::shell_path(),
            )
            .await
            .map(Box::new)
            .map_err(ClientError::from);
        let _ = tx.send(Reply::Completed(done));
    });
}

pub(super) fn on_reply(app: &mut App, reply: Reply) -> Vec<Effect> {
    match reply {
        Reply::Created(t) => {
            app.pending_new = None;
            app.thread.lineage = t.lineage;
            app.thread.parent = t.parent;
        }
        Reply::Completed(Ok(c)) => app.on_completed(&c),
        Reply::Cancelled(Ok((runs, stopped))) => app.on_cancelled(&runs, stopped),
        Reply::Cost(Ok(report)) => app.on_cost(&report),
        // The branch is opened (the bundle, with what it carries, first).
        Reply::Forked(Ok(t)) => {
            app.set_notice(format!("forked from {}: this branch is the current thread", app.thread.id));
            return vec![Effect::Open(t.id)];
        }
        Reply::Sent(_, Ok(sent)) => {
            // The thread exists now.
            app.pending_new = None;
            app.on_sent(&sent);
        }
        Reply::Interrupted(Ok(n)) => {
            if n == 0 {
                app.set_notice("nothing of yours was running; pending auto-turns are stopped");
            }
        }
        Reply::Retried(Ok(runs)) if runs.is_empty() => app.set_notice("no failed members to retry"),
        Reply::Retried(Ok(runs)) => {
            for r in &runs {
                app.my_runs.insert(r.id.clone());
            }
            app.set_notice(format!(
                "retrying {}",
                runs.iter().map(|r| r.member.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        Reply::Threads(Ok(threads)) => app.overlay = Some(Overlay::Threads { threads, selected: 0 }),
        Reply::Titled(Ok(t)) => {
            app.thread.title = t.title;
            app.set_notice("titled");
        }
        Reply::Found(Ok(hits)) if hits.is_empty() => app.set_notice("no match"),
        Reply::Found(Ok(hits)) => app.overlay = Some(Overlay::Search { hits, selected: 0 }),
        Reply::Archived(Ok(t)) => {
            app.thread.status = t.status;
            app.thread.summary = t.summary;
            app.set_notice(format!(
                "archived: its runs stopped, its sessions ended, a summary is kept (`kd show {}`); /unarchive opens it again",
                t.id
            ));
        }
        Reply::Unarchived(Ok(t)) => {
            app.thread.status = t.status;
            app.set_notice(format!("unarchived: thread {} takes messages again", t.id));
        }
        // The thread is gone: a new one waits for its first message, and
        // the workspace's threads are offered.
        Reply::Deleted(Ok(d)) => {
            app.set_notice(format!("deleted thread {} ({} messages)", d.thread, d.messages));
            app.dirty = true;
            return vec![Effect::NewThread, Effect::ListThreads];
        }
        // The task's thread is opened: the members are seen at work there.
        Reply::WorkStarted(Ok(started)) => {
            app.my_runs.extend(started.runs.iter().cloned());
            let who: Vec<&str> = started.worktrees.iter().map(|w| w.member.as_str()).collect();
            app.set_notice(format!(
                "thread {}: {} at work, each in its own worktree{} · /diff MEMBER shows one's work",
                started.thread,
                who.join(", "),
                if started.vote { "; then they rank the diffs" } else { "" }
            ));
            return vec![Effect::Open(started.thread)];
        }
        Reply::Diffed(Ok(diffs)) => match diffs.first() {
            Some(d) => app.diff = Some(diff::DiffView::new(d)),
            None => app.set_notice("no diff"),
        },
        Reply::Accepted(Ok(a)) => {
            let commit = a.commit.as_deref().map(|c| format!(" as {}", &c[..c.len().min(10)])).unwrap_or_default();
            let others = if a.superseded.is_empty() {
                String::new()
            } else {
                format!("; superseded: {}", a.superseded.join(", "))
            };
            let into = kd_client::terminal::safe(&a.into);
            if !a.checked && a.commit.is_none() {
                app.set_notice(format!("{}'s work is in {into} already: accepted{others}", a.member));
            } else {
                app.set_notice(format!(
                    "{}{} {}'s work into {into}{commit}{others}",
                    if a.squash { "squashed" } else { "merged" },
                    if a.checked { " (check only)" } else { "" },
                    a.member,
                ));
            }
        }
        Reply::Commented(Ok(c)) => app.set_notice(format!(
            "comment {} on {}'s {} (pending: kd review --send {} sends it)",
            c.id,
            c.member,
            kd_client::terminal::safe(&c.location()),
            c.member
        )),
        Reply::Checking(Ok(trees)) => app.on_checking(trees),
        Reply::Checking(Err(e)) => {
            app.checks.clear();
            app.set_notice(kd_client::terminal::safe(&e.to_string()).into_owned());
        }
        Reply::Rebased(Ok(r)) => app.on_rebased(&r),
        Reply::Shipped(Ok(p)) => app.on_shipped(&p),
        Reply::Reviewing(member, Ok(seq)) => app.set_notice(format!(
            "the council reviews {member}'s work (message #{seq}); kd counts the verdicts here"
        )),
        Reply::ReviewSent(member, Ok(sent)) => app.on_review_sent(&member, &sent),
        Reply::Rejected(Ok(w)) => {
            app.on_work(&w);
            app.set_notice(format!("rejected {}'s work", w.member));
        }
        Reply::Approvals(Ok(list)) => {
            app.set_approvals(&list);
            if list.is_empty() {
                app.set_notice("no approval is pending");
            } else {
                app.overlay = Some(Overlay::Approvals(list));
            }
        }
        Reply::Decided(id, answer) => app.on_decided(&id, answer.map_err(|e| e.to_string())),
        Reply::Completed(Err(e)) => {
            app.completing = None;
            app.set_notice(kd_client::terminal::safe(&e.to_string()).into_owned());
        }
        Reply::Sent(body, Err(e)) => {
            // Refused by kdd: nothing was sent. (Lost on the way, it may
            // have been: Enter again could send it twice.)
            if matches!(e, ClientError::Rpc { .. }) {
                app.give_back(&body);
            }
            app.set_notice(kd_client::terminal::safe(&e.to_string()).into_owned());
        }
        Reply::Cancelled(Err(e))
        | Reply::Cost(Err(e))
        | Reply::Forked(Err(e))
        | Reply::WorkStarted(Err(e))
        | Reply::Diffed(Err(e))
        | Reply::Accepted(Err(e))
        | Reply::Rejected(Err(e))
        | Reply::Commented(Err(e))
        | Reply::Rebased(Err(e))
        | Reply::Shipped(Err(e))
        | Reply::Reviewing(_, Err(e))
        | Reply::ReviewSent(_, Err(e))
        | Reply::Interrupted(Err(e))
        | Reply::Retried(Err(e))
        | Reply::Threads(Err(e))
        | Reply::Titled(Err(e))
        | Reply::Found(Err(e))
        | Reply::Approvals(Err(e))
        | Reply::Archived(Err(e))
        | Reply::Unarchived(Err(e))
        // A refusal may quote what a member or git wrote (a conflicting path).
        | Reply::Deleted(Err(e)) => app.set_notice(kd_client::terminal::safe(&e.to_string()).into_owned()),
    }
    app.dirty = true;
    vec![]
}
