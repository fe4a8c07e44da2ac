//! A member brings its work up to date (issue 34, `work.rebase`): when the
//! King's branch has moved on so that `kd accept` would conflict, kd
//! merges the King's current HEAD into the member's branch in its worktree
//! — a merge, never a rewrite: every commit of the member stays on its
//! branch ([`crate::git::merge`]). A clean merge is committed at once. A
//! conflicted one is left in progress and the member is asked, in a King's
//! message to it on the work thread (so a work run in its worktree), to
//! resolve the markers, told the files and what the King's side changed in
//! them. When that run ends, kd's commit of the member's work
//! ([`crate::agent::work::commit`]) concludes the merge — refused while a
//! marker is left. Markers left, the member is told again, once; then the
//! merge is undone (the branch as it was, every commit kept) and kd says
//! so. Whatever the outcome, kd says it on the thread, answering the
//! King's message. The work's base becomes the King's commit merged in, so
//! its diff is what the member adds to the King's current code. The
//! member's resolving is followed in [`follow`], through a restart too.

mod follow;

pub(crate) use follow::{is_request, member, restarted};

use std::path::Path;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::types::ThreadEvent;
use kd_proto::work::{RebaseOutcome, Rebased, WorkState, Worktree};

use super::{git_error, worktree};
use crate::agent::spec::WorkRun;
use crate::agent::work::{Committed, at_once, commit, record_head};
use crate::client::ClientId;
use crate::coord::Coord;
use crate::db::Db;
use crate::git::merge::Merged;
use crate::git::{self, member};

/// How many times a member is asked to resolve the conflicts.
const TRIES: u32 = 2;
/// Most bytes of the King's side's changes told the member.
const THEIR_DIFF_BYTES: usize = 24 << 10;

use kd_proto::work::short_commit as short;

/// The member's worktree as kd made it, or a refusal.
async fn open(w: &Worktree) -> Result<member::Tree, ErrorObjectOwned> {
    match member::open(Path::new(&w.repo), Path::new(&w.path), &w.base, &w.branch).await.map_err(git_error)? {
        member::Found::Ours(tree) => Ok(tree),
        member::Found::Tampered(why) => Err(ErrorCode::Conflict.error(format!(
            "{}'s worktree {} is not as kd made it — {why}: kd does not touch it; kd reject {} it",
            w.member, w.path, w.member
        ))),
    }
}

