//! A run in a member's worktree (F-W1, F-W2, F-W6), kd's side of it: the
//! worktree's own temporary directory; before the agent starts on a new
//! worktree, `work.copy` from the King's tree and `work.setup` run in it;
//! at the end of every run, whatever its outcome, a commit of what the
//! member changed on its branch, recorded on the run and the worktree and
//! told to the thread; and at the daemon's start, a commit of what a run
//! the last daemon died in left. The backends' write modes are in
//! [`super::argv`], [`super::appserver`] and [`super::acp`].

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use kd_proto::types::{RunStatus, ThreadEvent};
use kd_proto::work::WorkState;
use rustix::process::Signal;

use super::Runner;
use super::process;
use super::process::Invocation;
use super::registry::Run;
use super::spec::{Spec, WorkRun};
use crate::db::Db;
use crate::db::runs::Finish;
use crate::git;

/// Bytes of a setup's output kept (its tail).
const SETUP_TAIL: usize = 8 * 1024;
/// Bytes of it said in a failed run's error.
const ERROR_TAIL: usize = 2 * 1024;
/// Files and bytes one worktree's `work.copy` may copy.
const MAX_COPY_FILES: usize = 100_000;
const MAX_COPY_BYTES: u64 = 4 << 30;
/// Characters of a run's work note kept.
const MAX_NOTE: usize = 16 * 1024;
/// Notes beginning so are said in the run's message, not only kept.
pub const SAID: &str = "! ";

/// The file listing what a new worktree is given by default.
pub const WORKTREEINCLUDE: &str = ".worktreeinclude";

/// The worktree's own temporary directory (its `TMPDIR`): beside it, so
/// never committed, in kd's data directory.
pub fn tmp_dir(work: &WorkRun) -> PathBuf {
    tmp_dir_of(&work.dir)
}

/// [`tmp_dir`] of the worktree at `worktree`.
pub fn tmp_dir_of(worktree: &Path) -> PathBuf {
    let mut name = worktree.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    worktree.with_file_name(name)
}

/// Makes [`tmp_dir`], `0700`, if it is not there (a symlink there is refused).
pub fn make_tmp_dir(work: &WorkRun) -> std::io::Result<PathBuf> {
    make_tmp_dir_of(&work.dir)
}

