//! Git, as kd uses it for members' work (F-W1..W6): the `git` CLI driven
//! by argv (never a shell), porcelain and `-z` output, so that the user's
//! own configuration and hooks apply in the King's tree, as claude-squad
//! does. In a member's worktree, where everything is the member's, git
//! runs as [`member`] says: with the git directory kd made, and nothing
//! the worktree names. Everything a
//! repository is asked goes through one lock per repository (the commands
//! that take its `index.lock` would otherwise fail each other), and every
//! output is read to a bound.
//!
//! What kd needs and nothing more: the top-level directory and HEAD of the
//! King's tree, a worktree on a new branch, committing all a member changed
//! as the member ([`member`]), the diff of a branch from its base (stat and patch), a
//! merge checked without touching any tree ([`merge_conflicts`]) and then
//! made, removing a worktree and its branch; the King's HEAD merged into a
//! member's branch ([`merge`]); a member's branch pushed to a remote
//! ([`remote`]).
//!
//! Every git command kd runs is killed at a time bound (with what it
//! started: it runs in a process group of its own), so that nothing a
//! member leaves where git reads — a FIFO git opens and waits on — holds
//! the repository's lock, a run's end or a restart for good: in a member's
//! worktree the bound `kdd --git-timeout-ms` sets ([`set_time_bound`]), in
//! the King's tree, where the King's own hooks run, five times that.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kd_proto::work::FileStat;
use tokio::io::AsyncReadExt;

use crate::identity::children;

pub mod conflict;
pub mod member;
pub mod merge;
pub mod remote;

/// Most bytes of a command's output kept, unless the caller bounds it.
const OUTPUT: usize = 4 << 20;
/// Most bytes of its standard error kept (the reason it failed).
const ERRORS: usize = 16 << 10;

/// A git command that failed, with what it said.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{dir} is not in a git repository; kd work needs one (git init, and a first commit)")]
    NotARepository { dir: String },
    #[error("{repo} has no commit yet: make a first commit before kd work")]
    NoCommit { repo: String },
    #[error("git {args}: {reason}")]
    Failed { args: String, reason: String },
    #[error("cannot run git: {0}")]
    Spawn(std::io::Error),
    #[error("git {args} timed out after {} s and was stopped", within.as_secs_f32())]
    TimedOut { args: String, within: Duration },
}

pub type GitResult<T> = Result<T, GitError>;

/// What a git command printed, and whether it succeeded.
pub struct Output {
    pub ok: bool,
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    /// The output went past its bound: the rest was not read.
    pub cut: bool,
    pub stderr: String,
}

impl Output {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Opens the regular file at `path` to read it, as a file a member may
/// have made: never through a symlink, and never waiting on a FIFO or a
/// device (opened without blocking, then refused as not a regular file).
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// The text of the regular file at `path` ([`open_regular`]), at most
/// `max` bytes of it.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    open_regular(path)?.take(max).read_to_string(&mut text)?;
    Ok(text)
}

/// One lock per repository (by its common git directory's path): what one
/// git command does to a repository is done before the next starts.
fn lock_of(repo: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: Mutex<Option<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> = Mutex::new(None);
    let mut locks = LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    locks.get_or_insert_with(HashMap::new).entry(repo.to_path_buf()).or_default().clone()
}

/// The default time bound of kd's git in a member's worktree.
pub const TIME_BOUND: Duration = Duration::from_secs(120);
/// How many times the member's bound the King's tree has (a merge there
/// runs the King's own hooks, which may test the whole project).
const KINGS_TIMES: u32 = 5;

/// The bound of kd's git in a member's worktree, in milliseconds.
static BOUND_MS: AtomicU64 = AtomicU64::new(TIME_BOUND.as_millis() as u64);

/// Sets the time bound of kd's git in a member's worktree (at least a
/// tenth of a second); the King's tree gets five times it.
pub fn set_time_bound(bound: Duration) {
    let ms = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX).max(100);
    BOUND_MS.store(ms, Ordering::Relaxed);
}

/// When this kdd started (its first [`note_start`]).
static STARTED: std::sync::OnceLock<std::time::SystemTime> = std::sync::OnceLock::new();

