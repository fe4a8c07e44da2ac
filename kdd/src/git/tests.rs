//! The git driver against real git, in throwaway repositories.

#![allow(clippy::disallowed_methods)] // the tests run git themselves, to check what kd did

use std::path::Path;

use super::*;

fn sh(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A repository with one commit (`a.txt`), and its own identity.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    sh(dir.path(), &["init", "--quiet", "-b", "main"]);
    sh(dir.path(), &["config", "user.name", "King"]);
    sh(dir.path(), &["config", "user.email", "king@example.com"]);
    std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
    sh(dir.path(), &["add", "a.txt"]);
    sh(dir.path(), &["commit", "--quiet", "-m", "first"]);
    dir
}

/// kd's commit of the member's worktree `dir`, made at `base`.
async fn commit_all(
    repo: &Path,
    dir: &Path,
    base: &str,
    branch: &str,
    author: &str,
    message: &str,
) -> GitResult<Option<String>> {
    match member::open(repo, dir, base, branch).await? {
        member::Found::Ours(tree) => tree.commit_all(author, message).await,
        member::Found::Tampered(why) => panic!("{} is kd's: {why}", dir.display()),
    }
}

#[tokio::test]
async fn a_directory_outside_git_and_a_repository_without_a_commit_are_refused_plainly() {
    let plain = tempfile::tempdir().unwrap();
    let e = top(plain.path()).await.unwrap_err();
    assert!(e.to_string().contains("is not in a git repository"), "{e}");
    sh(plain.path(), &["init", "--quiet"]);
    let e = head(plain.path()).await.unwrap_err();
    assert!(e.to_string().contains("has no commit yet"), "{e}");
}

#[tokio::test]
async fn a_worktree_is_committed_as_the_member_diffed_checked_and_merged() {
    let r = repo();
    let repo = top(r.path()).await.unwrap();
    assert_eq!(branch(&repo).await.unwrap().as_deref(), Some("main"));
    let base = head(&repo).await.unwrap();
    let wt = tempfile::tempdir().unwrap();
    let path = wt.path().join("claude");
    worktree_add(&repo, &path, "kd/t1/claude", &base).await.unwrap();
    assert!(has_branch(&repo, "kd/t1/claude").await.unwrap());
    assert_eq!(
        commit_all(&repo, &path, &base, "kd/t1/claude", "claude", "nothing").await.unwrap(),
        None,
        "nothing changed"
    );

    std::fs::write(path.join("a.txt"), "one\n2\nthree\n").unwrap();
    std::fs::write(path.join("new file.txt"), "x\n").unwrap();
    std::fs::write(path.join("bin"), [0u8, 1, 2, 0]).unwrap();
    let commit =
        commit_all(&repo, &path, &base, "kd/t1/claude", "claude", "Add things").await.unwrap().expect("a commit");
    let author = std::process::Command::new("git")
        .args(["-C", path.to_str().unwrap(), "log", "-1", "--format=%an <%ae>|%s"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&author.stdout).trim(), "claude <kd@localhost>|Add things");

    let mut stat = diff_stat(&repo, &base, &commit).await.unwrap();
    stat.sort_by(|a, b| a.path.cmp(&b.path));
    let got: Vec<_> = stat.iter().map(|f| (f.path.as_str(), f.added, f.removed, f.binary)).collect();
    assert_eq!(got, [("a.txt", 2, 1, false), ("bin", 0, 0, true), ("new file.txt", 1, 0, false)]);
    let (patch, cut) = diff_patch(&repo, &base, &commit, 1 << 20).await.unwrap();
    assert!(!cut && patch.contains("+three") && patch.contains("-two"), "{patch}");
    let (short, cut) = diff_patch(&repo, &base, &commit, 40).await.unwrap();
    assert!(cut && short.len() <= 40, "{short:?}");

    // The King's tree is untouched, and the merge is clean.
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "one\ntwo\n");
    assert!(dirty(&repo).await.unwrap().is_empty());
    assert!(merge_conflicts(&repo, "kd/t1/claude").await.unwrap().is_empty());
    assert!(!is_merged(&repo, "kd/t1/claude").await.unwrap());
    let merged = merge(&repo, "kd/t1/claude", false, "Accept claude's work").await.unwrap();
    assert_ne!(merged, base);
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "one\n2\nthree\n");
    assert!(is_merged(&repo, "kd/t1/claude").await.unwrap());

    worktree_remove(&repo, &path).await.unwrap();
    assert!(!path.exists());
    branch_delete(&repo, "kd/t1/claude").await.unwrap();
    assert!(!has_branch(&repo, "kd/t1/claude").await.unwrap());
}

