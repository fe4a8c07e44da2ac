//! From a member's work to shipping it (issue 34), end to end: a real
//! kdd, the real `kd`, real git; fake members that write files in their
//! worktree (`FAKE_RUN`). `kd rebase` brings a member's work up to date
//! with the King's branch — a conflict on both sides resolved by the
//! member, or a clean merge — so that `kd accept` merges it.

use std::path::Path;

use kd_client::prelude::*;
use kd_proto::work::{WorkState, Worktree};
use kd_tests::{Kdd, Workspace, fake, git};
use serde_json::json;

/// A git repository (branch main, one commit of `a.txt`) whose council is
/// claude alone, running `run` (in its worktree only, where `.git` is a
/// file) at each of its runs.
fn repo(run: &str) -> Workspace {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\ntwo\n")], &[]);
    let run = format!("if test -f .git; then {run}; fi");
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", run.as_str())]) });
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents}));
    ws
}

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// `kd work TASK`: claude's worktree once its work is committed.
async fn at_work(kdd: &Kdd, ws: &Workspace, task: &str) -> Worktree {
    let out = kd(kdd, ws, &["work", task, "--json"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json: the worktrees");
    let w = trees.into_iter().next().expect("claude's worktree");
    assert_eq!(w.state, WorkState::Done, "{w:?}");
    assert_ne!(w.head, w.base, "claude committed something: {w:?}");
    w
}

/// The King changes `file` in their own tree and commits it.
fn king_commits(dir: &Path, file: &str, text: &str) -> String {
    std::fs::write(dir.join(file), text).unwrap();
    git(dir, &["commit", "--quiet", "-am", &format!("King's {file}")]);
    git(dir, &["rev-parse", "HEAD"])
}

fn is_ancestor(dir: &Path, a: &str, b: &str) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["merge-base", "--is-ancestor", a, b])
        .status()
        .unwrap()
        .success()
}

/// The member's line 2 on a first run; on a run that finds git's conflict
/// markers in a.txt, both sides' line 2 together, markers gone.
const RESOLVES: &str = "if grep -q '^<<<<<<<' a.txt; then printf 'one\\nking and claude\\n' > a.txt; \
                        else printf 'one\\nclaude\\n' > a.txt; fi";

#[tokio::test(flavor = "multi_thread")]
async fn a_conflict_on_both_sides_is_resolved_by_the_member_and_then_accepted_with_every_commit_kept() {
    let ws = repo(RESOLVES);
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Change line two").await;
    let member_commit = w.head.clone();
    let king = king_commits(dir, "a.txt", "one\nking\n");

    // kd accept is refused, naming the way on.
    let refused = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(!refused.status.success(), "{}", refused.stdout);
    assert!(refused.stderr.contains("conflicts with main in a.txt"), "{}", refused.stderr);
    assert!(refused.stderr.contains(&format!("kd rebase claude --thread {}", w.thread)), "{}", refused.stderr);
    assert_eq!(git(dir, &["rev-parse", "HEAD"]), king, "nothing changed");

    // kd rebase: the merge conflicts, claude resolves the markers, kd
    // commits the merge.
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("conflicts with claude's work in a.txt"), "{}", out.stderr);
    assert!(out.stdout.contains("claude's work is up to date with main"), "{}", out.stdout);
    let c = kdd.client().await;
    let trees = c.work_list(None, Some(w.thread.clone())).await.unwrap();
    let after = &trees[0];
    assert_eq!(after.state, WorkState::Done, "{after:?}");
    assert_eq!(after.base, king, "its base is the King's commit merged in: {after:?}");
    let path = Path::new(&w.path);
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "one\nking and claude\n");
    assert_eq!(git(path, &["status", "--porcelain"]), "", "everything committed");
    let parents = git(path, &["log", "-1", "--format=%P"]);
    assert_eq!(parents, format!("{member_commit} {king}"), "a merge of the King's HEAD into claude's branch");
    assert!(is_ancestor(dir, &member_commit, &after.head), "claude's commit is kept on its branch");
    // The member was told the file and what the King's side changed.
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let asked = messages.iter().find(|m| m.body.starts_with("Bring your work up to date")).expect("the request");
    assert!(asked.body.contains("- a.txt") && asked.body.contains("+king"), "{}", asked.body);
    // Its diff is what it adds to the King's current code.
    let out = kd(&kdd, &ws, &["diff", "claude"]).await;
    assert!(out.stdout.contains("-king") && out.stdout.contains("+king and claude"), "{}", out.stdout);

    // Now kd accept merges cleanly, and every commit of claude's is in the
    // King's history.
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "one\nking and claude\n");
    assert!(is_ancestor(dir, &member_commit, "HEAD") && is_ancestor(dir, &after.head, "HEAD"));
}

#[tokio::test(flavor = "multi_thread")]
async fn markers_left_are_never_committed_the_member_is_told_again_then_the_merge_is_undone() {
    // claude changes line two on its first run, and never resolves.
    let ws = repo("grep -q '^<<<<<<<' a.txt || printf 'one\\nclaude\\n' > a.txt");
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Change line two").await;
    king_commits(dir, "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(!out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("conflict markers remain in a.txt after 2 tries"), "{}", out.stdout);
    assert!(out.stdout.contains("kd undid the merge"), "{}", out.stdout);
    // Its branch is as it was, its worktree clean, nothing with markers
    // committed; the member was told again once.
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["rev-parse", "HEAD"]), w.head);
    assert_eq!(git(path, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "one\nclaude\n");
    let c = kdd.client().await;
    let trees = c.work_list(None, Some(w.thread.clone())).await.unwrap();
    assert_eq!((trees[0].base.as_str(), trees[0].head.as_str()), (w.base.as_str(), w.head.as_str()));
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let again = messages.iter().filter(|m| m.body.starts_with("Conflict markers are still in")).count();
    assert_eq!(again, 1, "told again once");
    let said = messages.iter().filter(|m| m.body.contains("kd could not commit the work")).count();
    assert_eq!(said, 2, "each run's answer says kd did not commit the markers");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_rebase_merges_at_once_and_an_up_to_date_one_does_nothing() {
    let ws = repo("printf 'new\\n' > b.txt");
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    // Nothing to bring in yet.
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.status.success() && out.stdout.contains("already up to date with main"), "{}", out.stdout);
    let king = king_commits(dir, "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("merged into claude's work cleanly"), "{}", out.stdout);
    let c = kdd.client().await;
    let after = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!(after.base, king);
    assert_eq!((after.files, after.added), (1, 1), "its diff is b.txt alone: {after:?}");
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head));
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "one\nking\n");
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(is_ancestor(dir, &w.head, "HEAD"));
}
