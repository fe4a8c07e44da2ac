//! kd's git trusts nothing a member wrote (issue 31 item 9), end to end:
//! a real kdd, `kd work`, real git, fake agents that do in their worktree
//! what a hostile member would. kdd commits a member's work with the git
//! directory it recorded for the worktree — never the `.git` the worktree
//! claims — and runs no hook, fsmonitor or filter the worktree can name;
//! a worktree whose `.git` is not what kd made is not committed: its files
//! are kept, the work is `tampered`, and the King is told.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use kd_proto::work::WorkState;
use kd_tests::{Hold, Kdd, Workspace, collect_until, fake, git};
use serde_json::{Value, json};

/// A git repository (branch main, one commit) whose one member is a claude
/// fake running `shell` in each of its runs.
fn repo(shell: &str) -> Workspace {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let claude = fake("claude", "claude", &[("FAKE_RUN", shell)]);
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}}));
    ws
}

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// `kd work TASK --json`: claude's worktree once its run ended (as JSON).
async fn work(kdd: &Kdd, ws: &Workspace, task: &str) -> Value {
    let out = kd(kdd, ws, &["work", task, "--json"]).await;
    let trees: Vec<Value> = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("kd work --json: {e}: {}{}", out.stdout, out.stderr));
    trees.into_iter().find(|w| w["member"] == "claude").expect("claude's worktree")
}

/// claude's worktree as `kd work --list --json` shows it now.
async fn listed(kdd: &Kdd, ws: &Workspace, thread: &str) -> Value {
    let out = kd(kdd, ws, &["work", "--list", "--thread", thread, "--json"]).await;
    let trees: Vec<Value> = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    trees.into_iter().find(|w| w["member"] == "claude").expect("claude's worktree")
}