/// `work.rebase`: merges the King's current HEAD into the member's branch
/// in its worktree; see the module.
pub async fn rebase(
    co: &Arc<Coord>,
    thread: &str,
    member: &str,
    (client, path): (Option<ClientId>, Option<String>),
) -> Result<Rebased, ErrorObjectOwned> {
    let db = &co.council.agents.db;
    crate::council::runs_here(db, thread).await?;
    let w = worktree(db, thread, member).await?;
    match w.state {
        WorkState::Working => {
            return Err(ErrorCode::Conflict.error(format!(
                "{member} is still working on thread {thread}: bring its work up to date once its run ended (or kd \
                 cancel {thread} stops it)"
            )));
        }
        WorkState::Tampered => {
            return Err(ErrorCode::Conflict.error(format!(
                "{member}'s work on thread {thread} is tampered: kd does not touch its worktree; kd reject {member}"
            )));
        }
        s if s.is_settled() => {
            return Err(ErrorCode::Conflict.error(format!(
                "{member}'s work on thread {thread} is {}: there is nothing to bring up to date",
                s.as_str()
            )));
        }
        _ => {}
    }
    if w.removed_at_ms.is_some() || !Path::new(&w.path).is_dir() {
        return Err(ErrorCode::Conflict.error(format!("{member}'s worktree {} is gone", w.path)));
    }
    // One at a time: kd may still conclude, ask again or undo the last one.
    let Some(claim) = co.rebasing.take(thread, member) else {
        return Err(ErrorCode::Conflict.error(format!(
            "kd is still following {member}'s resolving of the last kd rebase on thread {thread}: it says how that \
             ended on the thread (kd watch {thread})"
        )));
    };
    let repo = Path::new(&w.repo);
    let branch = git::branch(repo).await.map_err(git_error)?;
    let tree = open(&w).await?;
    let outcome = |(from, onto): (&str, &str), outcome, commit, conflicts, seq| Rebased {
        member: member.into(),
        branch: w.branch.clone(),
        from: from.into(),
        onto: onto.into(),
        outcome,
        commit,
        conflicts,
        seq,
    };

    // A merge a restart cut: concluded if its markers are gone, else the
    // member is asked again — as it is for a conflict git wrote no marker
    // for that is still as git left it: nothing says the member decided
    // it (a resolving run's end would have concluded the merge). Neither
    // needs the King's HEAD (detached, it is named by the commit being
    // merged).
    if let Some(theirs) = tree.merging().await.map_err(git_error)? {
        let from = branch.unwrap_or_else(|| short(&theirs).to_string());
        let conflicts = tree.conflicts().await.map_err(git_error)?;
        if let Some(refused) = submodules(&tree, &w, &from, &conflicts).await {
            return Err(refused);
        }
        let mut left = tree.unresolved().await.map_err(git_error)?;
        for c in conflicts {
            if !c.markers && !left.contains(&c.path) && tree.untouched(&c).await.map_err(git_error)? {
                left.push(c.path);
            }
        }
        if left.is_empty() {
            let head = conclude(co, &w).await?;
            return Ok(outcome((&from, &theirs), RebaseOutcome::Merged, Some(head), Vec::new(), None));
        }
        let seq = follow::ask(co, claim, &w, (&from, &theirs), &left, (client, path)).await?;
        return Ok(outcome((&from, &theirs), RebaseOutcome::Resolving, None, left, Some(seq)));
    }

    // As kd accept: with a detached HEAD, perhaps at the member's own
    // commits, there is no branch of the King's to bring the work up to.
    let from = branch.ok_or_else(|| {
        ErrorCode::Conflict
            .error(format!("{} has no branch checked out (a detached HEAD): check one out first", w.repo))
    })?;
    let onto = git::head(repo).await.map_err(git_error)?;
    let done = |o, commit, conflicts, seq| outcome((&from, &onto), o, commit, conflicts, seq);

    // What the member left uncommitted is committed before anything else.
    let message = format!("{} (before bringing it up to date)", w.task);
    match commit(db, thread, member, &WorkRun::of(&w), &message, &at_once)
        .await
        .map_err(|e| ErrorCode::Internal.error(e))?
    {
        Committed::Commit(_) => {}
        Committed::Tampered(why) => {
            return Err(ErrorCode::Conflict.error(format!("{member}'s worktree is not as kd made it — {why}")));
        }
        Committed::Unrecorded { why, .. } => return Err(unrecorded(member, &why)),
    }
    let head = tree.head().await.map_err(git_error)?;
    // Your branch holds the work already (merged by hand): kd accept takes
    // it as it is; a fast-forward here would make it read as changing
    // nothing.
    if head != w.base && git::is_ancestor(repo, &head, &onto).await.map_err(git_error)? {
        return Ok(done(RebaseOutcome::UpToDate, None, Vec::new(), None));
    }
    if git::is_ancestor(repo, &onto, &head).await.map_err(git_error)? {
        let moved = merged_in(db, (thread, member), (&onto, &head)).await?;
        if moved {
            publish(co, thread, member).await;
        }
        return Ok(done(RebaseOutcome::UpToDate, moved.then(|| head.clone()), Vec::new(), None));
    }
    let message = format!("Merge {from} ({}) into {}", short(&onto), w.branch);
    match tree.merge(&onto, member, &message).await.map_err(git_error)? {
        Merged::Clean(new) => {
            record_head(db, thread, member, &WorkRun::of(&w), (&onto, &new, true), &at_once)
                .await
                .map_err(|e| unrecorded(member, &e))?;
            publish(co, thread, member).await;
            Ok(done(RebaseOutcome::Merged, Some(new), Vec::new(), None))
        }
        Merged::Conflicts(files) => {
            // Not asked for what it cannot do: the merge is undone.
            let conflicts = tree.conflicts().await.map_err(git_error)?;
            if let Some(refused) = submodules(&tree, &w, &from, &conflicts).await {
                return Err(refused);
            }
            // Not asked (the member cannot run): the merge is undone.
            let seq = match follow::ask(co, claim, &w, (&from, &onto), &files, (client, path)).await {
                Ok(seq) => seq,
                Err(e) => {
                    let _ = tree.merge_abort().await;
                    return Err(e);
                }
            };
            Ok(done(RebaseOutcome::Resolving, None, files, Some(seq)))
        }
    }
}