#[tokio::test]
async fn a_conflict_and_a_dirty_tree_are_found_without_changing_anything() {
    let r = repo();
    let repo = top(r.path()).await.unwrap();
    let base = head(&repo).await.unwrap();
    let wt = tempfile::tempdir().unwrap();
    let path = wt.path().join("codex");
    worktree_add(&repo, &path, "kd/t1/codex", &base).await.unwrap();
    std::fs::write(path.join("a.txt"), "member\n").unwrap();
    commit_all(&repo, &path, &base, "kd/t1/codex", "codex", "Member's change").await.unwrap().unwrap();
    std::fs::write(repo.join("a.txt"), "king\n").unwrap();
    assert_eq!(dirty(&repo).await.unwrap(), ["a.txt"]);
    sh(&repo, &["commit", "--quiet", "-am", "King's change"]);
    let king = head(&repo).await.unwrap();
    assert_eq!(merge_conflicts(&repo, "kd/t1/codex").await.unwrap(), ["a.txt"]);
    assert_eq!(head(&repo).await.unwrap(), king, "nothing changed");
    assert!(dirty(&repo).await.unwrap().is_empty());
    // A merge that fails anyway is aborted.
    let e = merge(&repo, "kd/t1/codex", false, "m").await.unwrap_err();
    assert!(matches!(e, GitError::Failed { .. }), "{e}");
    assert_eq!(head(&repo).await.unwrap(), king);
    assert!(dirty(&repo).await.unwrap().is_empty());
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "king\n");
}

/// A tag of the same name as your branch does not change the branch's
/// name: git's short form would be `heads/main`, which is neither the
/// branch the client reads from `.git/HEAD` (so the trunk a thread is on)
/// nor one gh could base a pull request on.
#[tokio::test]
async fn your_branch_is_named_as_it_is_beside_a_tag_of_the_same_name() {
    let r = repo();
    let repo = top(r.path()).await.unwrap();
    sh(&repo, &["tag", "main"]);
    assert_eq!(branch(&repo).await.unwrap().as_deref(), Some("main"));
    sh(&repo, &["checkout", "--quiet", "-b", "feature/x"]);
    sh(&repo, &["tag", "heads/feature/x"]);
    assert_eq!(branch(&repo).await.unwrap().as_deref(), Some("feature/x"));
    sh(&repo, &["checkout", "--quiet", "--detach"]);
    assert_eq!(branch(&repo).await.unwrap(), None, "a detached HEAD is on no branch");
}

#[tokio::test]
async fn a_squash_makes_one_commit_of_the_kings() {
    let r = repo();
    let repo = top(r.path()).await.unwrap();
    let base = head(&repo).await.unwrap();
    let wt = tempfile::tempdir().unwrap();
    let path = wt.path().join("m");
    worktree_add(&repo, &path, "kd/t/m", &base).await.unwrap();
    for i in 0..3 {
        std::fs::write(path.join(format!("f{i}")), "x\n").unwrap();
        commit_all(&repo, &path, &base, "kd/t/m", "m", &format!("step {i}")).await.unwrap().unwrap();
    }
    let merged = merge(&repo, "kd/t/m", true, "Squashed work").await.unwrap();
    let log = std::process::Command::new("git")
        .args(["-C", repo.to_str().unwrap(), "log", "--format=%an|%s", &format!("{base}..{merged}")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout).trim(), "King|Squashed work");
}

/// Why kd finds the worktree `dir` not its own (none: it is).
async fn tampered(repo: &Path, dir: &Path, base: &str, branch: &str) -> Option<String> {
    match member::open(repo, dir, base, branch).await.unwrap() {
        member::Found::Ours(_) => None,
        member::Found::Tampered(why) => Some(why),
    }
}