/// [`make_tmp_dir`] of the worktree at `worktree`.
pub fn make_tmp_dir_of(worktree: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let dir = tmp_dir_of(worktree);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => Ok(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(&dir)?;
            if !meta.is_dir() || meta.uid() != rustix::process::getuid().as_raw() {
                return Err(std::io::Error::other(format!("{} is not a directory of kd's", dir.display())));
            }
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

/// At the start of a work run: the member's work is in progress again.
pub async fn started(d: &Runner, run: &Run) {
    set_state(d, run, WorkState::Working).await;
}

/// Gets a new worktree ready before the agent starts: `work.copy` from the
/// King's tree, then `work.setup` in it, outside any sandbox. Its output is
/// kept on the run; a failure is the run's error, with the output's tail.
pub async fn set_up(d: &Runner, run: &Run, spec: &Spec, work: &WorkRun) -> Result<(), String> {
    let entries = match &spec.work_settings.copy {
        Some(c) => c.clone(),
        None => worktreeinclude(&work.repo),
    };
    if !entries.is_empty() {
        let (repo, dir) = (work.repo.clone(), work.dir.clone());
        let copied = tokio::task::spawn_blocking(move || copy_entries(&repo, &dir, &entries))
            .await
            .map_err(|e| format!("work.copy: {e}"))?
            .map_err(|e| format!("work.copy: {e}"))?;
        if !copied.is_empty() {
            let line = format!("copied into the worktree: {}", copied.join(", "));
            run.push_activity(&d.hub, &line);
            run.note_work(line);
        }
    }
    let Some(argv) = &spec.work_settings.setup else { return Ok(()) };
    let shown = argv.join(" ");
    run.push_activity(&d.hub, &format!("setup: {shown}"));
    let (ok, said) = run_setup(d, run, spec, work, argv).await?;
    let outcome = if ok { "done" } else { "failed" };
    let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    run.push_activity(&d.hub, &format!("setup {outcome}: {last}"));
    let note = format!("work.setup `{shown}` {outcome}{}", with_output(&said));
    run.note_work(note);
    if ok {
        Ok(())
    } else {
        let tail = tail_chars(&said, ERROR_TAIL);
        Err(format!("work.setup `{shown}` failed in {}{}", work.dir.display(), with_output(&tail)))
    }
}

fn with_output(said: &str) -> String {
    if said.trim().is_empty() { String::new() } else { format!(":\n{}", said.trim_end()) }
}

/// The last `max` bytes of `s` (on a character boundary).
fn tail_chars(s: &str, max: usize) -> String {
    let mut at = s.len().saturating_sub(max);
    while !s.is_char_boundary(at) {
        at += 1;
    }
    s[at..].to_string()
}

/// Runs the setup command in the worktree: by the run's timeout and its
/// stop, its output's tail kept. Whether it succeeded, and what it said.
async fn run_setup(
    d: &Runner,
    run: &Run,
    spec: &Spec,
    work: &WorkRun,
    argv: &[String],
) -> Result<(bool, String), String> {
    let (program, args) = argv.split_first().ok_or("work.setup names no program")?;
    let mut env: Vec<(String, String)> = Vec::new();
    if let Ok(tmp) = make_tmp_dir(work) {
        env.push(("TMPDIR".into(), tmp.display().to_string()));
    }
    env.push((SETUP_MARKER.into(), run.id.clone()));
    let inv = Invocation { program: program.clone(), args: args.to_vec(), stdin: None, env };
    let mut child = process::spawn(&inv, &work.dir).map_err(|e| format!("work.setup: cannot run {program}: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let started = process::start_time(pid);
    let out = child.stdout.take().map(|o| super::lines::tail(o, SETUP_TAIL));
    let err = child.stderr.take().map(|e| super::lines::tail(e, SETUP_TAIL));
    let ended = tokio::select! {
        status = child.wait() => status.ok(),
        _ = tokio::time::sleep(spec.timeout) => None,
        _ = run.stopped() => None,
    };
    let status = match ended {
        Some(s) => Some(s),
        None => {
            process::signal_group(pid, Signal::TERM);
            match tokio::time::timeout(d.kill_grace, child.wait()).await {
                Ok(s) => s.ok(),
                Err(_) => {
                    process::signal_group(pid, Signal::KILL);
                    child.wait().await.ok()
                }
            }
            .filter(|_| false)
        }
    };
    let marker = process::marker(SETUP_MARKER, &run.id);
    let _ = tokio::task::spawn_blocking(move || process::kill_tree(pid, started, &marker)).await;
    let read = |h: Option<tokio::task::JoinHandle<String>>| async move {
        match h {
            Some(h) => {
                tokio::time::timeout(Duration::from_secs(2), h).await.ok().and_then(Result::ok).unwrap_or_default()
            }
            None => String::new(),
        }
    };
    let (stdout, stderr) = (read(out).await, read(err).await);
    let said = tail_chars(&format!("{stdout}{stderr}"), SETUP_TAIL);
    match status {
        Some(s) if s.success() => Ok((true, said)),
        Some(s) => Ok((false, format!("{said}\n(exit status {})", s.code().map_or("?".into(), |c| c.to_string())))),
        None if run.stop_reason().is_some() && run.stop_reason() != Some(super::registry::StopReason::TimedOut) => {
            Ok((false, format!("{said}\n(stopped)")))
        }
        None => Ok((false, format!("{said}\n(timed out after {} s)", spec.timeout.as_secs()))),
    }
}

/// Marks what `work.setup` starts, so nothing of it outlives it.
const SETUP_MARKER: &str = "KD_SETUP";

/// The entries of `.worktreeinclude` at the repository's top: one path a
/// line, `#` comments and blank lines aside, a leading or trailing `/`
/// dropped; a pattern (`*`, `?`, `[`, `!`) is not a path and is skipped.
fn worktreeinclude(repo: &Path) -> Vec<String> {
    let Ok(text) = read_regular(&repo.join(WORKTREEINCLUDE), 64 * 1024) else { return Vec::new() };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains(['*', '?', '[', '!']))
        .map(|l| l.trim_matches('/').to_string())
        .filter(|l| relative(l).is_some())
        .take(256)
        .collect()
}

/// A regular file's text, not following a symlink, at most `max` bytes.
fn read_regular(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    std::fs::File::open(path)?.take(max).read_to_string(&mut text)?;
    Ok(text)
}

/// `p` as a path inside the repository: relative, with no `..`.
fn relative(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    let ok = !p.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    ok.then(|| path.components().filter(|c| matches!(c, Component::Normal(_))).collect::<PathBuf>())
        .filter(|p| !p.as_os_str().is_empty())
}

/// Copies each entry of the King's tree `repo` into the worktree `dir`:
/// regular files and directories only (a symlink — the entry, a directory
/// on its way, or one inside a directory copied — is never followed, nor
/// copied), nothing outside the repository, a missing entry skipped. The
/// entries copied.
fn copy_entries(repo: &Path, dir: &Path, entries: &[String]) -> Result<Vec<String>, String> {
    let mut budget = (MAX_COPY_FILES, MAX_COPY_BYTES);
    let mut copied = Vec::new();
    for entry in entries {
        let Some(rel) = relative(entry) else {
            return Err(format!("{entry:?} is not a path inside the repository"));
        };
        // No component on the way may be a symlink, in either tree.
        if through_symlink(repo, &rel) || through_symlink(dir, &rel) {
            continue;
        }
        let from = repo.join(&rel);
        let Ok(meta) = std::fs::symlink_metadata(&from) else { continue };
        let to = dir.join(&rel);
        if meta.is_file() || meta.is_dir() {
            copy_tree(&from, &to, &mut budget).map_err(|e| format!("{entry}: {e}"))?;
            copied.push(entry.clone());
        }
    }
    Ok(copied)
}

/// Whether a directory on the way from `root` to `rel` (`rel` itself
/// aside) is a symlink.
fn through_symlink(root: &Path, rel: &Path) -> bool {
    let mut at = root.to_path_buf();
    let Some(parent) = rel.parent() else { return false };
    parent.components().any(|c| {
        at.push(c);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink())
    })
}

/// Copies a regular file or a directory's regular files and directories.
fn copy_tree(from: &Path, to: &Path, budget: &mut (usize, u64)) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.is_dir() {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::symlink_metadata(to) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                std::fs::remove_file(to)?;
                std::fs::create_dir(to)?;
            }
            Err(_) => std::fs::create_dir(to)?,
        }
        for item in std::fs::read_dir(from)? {
            let item = item?;
            copy_tree(&item.path(), &to.join(item.file_name()), budget)?;
        }
        return Ok(());
    }
    if !meta.is_file() {
        return Ok(());
    }
    if budget.0 == 0 || budget.1 < meta.len() {
        return Err(std::io::Error::other("work.copy: too much to copy (at most 100,000 files, 4 GiB)"));
    }
    budget.0 -= 1;
    budget.1 -= meta.len();
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // A symlink where the copy goes (a tracked one) is replaced, not followed.
    if std::fs::symlink_metadata(to).is_ok_and(|m| !m.is_file()) {
        std::fs::remove_file(to)?;
    }
    std::fs::copy(from, to)?;
    Ok(())
}

