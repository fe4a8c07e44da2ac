//! A run in a member's worktree (F-W1, F-W2, F-W6), kd's side of it: the
//! worktree's own temporary directory; before the agent starts on a new
//! worktree, `work.copy` from the King's tree ([`copy`]) and `work.setup`
//! run in it; at the end of every run, whatever its outcome, a commit of
//! what the member changed on its branch (never through a `.git` the
//! member could have replaced: [`crate::git::member`]), recorded on the run
//! and the worktree and told to the thread; and at the daemon's start, a
//! commit of what a run the last daemon died in left. The backends' write modes are in
//! [`super::argv`], [`super::appserver`] and [`super::acp`].

pub mod after;
mod copy;

use std::path::{Path, PathBuf};
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
/// Characters of a run's work note kept.
const MAX_NOTE: usize = 16 * 1024;
/// Notes beginning so are said in the run's message, not only kept.
pub const SAID: &str = "! ";

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
        None => copy::worktreeinclude(&work.repo),
    };
    if !entries.is_empty() {
        let (repo, dir) = (work.repo.clone(), work.dir.clone());
        let copied = tokio::task::spawn_blocking(move || copy::copy_entries(&repo, &dir, &entries))
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
    // The PATH the member's agent is found on: `npm ci` as the King's shell runs it.
    let mut env: Vec<(String, String)> = spec.agent.path.iter().map(|p| ("PATH".to_string(), p.clone())).collect();
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

/// At the end of every work run, whatever its outcome: commits what the
/// member changed on its branch (before anything else can happen to the
/// worktree), records the commit and the run's notes on the run, moves the
/// worktree's head and size, and tells the thread. What the run's notes
/// say (a setup's output, writes claude refused, a worktree kd would not
/// commit) is said in its message. A worktree whose `.git` is not what kd
/// made is not committed: its work is `tampered`.
///
/// With a check configured (`checked`), work that is done gets its check
/// marked running in the same move ([`after::mark_check`]) — only when the
/// run's work was committed: a check is of a commit, never of a worktree
/// kd could not commit (markers a rebase's merge left, git timed out).
/// Whether it was: what follows committed work ([`after::committed`]) is
/// for it alone.
pub async fn finish(d: &Runner, run: &Run, work: &WorkRun, finish: &mut Finish, checked: bool) -> bool {
    let message = if finish.status == RunStatus::Done {
        work.task.clone()
    } else {
        format!("{} ({})", work.task, finish.status.as_str())
    };
    let stop = || d.is_closed();
    let committed = commit(&d.db, &run.thread, &run.member, work, &message, &stop).await;
    let mut notes = run.work_notes();
    let mut tampered = false;
    let recorded_commit = matches!(committed, Ok(Committed::Commit(_)));
    let commit = match committed {
        Ok(Committed::Commit(c)) => c,
        Ok(Committed::Tampered(why)) => {
            tracing::warn!(run = run.id, member = run.member, "not committing a worktree tampered with: {why}");
            notes.push(format!("{SAID}{}", tampered_note(&run.member, work, &why)));
            tampered = true;
            None
        }
        Ok(Committed::Unrecorded { commit, why }) => {
            tracing::error!(run = run.id, "cannot record the head of the work kd committed: {why}");
            let what =
                commit.as_deref().map_or_else(String::new, |c| format!(" as {}", kd_proto::work::short_commit(c)));
            notes.push(format!("{SAID}kd committed the work{what} but could not record its head: {why}"));
            commit
        }
        Err(e) => {
            tracing::error!(run = run.id, "cannot commit the member's work: {e}");
            notes.push(format!("{SAID}kd could not commit the work in {}: {e}", work.dir.display()));
            uncommitted(&d.db, (&run.thread, &run.member), e, &stop).await;
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
    let what = format!("the work of the run {}", run.id);
    let recorded =
        d.db.until_back(&what, stop, |_| d.db.set_run_work(run.id.clone(), commit.clone(), note.clone())).await;
    if let Err(e) = recorded {
        tracing::error!(run = run.id, "cannot record the run's work: {e}");
    }
    // Working while another run of the member is in flight on the thread.
    let busy = d.runs.list(Some(&run.thread)).iter().any(|r| r.member == run.member && r.id != run.id);
    let state = if tampered {
        WorkState::Tampered
    } else if busy {
        WorkState::Working
    } else {
        WorkState::Done
    };
    if checked && recorded_commit && state == WorkState::Done {
        after::mark_check(d, run).await;
    }
    set_state(d, run, state).await;
    recorded_commit
}

/// Records why kd could not commit the member's work (kept through an
/// outage until `stop`): its changes are in the worktree only.
async fn uncommitted(db: &Db, (thread, member): (&str, &str), why: String, stop: &(dyn Fn() -> bool + Send + Sync)) {
    let what = format!("why {member}'s work on {thread} is not committed");
    let set = |_| db.set_worktree_uncommitted(thread.to_string(), member.to_string(), why.clone());
    if let Err(e) = db.until_back(&what, stop, set).await {
        tracing::error!(thread, member, "cannot record why the work is not committed: {e}");
    }
}

/// What the King is told of a worktree kd would not commit.
pub fn tampered_note(member: &str, work: &WorkRun, why: &str) -> String {
    format!(
        "kd did not commit {member}'s work: its worktree {} is not as kd made it — {why}. kd runs no git the \
         worktree names, so nothing of this run is on {}; its files are kept there. The work is marked tampered: \
         look at the files yourself, then kd reject {member} (or kd delete --force the thread).",
        work.dir.display(),
        work.branch
    )
}

/// What became of a member's work at the end of a run.
#[derive(Debug)]
pub enum Committed {
    /// The new commit, if anything changed.
    Commit(Option<String>),
    /// Not committed: the worktree is not as kd made it (why).
    Tampered(String),
    /// Committed (the new commit, if anything changed), but the branch's
    /// head could not be recorded (why): the work is in the branch, and the
    /// registry does not know it yet.
    Unrecorded { commit: Option<String>, why: String },
}

/// A client's request fails at once while the registry is away (it may ask
/// again): what it writes is not kept.
pub fn at_once() -> bool {
    true
}

/// Commits everything changed in the worktree as `member` with `message`,
/// then records the branch's head and its diff's size from its base — with
/// the git directory kd made for the worktree, running nothing the
/// worktree names ([`git::member`]). A worktree whose `.git` is not what kd
/// made is left as it is. The record is kept through an outage of the
/// registry until `stop` says to give up (the daemon stopping, at the end
/// of a run; [`at_once`] for what a client asks): the commit is made already.
pub async fn commit(
    db: &Db,
    thread: &str,
    member: &str,
    work: &WorkRun,
    message: &str,
    stop: &(dyn Fn() -> bool + Send + Sync),
) -> Result<Committed, String> {
    if std::fs::symlink_metadata(&work.dir).is_err() {
        // `git worktree move` or `remove`, or the directory deleted.
        return Ok(Committed::Tampered("it is gone (moved or removed)".into()));
    }
    let tree =
        match git::member::open(&work.repo, &work.dir, &work.base, &work.branch).await.map_err(|e| e.to_string())? {
            git::member::Found::Ours(tree) => tree,
            git::member::Found::Tampered(why) => return Ok(Committed::Tampered(why)),
        };
    // A merge bringing the work up to date (`kd rebase`) is concluded
    // only once no conflict marker is left; its base becomes the King's
    // commit merged in.
    let merging = tree.merging().await.map_err(|e| e.to_string())?;
    let commit = match &merging {
        Some(theirs) => Some(conclude_merge(&tree, member, work, theirs).await?),
        None => tree.commit_all(member, message).await.map_err(|e| e.to_string())?,
    };
    let head = tree.head().await.map_err(|e| e.to_string())?;
    let base = merging.as_deref().unwrap_or(&work.base);
    // The commit is made: a head kd could not record is no failure to
    // commit (the changes are safe in the branch), but is said.
    match record_head(db, thread, member, work, (base, &head, merging.is_some()), stop).await {
        Ok(()) => Ok(Committed::Commit(commit)),
        Err(why) => Ok(Committed::Unrecorded { commit, why }),
    }
}

/// Concludes the merge of `theirs` in progress in the member's worktree,
/// refused while a conflicted file still holds a marker.
async fn conclude_merge(
    tree: &git::member::Tree,
    member: &str,
    work: &WorkRun,
    theirs: &str,
) -> Result<String, String> {
    let left = tree.unresolved().await.map_err(|e| e.to_string())?;
    if !left.is_empty() {
        return Err(format!(
            "conflict markers remain in {}: kd commits the merge bringing {} up to date once they are resolved",
            left.join(", "),
            work.branch
        ));
    }
    let message =
        format!("Merge {} into {} (conflicts resolved by {member})", kd_proto::work::short_commit(theirs), work.branch);
    tree.commit_merge(member, &message).await.map_err(|e| e.to_string())
}

/// Records the branch's head and its diff's size from `base` (the work's
/// new base when `rebased`), kept through an outage until `stop`.
pub async fn record_head(
    db: &Db,
    thread: &str,
    member: &str,
    work: &WorkRun,
    (base, head, rebased): (&str, &str, bool),
    stop: &(dyn Fn() -> bool + Send + Sync),
) -> Result<(), String> {
    let stats = git::diff_stat(&work.repo, base, head).await.map_err(|e| e.to_string())?;
    let totals = (
        u32::try_from(stats.len()).unwrap_or(u32::MAX),
        stats.iter().map(|s| s.added).sum::<u64>(),
        stats.iter().map(|s| s.removed).sum::<u64>(),
    );
    let (t, m, h) = (thread.to_string(), member.to_string(), head.to_string());
    let what = format!("the head of {member}'s work on {thread}");
    let done = db
        .until_back(&what, stop, |_| {
            let (t, m, h) = (t.clone(), m.clone(), h.clone());
            async move {
                match rebased {
                    true => db.set_worktree_base(t, m, base.to_string(), h, totals).await,
                    false => db.set_worktree_head(t, m, h, totals).await,
                }
            }
        })
        .await;
    done.map_err(|e| e.to_string())
}

/// Sets the member's work state and tells the thread (a worktree the King
/// settled meanwhile stays as the King left it).
async fn set_state(d: &Runner, run: &Run, state: WorkState) {
    let what = format!("the state of {}'s work on {}", run.member, run.thread);
    let move_it = |_| d.db.move_worktree_state(run.thread.clone(), run.member.clone(), state);
    let moved = d.db.until_back(&what, || d.is_closed(), move_it).await;
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
        let work = WorkRun::of(&w);
        let message = format!("{} (interrupted)", w.task);
        let committed = commit(db, &w.thread, &w.member, &work, &message, &at_once).await;
        let (note, commit, state) = match committed {
            Ok(Committed::Commit(Some(c))) => {
                (format!("kdd stopped mid-run: kd committed what was left as {c}"), Some(c), WorkState::Done)
            }
            Ok(Committed::Commit(None)) => {
                ("kdd stopped mid-run: nothing was left to commit".to_string(), None, WorkState::Done)
            }
            Ok(Committed::Tampered(why)) => {
                (format!("kdd stopped mid-run; {}", tampered_note(&w.member, &work, &why)), None, WorkState::Tampered)
            }
            Ok(Committed::Unrecorded { commit, why }) => {
                let what = commit.as_deref().map_or_else(String::new, |c| format!(" as {c}"));
                (
                    format!(
                        "kdd stopped mid-run: kd committed what was left{what} but could not record its head: {why}"
                    ),
                    commit,
                    WorkState::Done,
                )
            }
            Err(e) => {
                uncommitted(db, (&w.thread, &w.member), e.clone(), &at_once).await;
                (format!("kdd stopped mid-run; kd could not commit what was left: {e}"), None, WorkState::Done)
            }
        };
        tracing::warn!(thread = w.thread, member = w.member, "{note}");
        let run = orphans.iter().rev().find(|(_, t, m)| *t == w.thread && *m == w.member).map(|(id, _, _)| id.clone());
        let (t, m) = (w.thread.clone(), w.member.clone());
        let recorded = db.work_interrupted(t, m, run, commit, note.clone(), state).await;
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
}
