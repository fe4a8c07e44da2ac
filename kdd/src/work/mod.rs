//! Members do the work (F-W1..W6), the King's side of it: giving a task to
//! members, each in a git worktree of its own ([`start`]), seeing their
//! diffs ([`diff`]), having the council review or rank them
//! ([`review`]), commenting on their lines and sending the comments back
//! as one review ([`comments`]), accepting one into the King's branch or rejecting it, and
//! removing worktrees only when nothing in them could be lost
//! ([`settle`]); the check run in each worktree after each commit, and
//! fix until green ([`check`]); bringing a member's work up to date with
//! the King's branch ([`rebase`]) and shipping it as a pull request
//! ([`pr`]). The runs themselves — writable in the worktree and
//! nowhere else, their changes committed when they end — are the agent's
//! ([`crate::agent`]); which run works where is the council's
//! ([`crate::council::work_runs`]).

pub mod after;
pub mod check;
pub mod comments;
pub mod highlight;
pub mod hunks;
pub mod pr;
pub mod rebase;
pub mod review;
pub mod settle;
pub mod vote;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::types::{Lineage, ThreadEvent};
use kd_proto::work::{MemberDiff, WorkStarted, WorkState, Worktree};

use crate::client::ClientId;
use crate::coord::{Coord, check_members};
use crate::council::send;
use crate::db::threads::NewThread;
use crate::db::{Db, now_ms, random_id};
use crate::git::{self, GitError};

/// Most bytes of a diff's patch given to a client unless it asks for less.
pub const PATCH_BYTES: u64 = 1 << 20;

/// A git failure as the King is told it.
pub fn git_error(e: GitError) -> ErrorObjectOwned {
    match e {
        GitError::NotARepository { .. } | GitError::NoCommit { .. } => ErrorCode::InvalidArgument.error(e.to_string()),
        _ => ErrorCode::Internal.error(e.to_string()),
    }
}

/// Where the worktrees of a work thread live: `<data dir>/worktrees/
/// <repo name>-<thread>/`, beside the database, never inside the King's
/// tree.
pub fn worktrees_dir(db: &Db, repo: &Path, thread: &str) -> PathBuf {
    let data = db.data_dir();
    let name: String = repo
        .file_name()
        .map(|n| n.to_string_lossy().chars().map(|c| if c.is_alphanumeric() || c == '-' { c } else { '_' }).collect())
        .unwrap_or_else(|| "repo".into());
    data.join("worktrees").join(format!("{name}-{thread}"))
}

/// A task for members.
pub struct Task {
    pub workspace: String,
    pub task: String,
    pub to: Option<Vec<String>>,
    pub vote: bool,
    pub client: Option<ClientId>,
    /// The asking client's `PATH`, which the members are found on and run
    /// with (none: kdd's own).
    pub path: Option<String>,
    /// Fix until green: how many times a member whose check fails is sent
    /// back (none: `work.fix_rounds`).
    pub until_green: Option<u32>,
}