/// Notes that kdd starts now: an `index.lock` in a member's git directory
/// older than this is no running git's ([`stale_lock`]).
pub fn note_start() {
    let _ = STARTED.set(std::time::SystemTime::now());
}

/// Whether `lock` was left by a git that died with an earlier kdd: made
/// before this one started. kd's git dies with kdd, and so does a member's
/// agent with its own git, but a killed git leaves its lock, which held
/// every later commit there.
fn stale_lock(lock: &Path) -> bool {
    let (Some(started), Ok(meta)) = (STARTED.get(), std::fs::symlink_metadata(lock)) else { return false };
    meta.is_file() && meta.modified().is_ok_and(|made| made < *started)
}

/// The time bound of kd's git in a member's worktree.
pub fn member_bound() -> Duration {
    Duration::from_millis(BOUND_MS.load(Ordering::Relaxed))
}

/// The time bound of kd's git in the King's tree.
fn kings_bound() -> Duration {
    member_bound().saturating_mul(KINGS_TIMES)
}

/// Runs `git -C dir ARGS` with `env`, under the lock of `repo`, reading at
/// most `limit` bytes of its output, for at most the King's tree's time
/// bound.
pub async fn git(repo: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)], limit: usize) -> GitResult<Output> {
    bounded(repo, dir, args, env, limit, (kings_bound(), None)).await
}

/// [`git`] for at most `within`; when it is stopped there, the git lock
/// `lock` (an `index.lock`) it leaves is removed — one that was there
/// before it started is not its own, unless an earlier kdd's git left it
/// ([`stale_lock`]): that one is removed first.
async fn bounded(
    repo: &Path,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    limit: usize,
    (within, lock): (Duration, Option<&Path>),
) -> GitResult<Output> {
    let serial = lock_of(repo);
    let _serial = serial.lock().await;
    if let Some(l) = lock.filter(|l| stale_lock(l)) {
        match std::fs::remove_file(l) {
            Ok(()) => tracing::warn!("removed {}, left by a git that died with an earlier kdd", l.display()),
            Err(e) => tracing::warn!("cannot remove {}, left by an earlier kdd's git: {e}", l.display()),
        }
    }
    let locked_before = lock.is_some_and(|l| std::fs::symlink_metadata(l).is_ok());
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C").arg(dir).args(args).envs(env.iter().copied()).env("GIT_EDITOR", "true");
    unattended(&mut cmd);
    // A group of its own: what it starts (a hook) is stopped with it.
    cmd.process_group(0);
    // A checkout or merge writes the King's files as their own git would.
    crate::private::with_user_umask(&mut cmd);
    // In a member's worktree (`lock` named), git dies with kdd: one left
    // running held the worktree's lock from the next daemon. In your tree
    // it runs to its end, as your own git would (killed, it would leave
    // your index locked).
    let mut child = match lock {
        Some(_) => children::spawn_tool(cmd).await,
        None => children::spawn(&mut cmd, children::Origin::Tool),
    }
    .map_err(GitError::Spawn)?;
    let pid = child.id();
    match tokio::time::timeout(within, read_and_wait(&mut child, limit)).await {
        Ok(out) => out,
        Err(_) => {
            if let Some(group) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            let _ = child.start_kill();
            let _ = child.wait().await;
            if let Some(lock) = lock.filter(|_| !locked_before) {
                let _ = std::fs::remove_file(lock);
            }
            tracing::warn!("git {}: stopped after {} s", args.join(" "), within.as_secs_f32());
            Err(GitError::TimedOut { args: args.join(" "), within })
        }
    }
}

/// What `child` (a git) prints, read to its bounds, and how it ended.
async fn read_and_wait(child: &mut tokio::process::Child, limit: usize) -> GitResult<Output> {
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let read_out = async {
        let mut buf = Vec::new();
        let mut cut = false;
        if let Some(out) = out.as_mut() {
            let _ = out.take(limit as u64).read_to_end(&mut buf).await;
            // Past the bound: drain (and drop) the rest so git can end.
            let mut sink = [0u8; 8192];
            while let Ok(n) = out.read(&mut sink).await {
                if n == 0 {
                    break;
                }
                cut = true;
            }
        }
        (buf, cut)
    };
    let read_err = async {
        let mut buf = Vec::new();
        if let Some(err) = err.as_mut() {
            let _ = err.take(ERRORS as u64).read_to_end(&mut buf).await;
            let mut sink = [0u8; 8192];
            while matches!(err.read(&mut sink).await, Ok(n) if n > 0) {}
        }
        buf
    };
    let ((stdout, cut), stderr) = tokio::join!(read_out, read_err);
    let status = child.wait().await.map_err(GitError::Spawn)?;
    Ok(Output {
        ok: status.success(),
        code: status.code(),
        stdout,
        cut,
        stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
    })
}

