//! Where members' work ends (F-W5, F-W6): the King accepts one member's
//! branch into their own (refused, with nothing changed, on a tree with
//! uncommitted changes, a merge that conflicts, or work kd found tampered
//! with), or rejects it; and a
//! work thread's worktrees and branches go only when nothing in them could
//! be lost — accepted, rejected, superseded or empty — unless the King
//! forces it.

use std::path::Path;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::types::ThreadEvent;
use kd_proto::work::{Accepted, WorkState, Worktree};

use super::{git_error, worktree};
use crate::db::{Db, now_ms};
use crate::git;
use crate::hub::Hub;

/// Refuses to settle work a run is still doing.
fn not_working(w: &Worktree) -> Result<(), ErrorObjectOwned> {
    if w.state == WorkState::Working {
        return Err(ErrorCode::Conflict.error(format!(
            "{} is still working on thread {}: wait for its run to end (or kd cancel {} stops it)",
            w.member, w.thread, w.thread
        )));
    }
    Ok(())
}

async fn set_state(db: &Db, hub: &Hub, w: &Worktree, state: WorkState) -> Result<Worktree, ErrorObjectOwned> {
    let (t, m) = (w.thread.clone(), w.member.clone());
    db.set_worktree_state(t, m, state).await?;
    let w = Worktree { state, ..w.clone() };
    hub.publish(&w.thread, ThreadEvent::Work { worktree: Box::new(w.clone()) });
    Ok(w)
}

/// `work.accept`: merges the member's branch into the King's current
/// branch in the King's tree (a merge commit, or one squashed commit).
/// With `check`, only says whether it would. Refused, with nothing
/// changed, when the King's tree has uncommitted changes or the merge
/// conflicts (the files named). The other members of the task are
/// superseded.
pub async fn accept(
    db: &Db,
    hub: &Hub,
    thread: &str,
    member: &str,
    squash: bool,
    check: bool,
) -> Result<Accepted, ErrorObjectOwned> {
    let w = worktree(db, thread, member).await?;
    not_working(&w)?;
    match w.state {
        WorkState::Accepted => {
            return Err(ErrorCode::Conflict.error(format!("{member}'s work on thread {thread} is already accepted")));
        }
        WorkState::Superseded => {
            return Err(ErrorCode::Conflict.error(format!(
                "{member}'s work on thread {thread} was superseded when another member's was accepted: \
                 nothing was changed (git merge refs/heads/{} takes it anyway)",
                w.branch
            )));
        }
        WorkState::Tampered => {
            return Err(ErrorCode::Conflict.error(format!(
                "{member}'s work on thread {thread} is tampered: its worktree's .git is not what kd made, so kd \
                 did not commit its last run (its answer says why); its files are in {}: look at them yourself, \
                 then kd reject {member}. Nothing was changed",
                w.path
            )));
        }
        _ => {}
    }
    refuse_uncommitted(&w, "accepting", "Nothing was changed")?;
    let repo = Path::new(&w.repo);
    let into = git::branch(repo).await.map_err(git_error)?.ok_or_else(|| {
        ErrorCode::Conflict
            .error(format!("{} has no branch checked out (a detached HEAD): check one out first", w.repo))
    })?;
    refuse_moved(repo, &w).await?;
    if w.head == w.base {
        return Err(
            ErrorCode::Conflict.error(format!("{member} changed nothing on thread {thread}: nothing to accept"))
        );
    }
    // Your branch holds the work already (merged by hand): nothing to
    // apply — work past its base only (a head moved back is not work).
    let held = git::is_ancestor(repo, &w.base, &w.head).await.map_err(git_error)?
        && git::is_ancestor(repo, &w.head, "HEAD").await.map_err(git_error)?;
    if !held {
        refuse_unmet(repo, &w).await?;
    }
    let dirty = git::dirty(repo).await.map_err(git_error)?;
    if !dirty.is_empty() {
        return Err(ErrorCode::Conflict.error(format!(
            "your tree {} has uncommitted changes ({}): commit or stash them first; nothing was changed",
            w.repo,
            list(&dirty)
        )));
    }
    let changed: Vec<String> =
        git::diff_stat(repo, &w.base, &w.head).await.map_err(git_error)?.into_iter().map(|f| f.path).collect();
    let in_the_way = git::untracked(repo, &changed).await.map_err(git_error)?;
    if !in_the_way.is_empty() {
        return Err(ErrorCode::Conflict.error(format!(
            "{member}'s work writes files that are untracked in your tree ({}): move or commit them first; \
             nothing was changed",
            list(&in_the_way)
        )));
    }
    // The commit checked above, never its branch by name: a tag or ref of
    // the same name would be merged instead.
    let conflicts = git::merge_conflicts(repo, &w.head).await.map_err(git_error)?;
    if !conflicts.is_empty() {
        return Err(ErrorCode::Conflict.error(format!(
            "{member}'s work conflicts with {into} in {}: nothing was changed. `kd rebase {member} --thread {thread}` \
             merges {into} into {member}'s branch and has {member} resolve the conflicts",
            list(&conflicts)
        )));
    }
    let others: Vec<Worktree> = {
        let t = thread.to_string();
        db.worktrees_of(t).await?.into_iter().filter(|o| o.member != member && !o.state.is_settled()).collect()
    };
    let superseded: Vec<String> = others.iter().map(|o| o.member.clone()).collect();
    if check {
        return Ok(Accepted { member: member.into(), into, commit: None, squash, checked: true, superseded });
    }
    let title = w.task.lines().next().unwrap_or_default();
    let message = format!("Accept {member}'s work: {title}\n\nkd thread {thread}, branch {}", w.branch);
    // None: your branch held it already, nothing was merged.
    let commit = match held {
        true => None,
        false => Some(git::merge(repo, &w.head, squash, &message).await.map_err(git_error)?),
    };
    set_state(db, hub, &w, WorkState::Accepted).await?;
    for o in &others {
        // A member still working keeps working; its work is not superseded
        // until its run ends.
        if o.state == WorkState::Done {
            set_state(db, hub, o, WorkState::Superseded).await?;
        }
    }
    // On a thread archived already, settled work goes now, as archiving
    // took it.
    tidy_if_archived(db, hub, thread).await;
    Ok(Accepted { member: member.into(), into, commit, squash, checked: false, superseded })
}

