//! kd's git in a member's worktree never waits for good (found by a
//! hostile trial, stop 61): a member can leave a FIFO where git reads —
//! its git directory's `index` or `MERGE_HEAD`, a new `.gitignore` in its
//! worktree — and git blocks opening it. Before, the run's end never
//! completed, the repository's git lock held every other git of it, and a
//! restarted kdd never listened (its recovery ran that git first). Now a
//! git directory holding anything but files and directories is
//! `tampered`, every git kd runs there is killed at its time bound
//! (`--git-timeout-ms`, its lock cleared), and recovery runs beside
//! serving.

use std::path::Path;

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use kd_proto::work::WorkState;
use kd_tests::{Hold, Kdd, Workspace, collect_until, fake, worktree_until as until};
use serde_json::{Value, json};

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// A git repository (branch main, one commit) whose one member is a claude
/// fake running `shell` in each of its runs (and holding, with `hold`).
fn repo(shell: &str, hold: Option<&Hold>) -> Workspace {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let mut env = vec![("FAKE_RUN", shell)];
    if let Some(h) = hold {
        env.push(("FAKE_HOLD", h.var()));
    }
    let claude = fake("claude", "claude", &env);
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}}));
    ws
}

/// `kd work TASK --json`: claude's worktree once its run ended.
async fn work(kdd: &Kdd, ws: &Workspace, task: &str) -> Value {
    let out = kd(kdd, ws, &["work", task, "--json"]).await;
    let trees: Vec<Value> = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("kd work --json: {e}: {}{}", out.stdout, out.stderr));
    trees.into_iter().find(|w| w["member"] == "claude").expect("claude's worktree")
}

/// What kd said to the thread in claude's last answer.
async fn answer(kdd: &Kdd, thread: &str) -> String {
    let c = kdd.client().await;
    let messages = c.thread_messages(thread.into(), None, None, None, None).await.unwrap().into_vec();
    messages.iter().rfind(|m| m.from == "claude").map(|m| m.body.clone()).expect("claude's answer")
}