/// At the end of every work run, whatever its outcome: commits what the
/// member changed on its branch (before anything else can happen to the
/// worktree), records the commit and the run's notes on the run, moves the
/// worktree's head and size, and tells the thread. What the run's notes
/// say (a setup's output, writes claude refused) is said in its message.
pub async fn finish(d: &Runner, run: &Run, work: &WorkRun, finish: &mut Finish) {
    let message = if finish.status == RunStatus::Done {
        work.task.clone()
    } else {
        format!("{} ({})", work.task, finish.status.as_str())
    };
    let committed = commit(&d.db, &run.thread, &run.member, work, &message).await;
    let mut notes = run.work_notes();
    let commit = match committed {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(run = run.id, "cannot commit the member's work: {e}");
            notes.push(format!("{SAID}kd could not commit the work in {}: {e}", work.dir.display()));
            None
        }
    };
    // The refusals and failures are said in the message, never dropped.
    let said: Vec<&String> = notes.iter().filter(|n| n.starts_with(SAID)).collect();
    if !said.is_empty() {
        let lines = said.iter().map(|s| &s[SAID.len()..]).collect::<Vec<_>>().join("\n");
        if let Some(e) = &mut finish.error {
            e.push('\n');
            e.push_str(&lines);
        }
        if !finish.body.is_empty() {
            finish.body.push_str("\n\n");
        }
        finish.body.push_str(&lines);
    }
    let plain: Vec<&str> = notes.iter().map(|n| n.strip_prefix(SAID).unwrap_or(n)).collect();
    let note = (!plain.is_empty()).then(|| tail_chars(&plain.join("\n"), MAX_NOTE));
    if let Err(e) = d.db.set_run_work(run.id.clone(), commit.clone(), note).await {
        tracing::error!(run = run.id, "cannot record the run's work: {e}");
    }
    // Working while another run of the member is in flight on the thread.
    let busy = d.runs.list(Some(&run.thread)).iter().any(|r| r.member == run.member && r.id != run.id);
    set_state(d, run, if busy { WorkState::Working } else { WorkState::Done }).await;
}