/// Removes the settled work of `thread` when it is archived already (see
/// [`tidy`]); whether it was. What was settled stays settled: a failure
/// here is logged (the branch stays for the next archive or delete).
async fn tidy_if_archived(db: &Db, hub: &Hub, thread: &str) -> bool {
    match db.thread(thread.to_string()).await {
        Ok(t) if t.status == kd_proto::types::ThreadStatus::Archived => {}
        _ => return false,
    }
    if let Err(e) = tidy(db, hub, thread, false).await {
        tracing::warn!(thread, "cannot remove the settled work of an archived thread: {}", e.message());
    }
    true
}

/// `work.reject`: the member's work is turned down (its branch stays
/// until the thread is archived or deleted; on a thread archived already,
/// it goes now).
pub async fn reject(db: &Db, hub: &Hub, thread: &str, member: &str) -> Result<Worktree, ErrorObjectOwned> {
    let w = worktree(db, thread, member).await?;
    not_working(&w)?;
    if w.state == WorkState::Accepted {
        return Err(ErrorCode::Conflict.error(format!("{member}'s work on thread {thread} is already accepted")));
    }
    let rejected = set_state(db, hub, &w, WorkState::Rejected).await?;
    match tidy_if_archived(db, hub, thread).await {
        true => worktree(db, thread, member).await,
        false => Ok(rejected),
    }
}

/// The files named, at most ten of them.
fn list(files: &[String]) -> String {
    let mut s = files.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    if files.len() > 10 {
        s.push_str(&format!(" and {} more", files.len() - 10));
    }
    s
}

/// Refuses work whose last run kd could not commit: `doing` its branch
/// would leave those changes out (and settled work's worktree goes).
pub(super) fn refuse_uncommitted(w: &Worktree, doing: &str, nothing: &str) -> Result<(), ErrorObjectOwned> {
    let Some(why) = &w.uncommitted else { return Ok(()) };
    let (m, t) = (&w.member, &w.thread);
    let way = match w.state.is_settled() {
        true => format!(
            "Its work is {}: copy what you want of those files into your tree yourself (run no git in its worktree: \
             the member can change its .git); git merge refs/heads/{} takes what was committed.",
            w.state.as_str(),
            w.branch
        ),
        false => format!("Ask {m} again (its next run's end commits them), or kd reject {m}."),
    };
    Err(ErrorCode::Conflict.error(format!(
        "{m}'s last run on thread {t} is not committed ({why}): its changes are in {} only, so {doing} its branch \
         would leave them out. {way} {nothing}",
        w.path
    )))
}