/// `work.start`: a new branch thread of the workspace's trunk titled with
/// the task; for each member a worktree of the King's HEAD on its own
/// branch `kd/<thread>/<member>`; the King's message giving the task,
/// which each member answers by doing it in its worktree. With `vote`,
/// the members rank the diffs once the rounds are over ([`vote`]).
pub async fn start(co: &Arc<Coord>, t: Task) -> Result<WorkStarted, ErrorObjectOwned> {
    let db = &co.council.agents.db;
    let config = send::read_config(&t.workspace, t.path.as_deref())?;
    let members: Vec<String> = match &t.to {
        Some(to) if !to.is_empty() => {
            check_members(&config, to, false)?;
            config.council.members.iter().filter(|m| to.contains(m)).cloned().collect()
        }
        _ => config.council.members.clone(),
    };
    if members.is_empty() {
        return Err(ErrorCode::InvalidArgument.error("no members to give the task to"));
    }
    if t.vote && members.len() < 2 {
        return Err(ErrorCode::InvalidArgument.error("a vote over the work needs at least two members"));
    }
    let until_green = check::until_green(&config, t.until_green)?;
    let repo = git::top(Path::new(&t.workspace)).await.map_err(git_error)?;
    let base = git::head(&repo).await.map_err(git_error)?;
    let branch = git::branch(&repo).await.map_err(git_error)?;

    // The work thread branches off the trunk, which is made first if there
    // is none yet.
    let trunk = match db.trunk(t.workspace.clone(), branch.clone()).await? {
        Some(id) => id,
        None => {
            let row = NewThread {
                id: None,
                workspace: t.workspace.clone(),
                branch: branch.clone(),
                title: None,
                members: config.council.members.clone(),
                lineage: Some(Lineage::Trunk),
                parent: None,
                set_current: false,
                context: Default::default(),
                origin: None,
            };
            match crate::lifecycle::create(db, row).await {
                Ok(t) => t.id,
                // Another client made it meanwhile.
                Err(_) => db
                    .trunk(t.workspace.clone(), branch.clone())
                    .await?
                    .ok_or_else(|| ErrorCode::Internal.error("the trunk could not be made"))?,
            }
        }
    };
    let title = kd_proto::title::title_from(&t.task);
    let id = random_id(12);
    let row = NewThread {
        id: Some(id.clone()),
        workspace: t.workspace.clone(),
        branch: branch.clone(),
        title: title.clone(),
        members: config.council.members.clone(),
        lineage: Some(Lineage::Branch),
        parent: Some(trunk),
        set_current: false,
        context: Default::default(),
        origin: None,
    };
    let thread = crate::lifecycle::create(db, row).await?;

    let dir = worktrees_dir(db, &repo, &thread.id);
    let mut trees = Vec::new();
    for member in &members {
        let path = dir.join(member);
        let w = Worktree {
            thread: thread.id.clone(),
            member: member.clone(),
            task: t.task.clone(),
            repo: repo.display().to_string(),
            path: path.display().to_string(),
            branch: format!("kd/{}/{member}", thread.id),
            base: base.clone(),
            head: base.clone(),
            state: WorkState::Working,
            files: 0,
            added: 0,
            removed: 0,
            removed_at_ms: None,
            created_at_ms: now_ms(),
            last_run: None,
            check: None,
            until_green,
            fixes: 0,
            shipped: None,
            uncommitted: None,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| ErrorCode::Internal.error(format!("cannot make {}: {e}", parent.display())))?;
        }
        git::worktree_add(&repo, &path, &w.branch, &base).await.map_err(git_error)?;
        let (row, vote) = (w.clone(), t.vote);
        db.add_worktree(row, vote).await?;
        co.council.agents.hub.publish(&thread.id, ThreadEvent::Work { worktree: Box::new(w.clone()) });
        trees.push(w);
    }

    let req = send::Request {
        thread: thread.id.clone(),
        body: t.task.clone(),
        to: Some(members.clone()),
        mute: Vec::new(),
        style: Default::default(),
        timeout: None,
        correlation_id: None,
        rounds: Some(0),
        client: t.client,
        new_thread: None,
        vote: t.vote,
        path: t.path.clone(),
        beside: false,
        tag: None,
        config: Some((t.workspace.clone(), config)),
    };
    let sent = send::send(&co.council, req).await?;
    if t.vote {
        vote::after_rounds(co, &thread.id, sent.message.seq);
    }
    Ok(WorkStarted {
        thread: thread.id,
        title: title.unwrap_or_default(),
        seq: sent.message.seq,
        worktrees: trees,
        runs: sent.runs.iter().map(|r| r.run.id.clone()).collect(),
        vote: t.vote,
    })
}

/// `work.list`: a thread's worktrees, or those of a workspace's
/// repository, or every one.
pub async fn list(
    db: &Db,
    workspace: Option<String>,
    thread: Option<String>,
) -> Result<Vec<Worktree>, ErrorObjectOwned> {
    if let Some(thread) = thread {
        db.thread(thread.clone()).await?;
        return Ok(db.worktrees_of(thread).await?);
    }
    let repo = match workspace {
        Some(ws) => match git::top(Path::new(&ws)).await {
            Ok(repo) => Some(repo.display().to_string()),
            Err(_) => return Ok(Vec::new()),
        },
        None => None,
    };
    Ok(db.worktrees(repo).await?)
}