/// Commits everything changed in the worktree as `member` with `message`,
/// then records the branch's head and its diff's size from its base. The
/// new commit, if anything changed.
pub async fn commit(
    db: &Db,
    thread: &str,
    member: &str,
    work: &WorkRun,
    message: &str,
) -> Result<Option<String>, String> {
    if !work.dir.is_dir() {
        return Err(format!("the worktree {} is gone", work.dir.display()));
    }
    let commit = git::commit_all(&work.repo, &work.dir, member, message).await.map_err(|e| e.to_string())?;
    let head = git::head(&work.dir).await.map_err(|e| e.to_string())?;
    let stats = git::diff_stat(&work.repo, &work.base, &head).await.map_err(|e| e.to_string())?;
    let totals = (
        u32::try_from(stats.len()).unwrap_or(u32::MAX),
        stats.iter().map(|s| s.added).sum::<u64>(),
        stats.iter().map(|s| s.removed).sum::<u64>(),
    );
    let (t, m) = (thread.to_string(), member.to_string());
    db.set_worktree_head(t, m, head, totals).await.map_err(|e| e.to_string())?;
    Ok(commit)
}

/// Sets the member's work state and tells the thread (a worktree the King
/// settled meanwhile stays as the King left it).
async fn set_state(d: &Runner, run: &Run, state: WorkState) {
    let (t, m) = (run.thread.clone(), run.member.clone());
    let moved = d.db.move_worktree_state(t, m, state).await;
    match moved {
        Ok(Some(w)) => d.hub.publish(&run.thread, ThreadEvent::Work { worktree: Box::new(w) }),
        Ok(None) => {}
        Err(e) => tracing::error!(run = run.id, "cannot record the member's work state: {e}"),
    }
}