#[tokio::test]
async fn a_worktree_whose_git_is_not_the_file_kd_made_is_found_tampered_with() {
    let r = repo();
    let repo = top(r.path()).await.unwrap();
    let base = head(&repo).await.unwrap();
    let wt = tempfile::tempdir().unwrap();
    let path = wt.path().join("m");
    worktree_add(&repo, &path, "kd/t/m", &base).await.unwrap();
    let other = wt.path().join("other");
    worktree_add(&repo, &other, "kd/t/other", &base).await.unwrap();
    assert_eq!(tampered(&repo, &path, &base, "kd/t/m").await, None);
    let dotgit = path.join(".git");
    let made = std::fs::read_to_string(&dotgit).unwrap();
    let restore = || {
        let _ = std::fs::remove_file(&dotgit);
        let _ = std::fs::remove_dir_all(&dotgit);
        std::fs::write(&dotgit, &made).unwrap();
    };
    // A symlink to the King's .git.
    std::fs::remove_file(&dotgit).unwrap();
    std::os::unix::fs::symlink(repo.join(".git"), &dotgit).unwrap();
    assert!(tampered(&repo, &path, &base, "kd/t/m").await.unwrap().contains("a symlink"));
    // A repository of its own.
    restore();
    std::fs::remove_file(&dotgit).unwrap();
    sh(&path, &["init", "--quiet"]);
    assert!(tampered(&repo, &path, &base, "kd/t/m").await.unwrap().contains("a repository of its own"));
    // Another worktree's git directory, or the King's.
    restore();
    let others = std::fs::read_to_string(other.join(".git")).unwrap();
    std::fs::write(&dotgit, &others).unwrap();
    assert!(tampered(&repo, &path, &base, "kd/t/m").await.unwrap().contains("points elsewhere"));
    std::fs::write(&dotgit, format!("gitdir: {}\n", repo.join(".git").display())).unwrap();
    assert!(tampered(&repo, &path, &base, "kd/t/m").await.unwrap().contains("points elsewhere"));
    // Gone.
    std::fs::remove_file(&dotgit).unwrap();
    assert!(tampered(&repo, &path, &base, "kd/t/m").await.unwrap().contains("is gone"));
    restore();
    assert_eq!(tampered(&repo, &path, &base, "kd/t/m").await, None, "as kd made it again");
    // Its HEAD moved off kd's branch: onto the King's, onto another, detached.
    let king = branch(&repo).await.unwrap().unwrap();
    sh(&path, &["checkout", "--quiet", "--ignore-other-worktrees", &king]);
    let why = tampered(&repo, &path, &base, "kd/t/m").await.unwrap();
    assert!(why.contains(&format!("its HEAD is on refs/heads/{king}, not on kd's branch kd/t/m")), "{why}");
    sh(&path, &["checkout", "--quiet", "-b", "side"]);
    assert!(tampered(&repo, &path, &base, "kd/t/m").await.unwrap().contains("refs/heads/side"));
    sh(&path, &["checkout", "--quiet", "--detach"]);
    assert!(tampered(&repo, &path, &base, "kd/t/m").await.unwrap().contains("its HEAD is detached"));
    sh(&path, &["checkout", "--quiet", "kd/t/m"]);
    assert_eq!(tampered(&repo, &path, &base, "kd/t/m").await, None, "back on its branch");
    // HEAD left alone, kd's branch made a symbolic ref to the King's: kd's
    // commit would move the King's branch.
    sh(&path, &["symbolic-ref", "refs/heads/kd/t/m", &format!("refs/heads/{king}")]);
    let why = tampered(&repo, &path, &base, "kd/t/m").await.unwrap();
    assert!(why.contains(&format!("kd's branch kd/t/m is made a symbolic ref (to refs/heads/{king})")), "{why}");
}