/// `git ARGS` in `dir` of `repo`, which must succeed; its output.
async fn must(repo: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> GitResult<Output> {
    let out = git(repo, dir, args, env, OUTPUT).await?;
    if out.ok { Ok(out) } else { Err(failed(args, &out)) }
}

fn failed(args: &[&str], out: &Output) -> GitError {
    let lines: Vec<&str> = out.stderr.lines().collect();
    let at = lines.iter().rposition(|l| l.starts_with("fatal:") || l.starts_with("error:"));
    let reason = match at {
        // With the files git lists under it (tab-indented), at most ten.
        Some(i) => {
            let files: Vec<&str> =
                lines[i + 1..].iter().take_while(|l| l.starts_with('\t')).map(|l| l.trim()).take(10).collect();
            if files.is_empty() { lines[i].to_string() } else { format!("{} {}", lines[i], files.join(", ")) }
        }
        None if out.stderr.is_empty() => format!("exit status {}", out.code.map_or("?".into(), |c| c.to_string())),
        None => out.stderr.lines().last().unwrap_or_default().to_string(),
    };
    GitError::Failed { args: args.join(" "), reason }
}

/// The top-level directory of the repository `dir` is in.
pub async fn top(dir: &Path) -> GitResult<PathBuf> {
    let out = git(dir, dir, &["rev-parse", "--show-toplevel"], &[], OUTPUT).await?;
    if !out.ok {
        return Err(GitError::NotARepository { dir: dir.display().to_string() });
    }
    Ok(PathBuf::from(out.text().trim_end_matches('\n')))
}

/// The commit HEAD is at.
pub async fn head(repo: &Path) -> GitResult<String> {
    let out = git(repo, repo, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], &[], OUTPUT).await?;
    if !out.ok {
        return Err(GitError::NoCommit { repo: repo.display().to_string() });
    }
    Ok(out.text().trim().to_string())
}

/// The branch HEAD is on, as its name under `refs/heads/` (never git's
/// short form, which is `heads/main` beside a tag `main`); none when it is
/// detached.
pub async fn branch(repo: &Path) -> GitResult<Option<String>> {
    let out = git(repo, repo, &["symbolic-ref", "--quiet", "HEAD"], &[], OUTPUT).await?;
    Ok(out.ok.then(|| out.text()).and_then(|r| r.trim().strip_prefix("refs/heads/").map(str::to_string)))
}

/// Makes a worktree of `repo` at `path` on a new branch `branch` at `base`.
pub async fn worktree_add(repo: &Path, path: &Path, branch: &str, base: &str) -> GitResult<()> {
    let path = path.to_string_lossy();
    must(repo, repo, &["worktree", "add", "--quiet", "-b", branch, &path, base], &[]).await?;
    Ok(())
}

/// Removes the worktree at `path` (with what is in it: the caller knows
/// its work is committed, settled or empty).
pub async fn worktree_remove(repo: &Path, path: &Path) -> GitResult<()> {
    let p = path.to_string_lossy();
    must(repo, repo, &["worktree", "remove", "--force", &p], &[]).await?;
    Ok(())
}

/// Deletes a branch whatever it holds (the caller knows it is settled).
pub async fn branch_delete(repo: &Path, branch: &str) -> GitResult<()> {
    must(repo, repo, &["branch", "--quiet", "-D", branch], &[]).await?;
    Ok(())
}

/// Whether the branch exists.
pub async fn has_branch(repo: &Path, branch: &str) -> GitResult<bool> {
    let full = format!("refs/heads/{branch}");
    Ok(git(repo, repo, &["show-ref", "--verify", "--quiet", &full], &[], OUTPUT).await?.ok)
}