/// Refuses work whose branch is not at the head kd recorded (a commit kd
/// made and could not record): what kd shows of it is not its branch.
/// `kd rebase` records it.
async fn refuse_moved(repo: &Path, w: &Worktree) -> Result<(), ErrorObjectOwned> {
    let tip = git::commit_of(repo, &format!("refs/heads/{}", w.branch)).await.map_err(git_error)?;
    if tip.as_deref() == Some(w.head.as_str()) {
        return Ok(());
    }
    Err(unseen(w, &format!("its branch {} is not at the commit kd recorded for it", w.branch)))
}

/// Refuses work whose diff from its recorded base is not what accepting it
/// would apply — a merge applies what the branch changed since it and the
/// King's branch met: the two histories meet elsewhere than at that base,
/// or also elsewhere (the branch took in commits of the King's — a merge
/// the member made, perhaps dropping a change of the King's; one kd
/// committed and could not record — the King merged some of its commits
/// by hand, or the King's branch moved). The diff from the old base would
/// hide what accepting does. `kd rebase` records where they meet.
async fn refuse_unmet(repo: &Path, w: &Worktree) -> Result<(), ErrorObjectOwned> {
    let met = git::merge_bases(repo, "HEAD", &w.head).await.map_err(git_error)?;
    // None: unrelated histories, which the merge refuses itself.
    let Some(m) = met.iter().find(|m| **m != w.base) else { return Ok(()) };
    let why = format!(
        "its branch and yours meet at {}, not at its recorded base {} (one took in commits of the other, or your \
         branch moved)",
        kd_proto::work::short_commit(m),
        kd_proto::work::short_commit(&w.base)
    );
    Err(unseen(w, &why))
}

/// Accepting `w` would apply what kd diff does not show (`why`).
fn unseen(w: &Worktree, why: &str) -> ErrorObjectOwned {
    let (m, t) = (&w.member, &w.thread);
    ErrorCode::Conflict.error(format!(
        "{m}'s work on thread {t}: {why}, so kd diff does not show what accepting it would change. \
         `kd rebase {m} --thread {t}` records it; then accept. Nothing was changed"
    ))
}

/// Whether the worktree's work may go without losing anything: settled,
/// or nothing committed and nothing changed in it (asked of git as kd
/// runs it in a member's worktree: [`git::member`]) — its branch still
/// at its base in git, whatever the registry recorded (a head kd
/// committed and could not record). Work kd found tampered with goes only
/// when the King settles it, or forces it.
async fn may_go(w: &Worktree) -> bool {
    if w.state.is_settled() {
        return true;
    }
    if !w.state.takes_work() || w.state == WorkState::Working || w.head != w.base {
        return false;
    }
    let repo = Path::new(&w.repo);
    let dir = Path::new(&w.path);
    if !dir.exists() {
        let tip = git::commit_of(repo, &format!("refs/heads/{}", w.branch)).await;
        return matches!(tip, Ok(None)) || tip.is_ok_and(|t| t.as_deref() == Some(w.base.as_str()));
    }
    match git::member::open(repo, dir, &w.base, &w.branch).await {
        Ok(git::member::Found::Ours(tree)) => {
            tree.is_clean().await.unwrap_or(false) && tree.head().await.is_ok_and(|h| h == w.base)
        }
        _ => false,
    }
}