/// The git directory kd made for the worktree at `dir`.
fn gitdir_of(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(dir.join(".git")).unwrap();
    dir.join(text.trim().strip_prefix("gitdir: ").unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_in_the_worktrees_git_directory_is_tampered_with_not_waited_for() {
    for name in ["index", "MERGE_HEAD"] {
        let shell = format!(
            "if test -f .git; then echo two >> a.txt; g=$(sed -n 's/^gitdir: //p' .git); rm -f \"$g/{name}\"; \
             mkfifo \"$g/{name}\"; fi"
        );
        let ws = repo(&shell, None);
        // No time bound to save it: the FIFO is found before any git runs.
        let mut kdd = Kdd::start();
        let w = work(&kdd, &ws, "Leave a FIFO").await;
        let thread = w["thread"].as_str().unwrap().to_string();
        assert_eq!((&w["state"], &w["head"]), (&json!("tampered"), &w["base"]), "{name}: {w}");
        let said = answer(&kdd, &thread).await;
        assert!(said.contains("kd did not commit") && said.contains(name), "{name}: {said}");
        let dir = Path::new(w["path"].as_str().unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "one\ntwo\n", "{name}: the files are kept");
        // The repository's git is free: the list and a new task go on.
        let out = kd(&kdd, &ws, &["work", "--list"]).await;
        assert!(out.status.success() && out.stdout.contains("tampered"), "{name}: {}{}", out.stdout, out.stderr);
        assert!(kdd.stop().success(), "{name}: kdd stops");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kds_git_in_a_worktree_is_stopped_at_its_time_bound_and_the_next_run_commits() {
    // First run: a change and a FIFO where `git add` reads ignore rules.
    // The next: the FIFO gone, another change.
    let shell = "if test -f .git; then echo more >> a.txt; if test -p new/.gitignore; then rm -r new; \
                 else mkdir new; mkfifo new/.gitignore; fi; fi";
    let ws = repo(shell, None);
    let mut kdd = Kdd::start_with(&["--git-timeout-ms", "1500"]);
    let out = kd(&kdd, &ws, &["work", "Leave a FIFO"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    // Said where the King looks: kd work, the list, the worktree's record
    // (before, `done  no changes`, as if the member had changed nothing).
    assert!(
        out.stderr.contains("claude's last run is not committed") && out.stderr.contains("timed out"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("done (last run not committed)"), "{}", out.stdout);
    let thread = out.stderr.split_whitespace().nth(2).unwrap().to_string();
    let w = until(&kdd, &thread, "claude's work", |w| w.member == "claude").await;
    assert_eq!((w.state, &w.head), (WorkState::Done, &w.base), "nothing could be committed: {w:?}");
    assert!(w.uncommitted.as_deref().is_some_and(|why| why.contains("git add") && why.contains("timed out")), "{w:?}");
    let said = answer(&kdd, &thread).await;
    assert!(said.contains("kd could not commit") && said.contains("timed out"), "{said}");
    let out = kd(&kdd, &ws, &["work", "--list", "--thread", &thread]).await;
    assert!(out.status.success() && out.stdout.contains("not committed"), "{}{}", out.stdout, out.stderr);
    let dir = Path::new(&w.path);
    assert!(!gitdir_of(dir).join("index.lock").exists(), "the killed git's lock is left behind");
    // Accepting the branch would leave the changes out: refused.
    let out = kd(&kdd, &ws, &["accept", "claude", "--thread", &thread]).await;
    assert!(!out.status.success() && out.stderr.contains("not committed"), "{}", out.stderr);
    // And so would a pull request of it (which then settles the work and
    // lets its worktree go): refused before anything is pushed.
    let out = kd(&kdd, &ws, &["accept", "claude", "--thread", &thread, "--pr"]).await;
    assert!(!out.status.success() && out.stderr.contains("not committed"), "{}", out.stderr);
    let out = kd(&kdd, &ws, &["pr", "claude", "--thread", &thread]).await;
    assert!(!out.status.success() && out.stderr.contains("not committed"), "{}", out.stderr);
    // Nor reviewed: its branch is not the work the member left.
    let out = kd(&kdd, &ws, &["review", "claude", "--to", "claude", "--thread", &thread]).await;
    assert!(!out.status.success() && out.stderr.contains("not committed"), "{}", out.stderr);
    // The member's next run, with the FIFO gone, gets both changes committed.
    let out = kd(&kdd, &ws, &["ask", "--thread", &thread, "--to", "claude", "--rounds", "0", "Again"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let w = until(&kdd, &thread, "the work committed", |w| w.member == "claude" && w.head != w.base).await;
    assert_eq!((w.state, w.uncommitted), (WorkState::Done, None));
    let shown = kd_tests::git(dir, &["show", &format!("{}:a.txt", w.head)]);
    assert_eq!(shown, "one\nmore\nmore");
    assert!(kdd.stop().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_daemon_listens_while_a_stuck_worktree_is_recovered() {
    let hold = Hold::new();
    let ws = repo("if test -f .git; then echo two >> a.txt; mkdir new; mkfifo new/.gitignore; fi", Some(&hold));
    ws.without_resume();
    let mut kdd = Kdd::start_with(&["--git-timeout-ms", "1500"]);
    let c = kdd.client().await;
    let started = c.work_start(ws.path(), "Leave a FIFO".into(), None, None, None, None).await.expect("work.start");
    let mut sub = c.thread_subscribe(started.thread.clone(), None, None).await.unwrap();
    collect_until(&mut sub, |events| events.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    drop(sub);
    drop(c);
    kdd.kill9();
    hold.release();
    // It listens at once, and the work left mid-run is recorded once kd's
    // git there is stopped.
    kdd.launch().expect("kdd starts again");
    let w = until(&kdd, &started.thread, "the work recovered", |w| w.state != WorkState::Working).await;
    assert_eq!((w.state, &w.head), (WorkState::Done, &w.base), "{w:?}");
    assert!(w.uncommitted.as_deref().is_some_and(|why| why.contains("timed out")), "{w:?}");
    assert!(!gitdir_of(Path::new(&w.path)).join("index.lock").exists(), "the killed git's lock is left behind");
    assert_eq!(std::fs::read_to_string(Path::new(&w.path).join("a.txt")).unwrap(), "one\ntwo\n", "kept");
    assert!(kdd.stop().success());
}

/// kill -9 of kdd while its git commits a member's work: that git dies
/// with kdd (one left running held the worktree's lock, and the restarted
/// daemon could commit nothing there), and the `index.lock` it left, older
/// than the new daemon, is no running git's: the next start clears it and
/// commits what the member left.
#[tokio::test(flavor = "multi_thread")]
async fn kds_git_dies_with_kdd_and_the_lock_it_left_stops_no_later_commit() {
    let ws = repo("if test -f .git; then echo two >> a.txt; mkdir new; mkfifo new/.gitignore; fi", None);
    ws.without_resume();
    let mut kdd = Kdd::start_with(&["--git-timeout-ms", "120000"]);
    let c = kdd.client().await;
    let started = c.work_start(ws.path(), "Leave a FIFO".into(), None, None, None, None).await.expect("work.start");
    let path = std::path::PathBuf::from(&started.worktrees[0].path);
    let lock = gitdir_of(&path).join("index.lock");
    // git add takes the lock, then blocks on the FIFO: found running, it
    // may not have taken it yet (CI saw that once).
    let git = kd_tests::kds_git_add(kdd.pid).await;
    kd_tests::within("git add holding the worktree's lock", async {
        while !lock.exists() {
            assert!(kd_tests::alive(git), "kd's git add ended without blocking on the FIFO");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    drop(c);
    kdd.kill9();
    kd_tests::until_gone(git, "kd's git, gone with kdd").await;
    assert!(lock.exists(), "a git killed leaves its lock");
    std::fs::remove_file(path.join("new/.gitignore")).unwrap();
    kdd.launch().expect("kdd starts again");
    let w = until(&kdd, &started.thread, "the work recovered", |w| w.state != WorkState::Working).await;
    assert_eq!((w.state, w.uncommitted.as_deref()), (WorkState::Done, None), "{w:?}");
    assert_ne!(w.head, w.base, "what the member left is committed: {w:?}");
    assert_eq!(kd_tests::git(&path, &["show", &format!("{}:a.txt", w.head)]), "one\ntwo");
    assert!(!lock.exists());
    assert!(kdd.stop().success());
}