/// A program in `dir` that records, in `marker`, that it ran (and its
/// arguments), then copies its input to its output (as a filter must).
fn spy(dir: &Path, name: &str) -> (String, String) {
    let path = |f: String| dir.join(f).display().to_string();
    let (script, marker) = (path(format!("{name}.sh")), path(format!("{name}.ran")));
    std::fs::write(&script, format!("#!/bin/sh\necho \"$0 $*\" >> {marker}\ncat\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, marker)
}

/// What kd said to the thread in claude's last answer.
async fn answer(kdd: &Kdd, thread: &str) -> String {
    let c = kdd.client().await;
    let messages = c.thread_messages(thread.into(), None, None, None, None).await.unwrap().into_vec();
    messages.iter().rfind(|m| m.from == "claude").map(|m| m.body.clone()).expect("claude's answer")
}

fn assert_tampered_and_told(w: &Value, said: &str, how: &str) {
    assert_eq!(w["state"], "tampered", "{w}");
    assert_eq!(w["head"], w["base"], "nothing was committed: {w}");
    assert!(said.contains("kd did not commit") && said.contains(".git") && said.contains(how), "{said}");
    assert!(said.contains("tampered"), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_git_directory_of_the_members_own_runs_nothing_and_the_work_is_tampered() {
    let spies = tempfile::tempdir().unwrap();
    let (monitor, monitor_ran) = spy(spies.path(), "fsmonitor");
    let (hook, hook_ran) = spy(spies.path(), "hook");
    let hooks = spies.path().join("hooks").display().to_string();
    std::fs::create_dir_all(&hooks).unwrap();
    for name in ["pre-commit", "commit-msg", "post-commit", "pre-auto-gc", "post-index-change"] {
        std::os::unix::fs::symlink(&hook, Path::new(&hooks).join(name)).unwrap();
    }
    // In its worktree only: a change, then a repository of its own for .git.
    let shell = format!(
        "if test -f .git; then echo two >> a.txt; echo new > b.txt; rm .git; git init -q .; \
         git config core.fsmonitor {monitor}; git config core.hooksPath {hooks}; fi"
    );
    let ws = repo(&shell);
    let kdd = Kdd::start();
    let base = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    let w = work(&kdd, &ws, "Change a").await;
    let thread = w["thread"].as_str().unwrap().to_string();
    assert!(!Path::new(&monitor_ran).exists(), "kdd ran the member's fsmonitor");
    assert!(!Path::new(&hook_ran).exists(), "kdd ran the member's hooks");
    let said = answer(&kdd, &thread).await;
    assert_tampered_and_told(&w, &said, "a repository of its own");
    // The files are kept as the member left them.
    let dir = Path::new(w["path"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "one\ntwo\n");
    assert_eq!(std::fs::read_to_string(dir.join("b.txt")).unwrap(), "new\n");
    assert!(dir.join(".git").is_dir());
    assert_eq!(listed(&kdd, &ws, &thread).await["state"], "tampered");
    let out = kd(&kdd, &ws, &["work", "--list", "--thread", &thread]).await;
    assert!(out.stdout.contains("tampered"), "{}", out.stdout);
    // The King's repository is as it was, and the work cannot be accepted.
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), base);
    let out = kd(&kdd, &ws, &["accept", "claude", "--thread", &thread]).await;
    assert!(!out.status.success() && out.stderr.contains("tampered"), "{}", out.stderr);
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), base);
    // Archiving keeps it; deleting it takes --force, which removes it.
    let out = kd(&kdd, &ws, &["delete", &thread]).await;
    assert!(!out.status.success(), "{}", out.stderr);
    let out = kd(&kdd, &ws, &["delete", &thread, "--force", "--yes"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!dir.exists(), "the tampered worktree was removed");
    assert_eq!(git(ws.dir.path(), &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1);
    assert!(!Path::new(&monitor_ran).exists() && !Path::new(&hook_ran).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_git_symlinked_to_the_kings_commits_nothing_onto_the_kings_branch() {
    // In its worktree only: a file, then .git a symlink to the King's .git.
    let shell = "if test -f .git; then echo evil > evil.txt; g=$(sed -n 's/^gitdir: //p' .git); \
                 king=$(cd \"$g/../..\" && pwd); rm .git; ln -s \"$king\" .git; fi";
    let ws = repo(shell);
    let kdd = Kdd::start();
    let base = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    let w = work(&kdd, &ws, "Write evil").await;
    let thread = w["thread"].as_str().unwrap().to_string();
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), base, "a commit landed on the King's branch");
    assert_eq!(git(ws.dir.path(), &["status", "--porcelain"]), "", "the King's index was touched");
    assert_eq!(git(ws.dir.path(), &["log", "--all", "--format=%s"]).lines().count(), 1, "no commit anywhere");
    let said = answer(&kdd, &thread).await;
    assert_tampered_and_told(&w, &said, "a symlink");
    let dir = Path::new(w["path"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(dir.join("evil.txt")).unwrap(), "evil\n", "the files are kept");
}

/// A member that moves its worktree's HEAD off the branch kd made — onto
/// the King's own branch, which git lets a worktree check out with
/// `--ignore-other-worktrees`, or by writing HEAD — or makes kd's branch
/// a symbolic ref to the King's, gets nothing
/// committed there: kd commits only on its branch (found by a hostile
/// trial, stop 61: before, the work was committed onto the King's `main`).
#[tokio::test(flavor = "multi_thread")]
async fn a_worktree_switched_to_the_kings_branch_commits_nothing_onto_it() {
    for (how, shell) in [
        ("git checkout", "if test -f .git; then git checkout -q --ignore-other-worktrees main; echo evil > a.txt; fi"),
        (
            "HEAD written",
            "if test -f .git; then g=$(sed -n 's/^gitdir: //p' .git); echo 'ref: refs/heads/main' > \"$g/HEAD\"; \
             echo evil > a.txt; fi",
        ),
        (
            "kd's branch a symbolic ref",
            "if test -f .git; then git symbolic-ref \"refs/heads/$(git symbolic-ref --short HEAD)\" refs/heads/main; \
             echo evil > a.txt; fi",
        ),
    ] {
        let ws = repo(shell);
        let kdd = Kdd::start();
        let base = git(ws.dir.path(), &["rev-parse", "HEAD"]);
        let w = work(&kdd, &ws, "Write evil").await;
        let thread = w["thread"].as_str().unwrap().to_string();
        assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), base, "{how}: a commit landed on the King's branch");
        assert_eq!(git(ws.dir.path(), &["log", "--all", "--format=%s"]).lines().count(), 1, "{how}: no commit");
        let said = answer(&kdd, &thread).await;
        assert_eq!((&w["state"], &w["head"]), (&json!("tampered"), &w["base"]), "{how}: {w}");
        assert!(said.contains("kd did not commit") && said.contains("refs/heads/main"), "{how}: {said}");
        let dir = Path::new(w["path"].as_str().unwrap());
        assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "evil\n", "{how}: the files are kept");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_a_members_gitattributes_names_is_never_run() {
    // The King's configuration has a filter (for files of its own); the
    // member's .gitattributes names it for everything.
    let shell = "if test -f .git; then printf '* filter=spy\\n' > .gitattributes; echo two >> a.txt; fi";
    let ws = repo(shell);
    let spies = tempfile::tempdir().unwrap();
    let (filter, filter_ran) = spy(spies.path(), "filter");
    git(ws.dir.path(), &["config", "filter.spy.clean", &filter]);
    git(ws.dir.path(), &["config", "filter.spy.smudge", &filter]);
    let kdd = Kdd::start();
    let w = work(&kdd, &ws, "Change a").await;
    assert!(!Path::new(&filter_ran).exists(), "kdd ran a filter the member named");
    assert_eq!(w["state"], "done", "{w}");
    assert_ne!(w["head"], w["base"], "the work is committed: {w}");
    let dir = Path::new(w["path"].as_str().unwrap());
    let head = w["head"].as_str().unwrap();
    assert_eq!(git(dir, &["show", &format!("{head}:a.txt")]), "one\ntwo");
    assert_eq!(git(dir, &["show", &format!("{head}:.gitattributes")]), "* filter=spy");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repository_a_member_nests_in_its_worktree_runs_nothing() {
    let ws = Workspace::new(&[]);
    let spies = tempfile::tempdir().unwrap();
    let (monitor, monitor_ran) = spy(spies.path(), "nested-fsmonitor");
    let (filter, filter_ran) = spy(spies.path(), "nested-filter");
    // First run: a repository of its own inside the worktree, with a commit
    // (kd commits it as a gitlink). Second run: that repository now names
    // an fsmonitor and a filter, and a file in it changes.
    let id = "-c user.name=m -c user.email=m@x";
    let shell = format!(
        "if test -f .git; then if test -d sub; then git -C sub config core.fsmonitor {monitor}; \
         git -C sub config filter.spy.clean {filter}; printf '* filter=spy\\n' > sub/.gitattributes; \
         echo more >> sub/f; echo two >> a.txt; \
         else mkdir sub; git -C sub init -q; echo f > sub/f; git -C sub add f; git {id} -C sub commit -qm f; fi; fi"
    );
    let claude = fake("claude", "claude", &[("FAKE_RUN", &shell)]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}}));
    let kdd = Kdd::start();
    let w = work(&kdd, &ws, "Nest a repository").await;
    let thread = w["thread"].as_str().unwrap().to_string();
    assert_eq!(w["state"], "done", "{w}");
    let out = kd(&kdd, &ws, &["ask", "--thread", &thread, "--to", "claude", "--rounds", "0", "Again"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!Path::new(&monitor_ran).exists(), "kdd ran the nested repository's fsmonitor");
    assert!(!Path::new(&filter_ran).exists(), "kdd ran the nested repository's filter");
    let w = listed(&kdd, &ws, &thread).await;
    assert_eq!(w["state"], "done", "{w}");
    let dir = Path::new(w["path"].as_str().unwrap());
    let head = w["head"].as_str().unwrap();
    assert_eq!(git(dir, &["show", &format!("{head}:a.txt")]), "one\ntwo", "the rest is committed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_started_after_a_crash_does_not_commit_a_worktree_tampered_with() {
    let spies = tempfile::tempdir().unwrap();
    let (monitor, monitor_ran) = spy(spies.path(), "fsmonitor");
    let hold = Hold::new();
    let shell = format!(
        "if test -f .git; then echo two >> a.txt; rm .git; git init -q .; git config core.fsmonitor {monitor}; fi"
    );
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let claude = fake("claude", "claude", &[("FAKE_RUN", &shell), ("FAKE_HOLD", hold.var())]);
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}}));
    ws.without_resume();
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let started = c.work_start(ws.path(), "Change a".into(), None, None, None, None).await.expect("work.start");
    let mut sub = c.thread_subscribe(started.thread.clone(), None, None).await.unwrap();
    collect_until(&mut sub, |events| events.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    drop(sub);
    drop(c);
    kdd.kill9();
    kdd.launch().expect("kdd starts again");
    let w =
        &kd_tests::worktree_until(&kdd, &started.thread, "the work recovered", |w| w.state != WorkState::Working).await;
    assert_eq!(w.state, WorkState::Tampered, "{w:?}");
    assert_eq!(w.head, w.base);
    assert!(!Path::new(&monitor_ran).exists(), "the restarted kdd ran the member's fsmonitor");
    assert_eq!(std::fs::read_to_string(Path::new(&w.path).join("a.txt")).unwrap(), "one\ntwo\n", "kept");
    hold.release();
}