/// Removes the thread's worktrees and branches whose work may go (all of
/// them with `force`); those kept are returned. A branch that was merged,
/// and so whose commits are safe in the King's history, goes with its
/// worktree; a rejected or superseded one too (the King decided).
pub async fn tidy(db: &Db, hub: &Hub, thread: &str, force: bool) -> Result<Vec<Worktree>, ErrorObjectOwned> {
    let t = thread.to_string();
    let trees = db.worktrees_of(t).await?;
    let mut kept = Vec::new();
    for w in trees.into_iter().filter(|w| w.removed_at_ms.is_none()) {
        if !(force || may_go(&w).await) {
            kept.push(w);
            continue;
        }
        let repo = Path::new(&w.repo);
        let path = Path::new(&w.path);
        remove_worktree(repo, path, (&w.base, &w.branch)).await?;
        remove_leftovers(path);
        if git::has_branch(repo, &w.branch).await.map_err(git_error)? {
            git::branch_delete(repo, &w.branch).await.map_err(git_error)?;
        }
        let (t, m, now) = (w.thread.clone(), w.member.clone(), now_ms());
        db.set_worktree_removed(t, m, now).await?;
        let thread = w.thread.clone();
        hub.publish(&thread, ThreadEvent::Work { worktree: Box::new(Worktree { removed_at_ms: Some(now), ..w }) });
    }
    Ok(kept)
}

/// Removes the worktree at `path` and git's record of it. git removes one
/// as kd made it; one whose `.git` is not (which git would read, and
/// refuse), or which git will not remove (it holds a nested repository),
/// kd removes itself — never following a symlink in it — and git's record
/// is pruned.
async fn remove_worktree(repo: &Path, path: &Path, (base, branch): (&str, &str)) -> Result<(), ErrorObjectOwned> {
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_file(path);
        return git::prune(repo).await.map_err(git_error);
    }
    let ours = matches!(git::member::open(repo, path, base, branch).await, Ok(git::member::Found::Ours(_)));
    if ours && git::worktree_remove(repo, path).await.is_ok() {
        return Ok(());
    }
    let dir = path.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir))
        .await
        .map_err(|e| ErrorCode::Internal.error(e.to_string()))?
        .map_err(|e| ErrorCode::Internal.error(format!("cannot remove {}: {e}", path.display())))?;
    git::prune(repo).await.map_err(git_error)
}

/// Removes what kd made beside a removed worktree: its runs' temporary
/// directory (`<worktree>.tmp`, kd's own: never followed if it is a
/// symlink), then the thread's directory of worktrees once it is empty.
fn remove_leftovers(worktree: &Path) {
    let tmp = crate::agent::work::tmp_dir_of(worktree);
    match std::fs::symlink_metadata(&tmp) {
        Ok(m) if m.is_dir() => {
            if let Err(e) = std::fs::remove_dir_all(&tmp) {
                tracing::warn!("cannot remove {}: {e}", tmp.display());
            }
        }
        Ok(_) => {
            let _ = std::fs::remove_file(&tmp);
        }
        Err(_) => {}
    }
    // Fails, leaving it, while another member's worktree is there.
    if let Some(dir) = worktree.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Refuses to delete a thread whose work would be lost with it.
pub async fn check_delete(db: &Db, thread: &str) -> Result<(), ErrorObjectOwned> {
    let t = thread.to_string();
    let trees = db.worktrees_of(t).await?;
    let mut unsettled = Vec::new();
    for w in trees.iter().filter(|w| w.removed_at_ms.is_none()) {
        if !may_go(w).await {
            unsettled.push(w.member.clone());
        }
    }
    if unsettled.is_empty() {
        return Ok(());
    }
    Err(ErrorCode::Conflict.error(format!(
        "thread {thread} holds work not accepted or rejected, of {}: kd accept or kd reject it, or delete with \
         --force to discard it",
        unsettled.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use kd_proto::work::{WorkState, Worktree};

    use super::refuse_uncommitted;

    /// Settled work whose last run is not committed: the git command the
    /// refusal names takes its branch by its full name, which a member's
    /// tag of the same name cannot shadow, and none is to run in the
    /// member's worktree, whose .git the member can change.
    #[test]
    fn the_way_out_for_settled_uncommitted_work_names_the_branch_in_full() {
        let w = crate::db::fixtures::worktree("claude", 0);
        let w = Worktree { state: WorkState::Rejected, uncommitted: Some("git add timed out".into()), ..w };
        let refused = refuse_uncommitted(&w, "reviewing", "Nothing was asked").unwrap_err();
        let way = format!("git merge refs/heads/{} takes what was committed", w.branch);
        assert!(refused.message().contains(&way), "{}", refused.message());
        assert!(refused.message().contains("run no git in its worktree"), "{}", refused.message());
    }
}