/// What changed from `base` to `head`, per file.
pub async fn diff_stat(repo: &Path, base: &str, head: &str) -> GitResult<Vec<FileStat>> {
    let out = must(repo, repo, &["diff", "--numstat", "-z", "--no-renames", base, head, "--"], &[]).await?;
    Ok(parse_numstat(&out.stdout))
}

/// The patch from `base` to `head`, at most `max` bytes of it, and whether
/// it was cut.
pub async fn diff_patch(repo: &Path, base: &str, head: &str, max: usize) -> GitResult<(String, bool)> {
    let args = ["diff", "--no-color", "--no-ext-diff", "--no-renames", base, head, "--"];
    let out = git(repo, repo, &args, &[], max).await?;
    if !out.ok {
        return Err(failed(&args, &out));
    }
    let mut text = out.text();
    if out.cut {
        // Never half a character: from_utf8_lossy made the cut one U+FFFD.
        text = text.trim_end_matches('\u{FFFD}').to_string();
    }
    Ok((text, out.cut))
}

/// The commits from `base` to `head`, newest first, at most `max`: each
/// id and the first line of its message.
pub async fn commits(repo: &Path, base: &str, head: &str, max: usize) -> GitResult<Vec<(String, String)>> {
    let range = format!("{base}..{head}");
    let n = format!("--max-count={max}");
    let out = must(repo, repo, &["log", "--no-color", "--format=%H%x00%s", &n, &range, "--"], &[]).await?;
    Ok(out.text().lines().filter_map(|l| l.split_once('\0')).map(|(c, s)| (c.to_string(), s.to_string())).collect())
}

/// `git diff --numstat -z`: `ADDED\tREMOVED\tPATH\0` (`-\t-\t` for a
/// binary file).
fn parse_numstat(out: &[u8]) -> Vec<FileStat> {
    out.split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .filter_map(|record| {
            let text = String::from_utf8_lossy(record);
            let mut parts = text.splitn(3, '\t');
            let (added, removed, path) = (parts.next()?, parts.next()?, parts.next()?);
            let binary = added == "-" && removed == "-";
            Some(FileStat {
                path: path.to_string(),
                added: added.parse().unwrap_or(0),
                removed: removed.parse().unwrap_or(0),
                binary,
            })
        })
        .collect()
}

/// The files of the King's tree with changes not committed (staged or
/// not; untracked files aside: a merge refuses to overwrite one itself).
pub async fn dirty(repo: &Path) -> GitResult<Vec<String>> {
    let out = must(repo, repo, &["status", "--porcelain=v1", "-z", "--untracked-files=no"], &[]).await?;
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|r| r.len() > 3)
        .map(|r| String::from_utf8_lossy(&r[3..]).into_owned())
        .collect())
}

/// Which of `paths` are untracked and not ignored in the King's tree: a
/// merge that writes them is refused by git.
pub async fn untracked(repo: &Path, paths: &[String]) -> GitResult<Vec<String>> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec!["ls-files", "--others", "--exclude-standard", "-z", "--"];
    // `:(literal)` so that a path is never read as a pattern.
    let literal: Vec<String> = paths.iter().map(|p| format!(":(literal){p}")).collect();
    args.extend(literal.iter().map(String::as_str));
    let out = must(repo, repo, &args, &[]).await?;
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect())
}

/// The files that would conflict if `branch` were merged into HEAD, found
/// without touching the tree or the index (`git merge-tree
/// --write-tree`); empty when it merges cleanly.
pub async fn merge_conflicts(repo: &Path, branch: &str) -> GitResult<Vec<String>> {
    let args = ["merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", "HEAD", branch];
    let out = git(repo, repo, &args, &[], OUTPUT).await?;
    match out.code {
        Some(0) => Ok(Vec::new()),
        // Conflicts: the tree's id, then the conflicted files.
        Some(1) => Ok(out
            .stdout
            .split(|b| *b == 0)
            .skip(1)
            .take_while(|r| !r.is_empty())
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect()),
        _ => Err(failed(&args, &out)),
    }
}