/// The member's branch (at `head`) holds the King's HEAD (`onto`) already,
/// and the registry's base is another commit: a merge kd committed whose
/// new base it could not record (`Committed::Unrecorded`), one the member
/// made, or the King's branch moved back or elsewhere. The King's HEAD
/// becomes the work's base, so that its diff is what `kd accept` would
/// apply (`settle::accept` refuses work whose base is not where the two
/// histories meet). Not when the King's HEAD is the branch's head: the
/// King's branch holds the work already (accepted as it is), and the work
/// would read as changing nothing. Whether it was recorded.
async fn merged_in(
    db: &Db,
    (thread, member): (&str, &str),
    (onto, head): (&str, &str),
) -> Result<bool, ErrorObjectOwned> {
    let w = worktree(db, thread, member).await?;
    // A run may have begun since the rebase looked.
    if onto == head || w.state != WorkState::Done || w.base == onto || w.head != head {
        return Ok(false);
    }
    record_head(db, thread, member, &WorkRun::of(&w), (onto, head, true), &at_once)
        .await
        .map_err(|e| unrecorded(member, &e))?;
    Ok(true)
}

/// A submodule among `conflicts`, the merge in progress undone: the refusal
/// that says so, with the way on. A member's worktree has no checkout of a
/// submodule (git refuses to stage one without), so the member is not
/// asked for what it cannot do: you merge the work in your tree. An undo
/// kd cannot make without loss leaves the merge as it is, and says so.
async fn submodules(
    tree: &member::Tree,
    w: &Worktree,
    from: &str,
    conflicts: &[git::conflict::Conflict],
) -> Option<ErrorObjectOwned> {
    let member = &w.member;
    let found: Vec<String> = conflicts
        .iter()
        .filter(|c| c.is_submodule())
        .map(|c| format!("{} ({from}: {}; {member}: {})", c.path, side(&c.theirs), side(&c.ours)))
        .collect();
    let conflict = match found.as_slice() {
        [] => return None,
        [one] => format!("{member}'s work conflicts with {from} in a submodule: {one}"),
        many => format!("{member}'s work conflicts with {from} in submodules: {}", many.join(", ")),
    };
    let conflict = format!("{conflict}. A member's worktree has no checkout of a submodule to resolve it in");
    Some(ErrorCode::Conflict.error(match tree.merge_abort().await {
        Ok(()) => format!(
            "{conflict}. kd undid the merge: {} is as it was, every commit of {member}'s kept. Merge it into yours \
             yourself in {} (git merge refs/heads/{}, choosing each submodule's commit there; kd accept {member} then \
             finds it in your branch), or kd reject {member}.",
            w.branch, w.repo, w.branch
        ),
        Err(e) => format!(
            "{conflict}, and kd could not undo the merge ({e}): it is left in progress in {}, every commit of \
             {member}'s kept. kd reject {member}, or resolve it there yourself.",
            w.path
        ),
    }))
}

/// What one side of a conflicted submodule has there, in a word.
fn side(s: &Option<git::conflict::Side>) -> String {
    match s.as_ref().map(|s| (s.mode.as_str(), s)) {
        None => "deleted".into(),
        Some((git::conflict::SUBMODULE, s)) => format!("at {}", short(&s.object)),
        Some(("120000", _)) => "a link".into(),
        Some(_) => "a file".into(),
    }
}

/// kd committed the member's work, and could not record its head (a
/// `kd rebase` once the registry is back records it).
fn unrecorded(member: &str, why: &str) -> ErrorObjectOwned {
    ErrorCode::Internal.error(format!(
        "kd committed {member}'s work but could not record its head: {why}. Its commits are on its branch: run kd \
         rebase {member} again once the registry is back to record them"
    ))
}

/// Tells the thread how the member's work stands now.
async fn publish(co: &Arc<Coord>, thread: &str, member: &str) {
    let (t, m) = (thread.to_string(), member.to_string());
    if let Ok(Some(w)) = co.council.agents.db.worktree(t, m).await {
        co.council.agents.hub.publish(thread, ThreadEvent::Work { worktree: Box::new(w) });
    }
}

/// Concludes the merge in progress (its markers gone) by kd's commit of
/// the member's work; the new head.
async fn conclude(co: &Arc<Coord>, w: &Worktree) -> Result<String, ErrorObjectOwned> {
    let db = &co.council.agents.db;
    match commit(db, &w.thread, &w.member, &WorkRun::of(w), &w.task, &at_once)
        .await
        .map_err(|e| ErrorCode::Conflict.error(e))?
    {
        Committed::Commit(_) => {}
        Committed::Tampered(why) => {
            return Err(ErrorCode::Conflict.error(format!("{}'s worktree is not as kd made it — {why}", w.member)));
        }
        Committed::Unrecorded { why, .. } => return Err(unrecorded(&w.member, &why)),
    }
    publish(co, &w.thread, &w.member).await;
    let tree = open(w).await?;
    tree.head().await.map_err(git_error)
}