#[tokio::test]
async fn kds_commit_runs_no_hook_and_no_filter_the_worktree_names() {
    let r = repo();
    let repo = top(r.path()).await.unwrap();
    let base = head(&repo).await.unwrap();
    let marks = tempfile::tempdir().unwrap();
    let spy = marks.path().join("spy.sh");
    let ran = marks.path().join("ran");
    std::fs::write(&spy, format!("#!/bin/sh\necho \"$0\" >> {}\ncat\n", ran.display())).unwrap();
    std::fs::set_permissions(&spy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The King's own configuration has a filter and a hook.
    sh(&repo, &["config", "filter.spy.clean", spy.to_str().unwrap()]);
    let hooks = repo.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for h in ["pre-commit", "post-commit"] {
        std::os::unix::fs::symlink(&spy, hooks.join(h)).unwrap();
    }
    let wt = tempfile::tempdir().unwrap();
    let path = wt.path().join("m");
    worktree_add(&repo, &path, "kd/t/m", &base).await.unwrap();
    std::fs::write(path.join(".gitattributes"), "* filter=spy\n").unwrap();
    std::fs::write(path.join("a.txt"), "changed\n").unwrap();
    let commit = commit_all(&repo, &path, &base, "kd/t/m", "m", "Change").await.unwrap().expect("a commit");
    assert!(!ran.exists(), "{}", std::fs::read_to_string(&ran).unwrap_or_default());
    let shown = std::process::Command::new("git")
        .args(["-C", repo.to_str().unwrap(), "show", &format!("{commit}:a.txt")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "changed\n");
}

#[test]
fn numstat_records_are_read_with_odd_paths() {
    let raw = b"3\t1\tsrc/a b.rs\0-\t-\timg.png\0\0";
    let got = parse_numstat(raw);
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].path.as_str(), got[0].added, got[0].removed), ("src/a b.rs", 3, 1));
    assert!(got[1].binary);
}

#[tokio::test]
async fn a_git_stopped_at_its_bound_leaves_no_lock_but_one_that_was_there_stays() {
    // The start noted before its lock is made: that lock is a live git's.
    super::note_start();
    let dir = repo();
    let (root, lock) = (dir.path(), dir.path().join(".git/index.lock"));
    // `git add` opens a new .gitignore to read its rules, and waits on a FIFO.
    std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    std::fs::create_dir(root.join("new")).unwrap();
    rustix::fs::mknodat(rustix::fs::CWD, root.join("new/.gitignore"), rustix::fs::FileType::Fifo, 0o600.into(), 0)
        .unwrap();
    let within = Duration::from_millis(300);
    let add = ["add", "--all"];
    let stopped = bounded(root, root, &add, &[], OUTPUT, (within, Some(&lock))).await;
    assert!(matches!(stopped, Err(GitError::TimedOut { .. })), "{stopped:?}", stopped = stopped.err());
    assert!(!lock.exists(), "the stopped git's index.lock is left");
    // A lock that was there before is another git's: kept (git refuses).
    std::fs::write(&lock, "").unwrap();
    let refused = bounded(root, root, &add, &[], OUTPUT, (within, Some(&lock))).await.unwrap();
    assert!(!refused.ok && lock.exists(), "{}", refused.stderr);
}

#[tokio::test]
async fn a_lock_an_earlier_kdds_git_left_is_removed_and_the_git_runs() {
    super::note_start();
    let dir = repo();
    let (root, lock) = (dir.path(), dir.path().join(".git/index.lock"));
    std::fs::write(
        root.join("a.txt"),
        "changed
",
    )
    .unwrap();
    let file = std::fs::File::create(&lock).unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    file.set_modified(hour_ago).unwrap();
    let add = ["add", "--all"];
    let out = bounded(root, root, &add, &[], OUTPUT, (Duration::from_secs(30), Some(&lock))).await.unwrap();
    assert!(out.ok && !lock.exists(), "{}", out.stderr);
    // One made since this kdd started is a running git's: kept.
    std::fs::write(
        root.join("a.txt"),
        "changed again
",
    )
    .unwrap();
    std::fs::write(&lock, "").unwrap();
    let refused = bounded(root, root, &add, &[], OUTPUT, (Duration::from_secs(30), Some(&lock))).await.unwrap();
    assert!(!refused.ok && lock.exists(), "{}", refused.stderr);
}

#[test]
fn a_git_directory_holding_a_fifo_or_a_symlink_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let gitdir = dir.path();
    std::fs::write(gitdir.join("HEAD"), "ref: refs/heads/x\n").unwrap();
    std::fs::create_dir_all(gitdir.join("logs/refs")).unwrap();
    assert_eq!(member::not_a_file(gitdir), None);
    rustix::fs::mknodat(rustix::fs::CWD, gitdir.join("logs/HEAD"), rustix::fs::FileType::Fifo, 0o600.into(), 0)
        .unwrap();
    assert_eq!(member::not_a_file(gitdir).as_deref(), Some("a FIFO (logs/HEAD)"));
    std::fs::remove_file(gitdir.join("logs/HEAD")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", gitdir.join("index")).unwrap();
    assert_eq!(member::not_a_file(gitdir).as_deref(), Some("a symlink (index)"));
}