/// A member that moves kd's branch to a history without the commit kd
/// made its worktree at, deletes the branch, or moves or removes the
/// worktree itself gets nothing committed and its work `tampered` (found
/// by a hostile trial, stop 61: before, the work was `done`, with kd's
/// commit starting a history of its own, or with no files).
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_moved_off_its_history_or_a_worktree_moved_away_is_tampered_with() {
    let mine = "b=$(git symbolic-ref --short HEAD)";
    let unrelated = "$(git -c user.name=m -c user.email=m@x commit-tree $(git mktree </dev/null) -m other)";
    for (how, shell, said) in [
        (
            "moved to another history",
            format!("{mine}; git update-ref \"refs/heads/$b\" {unrelated}; echo evil > a.txt"),
            "moved to a history without",
        ),
        ("deleted", format!("{mine}; git update-ref -d \"refs/heads/$b\"; echo evil > a.txt"), "is gone"),
        ("worktree moved", "echo evil > a.txt; git worktree move \"$PWD\" \"$PWD.moved\"".into(), "gone"),
        ("worktree removed", "echo evil > a.txt; git worktree remove --force \"$PWD\"".into(), "gone"),
    ] {
        let ws = repo(&format!("if test -f .git; then {shell}; fi"));
        let kdd = Kdd::start();
        let base = git(ws.dir.path(), &["rev-parse", "HEAD"]);
        let w = work(&kdd, &ws, "Write evil").await;
        let thread = w["thread"].as_str().unwrap().to_string();
        assert_eq!((&w["state"], &w["head"]), (&json!("tampered"), &w["base"]), "{how}: {w}");
        let told = answer(&kdd, &thread).await;
        assert!(told.contains("kd did not commit") && told.contains(said), "{how}: {told}");
        assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), base, "{how}: the King's branch moved");
        let out = kd(&kdd, &ws, &["accept", "claude", "--thread", &thread]).await;
        assert!(!out.status.success() && out.stderr.contains("tampered"), "{how}: {}", out.stderr);
    }
}