/// The member's worktree on the thread, or a clear refusal.
pub async fn worktree(db: &Db, thread: &str, member: &str) -> Result<Worktree, ErrorObjectOwned> {
    let (t, m) = (thread.to_string(), member.to_string());
    db.worktree(t, m).await?.ok_or_else(|| {
        ErrorCode::NotFound
            .error(format!("{member} has no work on thread {thread} (kd work --list shows what there is)"))
    })
}

/// `work.diff`: each member's diff (or one member's) from its base to the
/// last commit kd made of its work, the patch cut at `max_bytes`.
pub async fn diff(
    db: &Db,
    thread: String,
    member: Option<String>,
    stat: bool,
    max_bytes: u64,
    (highlight, commits): (bool, bool),
) -> Result<Vec<MemberDiff>, ErrorObjectOwned> {
    db.thread(thread.clone()).await?;
    let trees = match &member {
        Some(m) => vec![worktree(db, &thread, m).await?],
        None => {
            let t = thread.clone();
            db.worktrees_of(t).await?
        }
    };
    if trees.is_empty() {
        return Err(
            ErrorCode::NotFound.error(format!("thread {thread} has no work: kd work \"TASK\" gives members some"))
        );
    }
    let mut out = Vec::new();
    for w in trees {
        let mut d = member_diff(&w, stat, max_bytes).await?;
        if highlight && let Some(patch) = d.patch.clone() {
            // The budget starts on the blocking thread, not while waiting for one.
            let files = tokio::task::spawn_blocking(move || {
                highlight::files(&patch, std::time::Instant::now() + highlight::BUDGET)
            })
            .await
            .map_err(|e| ErrorCode::Internal.error(format!("cannot highlight the diff: {e}")))?;
            d.highlighted = Some(files);
        }
        if commits {
            let list = git::commits(Path::new(&w.repo), &w.base, &w.head, kd_proto::work::MAX_COMMITS)
                .await
                .map_err(git_error)?;
            d.commits = Some(
                list.into_iter().map(|(commit, subject)| kd_proto::work::CommitLine { commit, subject }).collect(),
            );
        }
        out.push(d);
    }
    Ok(out)
}

/// One member's diff.
pub async fn member_diff(w: &Worktree, stat: bool, max_bytes: u64) -> Result<MemberDiff, ErrorObjectOwned> {
    let repo = Path::new(&w.repo);
    let files = git::diff_stat(repo, &w.base, &w.head).await.map_err(git_error)?;
    let (patch, truncated) = if stat {
        (None, false)
    } else {
        let max = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let (p, cut) = git::diff_patch(repo, &w.base, &w.head, max).await.map_err(git_error)?;
        (Some(p), cut)
    };
    Ok(MemberDiff {
        member: w.member.clone(),
        branch: w.branch.clone(),
        base: w.base.clone(),
        head: w.head.clone(),
        state: w.state,
        files,
        patch,
        truncated,
        check: w.check.clone(),
        highlighted: None,
        commits: None,
    })
}

/// A King's message to `member` alone on its work thread, answered in one
/// round by a work run in its worktree (a review to act on, a conflict to
/// resolve, a check to fix), asked by `client` with its `PATH`.
pub(crate) fn to_member(
    thread: &str,
    member: &str,
    body: String,
    (client, path): (Option<ClientId>, Option<String>),
) -> send::Request {
    send::Request {
        thread: thread.to_string(),
        body,
        to: Some(vec![member.to_string()]),
        mute: Vec::new(),
        style: Default::default(),
        timeout: None,
        correlation_id: None,
        rounds: Some(0),
        client,
        new_thread: None,
        vote: false,
        path,
        beside: false,
        tag: None,
        config: None,
    }
}