/// Merges `branch` into the King's current branch (a merge commit, or one
/// squashed commit), with `message`; the new HEAD. The caller checked the
/// tree is clean and the merge has no conflict; if git still refuses, the
/// merge is aborted and nothing changed.
pub async fn merge(repo: &Path, branch: &str, squash: bool, message: &str) -> GitResult<String> {
    if squash {
        let args = ["merge", "--squash", "--quiet", branch];
        let out = git(repo, repo, &args, &[], OUTPUT).await?;
        if !out.ok {
            let _ = git(repo, repo, &["reset", "--merge"], &[], OUTPUT).await;
            return Err(failed(&args, &out));
        }
        let commit = ["commit", "--quiet", "-m", message];
        let out = git(repo, repo, &commit, &[], OUTPUT).await?;
        if !out.ok {
            let _ = git(repo, repo, &["reset", "--merge"], &[], OUTPUT).await;
            return Err(failed(&commit, &out));
        }
    } else {
        let args = ["merge", "--no-ff", "--no-log", "--quiet", "-m", message, branch];
        let out = git(repo, repo, &args, &[], OUTPUT).await?;
        if !out.ok {
            let _ = git(repo, repo, &["merge", "--abort"], &[], OUTPUT).await;
            return Err(failed(&args, &out));
        }
    }
    head(repo).await
}

/// The commit `rev` names, if it names one.
pub async fn commit_of(repo: &Path, rev: &str) -> GitResult<Option<String>> {
    if rev.starts_with('-') {
        return Ok(None);
    }
    let spec = format!("{rev}^{{commit}}");
    let out = git(repo, repo, &["rev-parse", "--verify", "--quiet", "--end-of-options", &spec], &[], OUTPUT).await?;
    Ok(out.ok.then(|| out.text().trim().to_string()))
}

/// What a review of `rev` compares it with: for a commit in HEAD's
/// history, its parent (the empty tree for a root commit); for a branch
/// off it, where it left HEAD's history.
pub async fn review_base(repo: &Path, commit: &str) -> GitResult<String> {
    let base = must(repo, repo, &["merge-base", "HEAD", commit], &[]).await?.text().trim().to_string();
    if base != commit {
        return Ok(base);
    }
    let parent = format!("{commit}^");
    match commit_of(repo, &parent).await? {
        Some(p) => Ok(p),
        // git's empty tree: a root commit's diff is all it adds.
        None => Ok("4b825dc642cb6eb9a060e54bf8d69288fbee4904".into()),
    }
}

/// Whether every commit of `branch` is in HEAD's history (it was merged).
pub async fn is_merged(repo: &Path, branch: &str) -> GitResult<bool> {
    is_ancestor(repo, branch, "HEAD").await
}

/// Whether commit `a` is in `b`'s history (or is `b`).
pub async fn is_ancestor(repo: &Path, a: &str, b: &str) -> GitResult<bool> {
    Ok(git(repo, repo, &["merge-base", "--is-ancestor", a, b], &[], OUTPUT).await?.ok)
}

/// The best common ancestors of `a` and `b` (more than one in a
/// criss-cross history; none for unrelated ones).
pub async fn merge_bases(repo: &Path, a: &str, b: &str) -> GitResult<Vec<String>> {
    let args = ["merge-base", "--all", a, b];
    let out = git(repo, repo, &args, &[], OUTPUT).await?;
    match out.code {
        Some(0) => Ok(out.text().lines().map(str::to_string).collect()),
        // No common ancestor.
        Some(1) if out.stderr.is_empty() => Ok(Vec::new()),
        _ => Err(failed(&args, &out)),
    }
}

/// Prunes the records of worktrees whose directories are gone (their
/// branches, and so their commits, stay).
pub async fn prune(repo: &Path) -> GitResult<()> {
    must(repo, repo, &["worktree", "prune"], &[]).await?;
    Ok(())
}

/// `cmd` (git, or gh) run with no terminal: never a prompt for a
/// credential, the repository named by its arguments and directory only
/// (not by the caller's `GIT_DIR`…), its output read, killed if dropped.
pub(crate) fn unattended(cmd: &mut tokio::process::Command) {
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
}

#[cfg(test)]
mod tests;