/// At start: every worktree still `working` had a run the last daemon died
/// in. What that member left is committed ("TASK (interrupted)") and
/// recorded on its interrupted run; the work is `done` and its worktree
/// kept. Returns how many worktrees. `orphans`: the runs left in flight,
/// by thread and member.
pub async fn recover(db: &Db, orphans: &[(String, String, String)]) -> usize {
    let trees = match db.unsettled_worktrees().await {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("cannot read the worktrees: {e}");
            return 0;
        }
    };
    let mut n = 0;
    for w in trees.into_iter().filter(|w| w.state == WorkState::Working) {
        let work = WorkRun {
            dir: PathBuf::from(&w.path),
            repo: PathBuf::from(&w.repo),
            branch: w.branch.clone(),
            base: w.base.clone(),
            task: w.task.clone(),
            fresh: false,
        };
        let message = format!("{} (interrupted)", w.task);
        let committed = commit(db, &w.thread, &w.member, &work, &message).await;
        let note = match &committed {
            Ok(Some(c)) => format!("kdd stopped mid-run: kd committed what was left as {c}"),
            Ok(None) => "kdd stopped mid-run: nothing was left to commit".to_string(),
            Err(e) => format!("kdd stopped mid-run; kd could not commit what was left: {e}"),
        };
        tracing::warn!(thread = w.thread, member = w.member, "{note}");
        let run = orphans.iter().rev().find(|(_, t, m)| *t == w.thread && *m == w.member).map(|(id, _, _)| id.clone());
        let (t, m, commit) = (w.thread.clone(), w.member.clone(), committed.ok().flatten());
        let recorded = db.work_interrupted(t, m, run, commit, note.clone()).await;
        if let Err(e) = recorded {
            tracing::error!(thread = w.thread, member = w.member, "cannot record the interrupted work: {e}");
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stay_inside_the_repository() {
        assert_eq!(relative("a/./b"), Some(PathBuf::from("a/b")));
        for bad in ["", "/etc", "../x", "a/../../b", "."] {
            assert_eq!(relative(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_tmp_dir_is_beside_the_worktree() {
        let w = WorkRun {
            dir: "/d/worktrees/r-t1/claude".into(),
            repo: "/r".into(),
            branch: "kd/t1/claude".into(),
            base: "b".into(),
            task: "t".into(),
            fresh: true,
        };
        assert_eq!(tmp_dir(&w), PathBuf::from("/d/worktrees/r-t1/claude.tmp"));
    }

    #[test]
    fn copy_takes_files_and_directories_never_a_symlink() {
        let base = std::env::temp_dir().join(format!("kd-copy-{}", std::process::id()));
        let (repo, dir, outside) = (base.join("repo"), base.join("wt"), base.join("outside"));
        for d in [&repo, &dir, &outside, &repo.join("conf/sub")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(repo.join(".env"), "SECRET=1").unwrap();
        std::fs::write(repo.join("conf/sub/a.toml"), "a").unwrap();
        std::fs::write(outside.join("x"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, repo.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("x"), repo.join("conf/sub/x")).unwrap();
        std::os::unix::fs::symlink(&outside, repo.join("conf/out")).unwrap();
        let entries = [".env", "conf", "link", "link/x", "missing"].map(String::from);
        let copied = copy_entries(&repo, &dir, &entries).unwrap();
        assert_eq!(copied, [".env", "conf"]);
        assert_eq!(std::fs::read_to_string(dir.join(".env")).unwrap(), "SECRET=1");
        assert_eq!(std::fs::read_to_string(dir.join("conf/sub/a.toml")).unwrap(), "a");
        assert!(std::fs::symlink_metadata(dir.join("conf/sub/x")).is_err());
        assert!(std::fs::symlink_metadata(dir.join("conf/out")).is_err());
        assert!(std::fs::symlink_metadata(dir.join("link")).is_err());
        // A symlink in the worktree where a copy goes is replaced, not written through.
        std::os::unix::fs::symlink(outside.join("x"), dir.join("dot")).unwrap();
        std::fs::write(repo.join("dot"), "mine").unwrap();
        copy_entries(&repo, &dir, &["dot".to_string()]).unwrap();
        assert_eq!(std::fs::read_to_string(outside.join("x")).unwrap(), "outside");
        assert_eq!(std::fs::read_to_string(dir.join("dot")).unwrap(), "mine");
        assert!(copy_entries(&repo, &dir, &["../x".to_string()]).is_err());
        std::fs::write(repo.join(WORKTREEINCLUDE), "# local files\n.env\n/conf/\n*.key\n../up\n\n").unwrap();
        assert_eq!(worktreeinclude(&repo), [".env", "conf"]);
        let _ = std::fs::remove_dir_all(&base);
    }
}
