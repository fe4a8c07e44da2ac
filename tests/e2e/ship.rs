//! From a member's work to shipping it (issue 34), end to end: a real
//! kdd, the real `kd`, real git; fake members that write files in their
//! worktree (`FAKE_RUN`). `kd rebase` brings a member's work up to date
//! with the King's branch — a conflict on both sides resolved by the
//! member, or a clean merge — so that `kd accept` merges it.

use std::path::Path;

use kd_client::prelude::*;
use kd_proto::work::{CheckStatus, WorkState, Worktree};
use kd_tests::{Kdd, Val, Workspace, fake, git};
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

pub(super) async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// `kd work TASK`: claude's worktree once its work is committed.
async fn at_work(kdd: &Kdd, ws: &Workspace, task: &str) -> Worktree {
    let out = kd(kdd, ws, &["work", task, "--json"]).await;
    let trees: Vec<Worktree> = serde_json::from_str(&out.stdout).expect("kd work --json: the worktrees");
    let w = trees.into_iter().next().expect("claude's worktree");
    // kd work fails when the check did not pass, and only then.
    let passed = w.check.as_ref().is_none_or(|c| c.status == CheckStatus::Pass);
    assert_eq!(out.status.success(), passed, "{}{}", out.stdout, out.stderr);
    assert_eq!(w.state, WorkState::Done, "{w:?}");
    assert_ne!(w.head, w.base, "claude committed something: {w:?}");
    w
}

/// A repository whose claude runs `run` ([`repo`]), a kdd, and claude's
/// work on `task` once committed ([`at_work`]).
async fn working(run: &str, task: &str) -> (Workspace, Kdd, Worktree) {
    let ws = repo(run);
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, task).await;
    (ws, kdd, w)
}

/// The King changes `file` in their own tree and commits it.
pub(super) fn king_commits(dir: &Path, file: &str, text: &str) -> String {
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

/// The request kd rebase sent the member of work `w` to bring its work
/// up to date, if it sent one.
async fn request_to(kdd: &Kdd, w: &Worktree) -> Option<String> {
    let c = kdd.client().await;
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    messages.into_iter().find(|m| m.body.starts_with("Bring your work up to date")).map(|m| m.body)
}

/// The member's line 2 on a first run; on a run that finds git's conflict
/// markers in a.txt, both sides' line 2 together, markers gone.
const RESOLVES: &str = "if grep -q '^<<<<<<<' a.txt; then printf 'one\\nking and claude\\n' > a.txt; \
                        else printf 'one\\nclaude\\n' > a.txt; fi";

/// claude's work on line two of a.txt ([`RESOLVES`]), then a commit of
/// yours changing the same line: the two conflict. The workspace, kdd,
/// the work and your commit.
async fn both_change_line_two() -> (Workspace, Kdd, Worktree, String) {
    let (ws, kdd, w) = working(RESOLVES, "Change line two").await;
    let king = king_commits(ws.dir.path(), "a.txt", "one\nking\n");
    (ws, kdd, w, king)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conflict_on_both_sides_is_resolved_by_the_member_and_then_accepted_with_every_commit_kept() {
    let (ws, kdd, w, king) = both_change_line_two().await;
    let dir = ws.dir.path();
    let member_commit = w.head.clone();

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
    let asked = request_to(&kdd, &w).await.expect("the request");
    assert!(asked.contains("- a.txt") && asked.contains("+king"), "{}", asked);
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
    // claude changes line two on its first run, and never resolves: it
    // stages the file as it is (git then no longer counts it unmerged) and
    // unstages it again, and notes something, staged (which git's undoing
    // of a merge alone would drop).
    let run = "if grep -q '^<<<<<<<' a.txt; then echo tried >> notes.txt; git add notes.txt a.txt; \
               git reset -q a.txt; else printf 'one\\nclaude\\n' > a.txt; fi";
    let (ws, kdd, w) = working(run, "Change line two").await;
    let dir = ws.dir.path();
    let king = king_commits(dir, "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(!out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("conflict markers remain in a.txt after 2 tries"), "{}", out.stdout);
    assert!(out.stdout.contains("kd undid the merge"), "{}", out.stdout);
    // The way it names is in your tree (the member's worktree's .git is the
    // member's to change), by the branch's full name: a member's tag of
    // its name would win over it by name.
    assert!(out.stdout.contains(&format!("yourself in {} (git merge", w.repo)), "{}", out.stdout);
    let advised = out.stdout.split("(git merge ").nth(1).and_then(|s| s.split(',').next()).expect("a git merge");
    git(dir, &["tag", &w.branch, &king]);
    assert_eq!(git(dir, &["rev-parse", advised]), git(Path::new(&w.path), &["rev-parse", "HEAD"]), "{}", out.stdout);
    // Its branch is as it was, nothing with markers committed; what its
    // runs wrote besides is committed on top, its worktree clean; the
    // member was told again once.
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["rev-parse", "HEAD~1"]), w.head);
    assert_eq!(git(path, &["show", "HEAD:notes.txt"]), "tried\ntried");
    assert_eq!(git(path, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "one\nclaude\n");
    let c = kdd.client().await;
    let trees = c.work_list(None, Some(w.thread.clone())).await.unwrap();
    let head = git(path, &["rev-parse", "HEAD"]);
    assert_eq!((trees[0].base.as_str(), trees[0].head.as_str()), (w.base.as_str(), head.as_str()));
    // The markers that kept its runs from being committed are gone.
    assert_eq!(trees[0].uncommitted, None, "{:?}", trees[0]);
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let again = messages.iter().filter(|m| m.body.starts_with("Conflict markers are still in")).count();
    assert_eq!(again, 1, "told again once");
    let said = messages.iter().filter(|m| m.body.contains("kd could not commit the work")).count();
    assert_eq!(said, 2, "each run's answer says kd did not commit the markers");
    // Followed: your merge, its conflict resolved by you, is what kd
    // accept then finds in your branch.
    let merge = std::process::Command::new("git").arg("-C").arg(dir).args(["merge", advised]).output().unwrap();
    assert!(!merge.status.success(), "the same conflict: {}", String::from_utf8_lossy(&merge.stdout));
    std::fs::write(dir.join("a.txt"), "one\nking and claude\n").unwrap();
    git(dir, &["commit", "--quiet", "-am", "Merge claude's work"]);
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(out.status.success() && out.stdout.contains("in main already"), "{}{}", out.stdout, out.stderr);
}

/// A run that leaves the rebase's markers is not committed, and so not
/// checked: no check runs on the markers, none is recorded against the
/// member's old commit, and `--until-green` sends no fix beside the
/// rebase's own requests (it once did, interleaved with them).
#[tokio::test(flavor = "multi_thread")]
async fn markers_left_in_a_rebase_are_not_checked_nor_sent_back_to_be_fixed() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\ntwo\n")], &[]);
    let run = "if test -f .git; then if grep -q '^<<<<<<<' a.txt; then echo tried >> notes.txt; \
               else printf 'one\\nclaude\\n' > a.txt; fi; fi";
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", run)]) });
    let check = json!({"check": ["sh", "-c", "! grep -q '^<<<<<<<' a.txt"]});
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents, "work": check}));
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Change line two", "--until-green", "2", "--json"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let w: Worktree = serde_json::from_str::<Vec<Worktree>>(&out.stdout).unwrap().remove(0);
    let c = kdd.client().await;
    let w = checked(&c, &w.thread, |w| w.check.as_ref().is_some_and(|c| c.status != CheckStatus::Running)).await;
    assert_eq!(w.check.as_ref().map(|c| (c.status, c.commit.as_str())), Some((CheckStatus::Pass, w.head.as_str())));
    king_commits(ws.dir.path(), "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.stdout.contains("conflict markers remain in a.txt after 2 tries"), "{}{}", out.stdout, out.stderr);
    let after = checked(&c, &w.thread, |w| w.check.as_ref().is_some_and(|c| c.status != CheckStatus::Running)).await;
    let check = after.check.clone().unwrap();
    assert_eq!(check.status, CheckStatus::Pass, "never a check of the markers: {after:?}");
    assert_eq!((after.fixes, after.state), (0, WorkState::Done), "{after:?}");
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let fixes = messages.iter().filter(|m| m.body.starts_with("The check of your work did not pass")).count();
    let again = messages.iter().filter(|m| m.body.starts_with("Conflict markers are still in")).count();
    assert_eq!((fixes, again), (0, 1), "only the rebase's requests");
    let runs = messages.iter().filter(|m| m.from == "claude").count();
    assert_eq!(runs, 3, "the work, the rebase's request and its one reminder");
}

/// A conflicted file whose name is not UTF-8 (`caf\xe9.txt`, Latin-1) is
/// looked at by its own name: markers the member leaves in it are never
/// committed, and the merge is undone as for any other name.
#[tokio::test(flavor = "multi_thread")]
async fn markers_left_in_a_file_whose_name_is_not_utf8_are_never_committed() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let dir = ws.dir.path();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(dir.join(name), "one\ntwo\n").unwrap();
    git(dir, &["add", "--all"]);
    git(dir, &["commit", "--quiet", "-m", "A Latin-1 name"]);
    let run = "if test -f .git; then f=$(printf 'caf\\351.txt'); grep -q '^<<<<<<<' \"$f\" || \
               printf 'one\\nclaude\\n' > \"$f\"; fi";
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", run)]) });
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents}));
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Change line two").await;
    std::fs::write(dir.join(name), "one\nking\n").unwrap();
    git(dir, &["commit", "--quiet", "-am", "King's line two"]);

    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(!out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("conflict markers remain in caf"), "{}{}", out.stdout, out.stderr);
    let path = Path::new(&w.path);
    let held = std::process::Command::new("git").arg("-C").arg(path).args(["grep", "-q", "^<<<<<<<", "HEAD"]).status();
    assert!(!held.unwrap().success(), "no commit of claude's branch holds markers");
    assert_eq!(git(path, &["log", "--merges", "--format=%H"]), "", "no merge was concluded");
    // Undone, as for any name: the branch as it was, claude's file its own.
    assert!(out.stdout.contains("kd undid the merge"), "{}", out.stdout);
    assert_eq!(git(path, &["rev-parse", "HEAD"]), w.head);
    assert_eq!(git(path, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(path.join(name)).unwrap(), "one\nclaude\n");
}

/// A merge kd cannot undo — the member changed (and staged) a file the merge
/// brought while failing to resolve — is left in progress, said so, and nothing of
/// the member's is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_kd_cannot_undo_is_left_in_progress_and_nothing_of_the_members_is_lost() {
    let run = "if grep -q '^<<<<<<<' a.txt; then echo claude >> b.txt; git add b.txt; else printf 'one\\nclaude\\n' > a.txt; fi";
    let (ws, kdd, w) = working(run, "Change line two").await;
    let dir = ws.dir.path();
    std::fs::write(dir.join("b.txt"), "king\n").unwrap();
    git(dir, &["add", "b.txt"]);
    king_commits(dir, "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(!out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("kd could not undo the merge"), "{}", out.stdout);
    assert!(out.stdout.contains("it is left in progress in"), "{}", out.stdout);
    let path = Path::new(&w.path);
    assert_eq!(std::fs::read_to_string(path.join("b.txt")).unwrap(), "king\nclaude\nclaude\n", "claude's lines kept");
    assert_eq!(git(path, &["rev-parse", "HEAD"]), w.head, "its branch as it was");
    let c = kdd.client().await;
    let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert!(now.uncommitted.is_some(), "it reads as not committed: {now:?}");
}

/// A merge undone after the member renamed a file you changed: the file
/// under its new name is the member's again, none of your change left on
/// its branch.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_undone_after_the_member_renamed_a_file_you_changed_leaves_none_of_yours() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\ntwo\n"), ("r.txt", "r\n")], &[]);
    let run = "if test -f .git; then if grep -q '^<<<<<<<' a.txt; then :; \
               else printf 'one\\nclaude\\n' > a.txt; git mv r.txt m.txt; fi; fi";
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", run)]) });
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents}));
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Change line two").await;
    std::fs::write(dir.join("r.txt"), "r\nking\n").unwrap();
    king_commits(dir, "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.stdout.contains("kd undid the merge"), "{}{}", out.stdout, out.stderr);
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["rev-parse", "HEAD"]), w.head, "nothing committed on top: {}", out.stdout);
    assert_eq!(std::fs::read_to_string(path.join("m.txt")).unwrap(), "r\n");
    assert_eq!(git(path, &["status", "--porcelain"]), "");
}

/// claude changes line two on a first run; on a run in a merge (which it
/// reads from git) it deletes a.txt, as the King's side did.
const TAKES_YOUR_DELETION: &str = "if git rev-parse -q --verify MERGE_HEAD > /dev/null; then rm a.txt; \
                                   else printf 'one\\nclaude\\n' > a.txt; fi";

/// claude's work on a.txt, then your commit deleting it: a conflict git
/// writes no marker for (modify/delete). The workspace, kdd, the work and
/// your commit.
async fn you_delete_what_it_changed() -> (Workspace, Kdd, Worktree, String) {
    let (ws, kdd, w) = working(TAKES_YOUR_DELETION, "Change line two").await;
    let dir = ws.dir.path();
    git(dir, &["rm", "--quiet", "a.txt"]);
    std::fs::write(dir.join("b.txt"), "b\n").unwrap();
    git(dir, &["add", "b.txt"]);
    git(dir, &["commit", "--quiet", "-m", "King's a.txt gone"]);
    let king = git(dir, &["rev-parse", "HEAD"]);
    (ws, kdd, w, king)
}

/// A conflict without markers (you deleted a file the member changed) is
/// named to the member as what it is, and the member decides it: here it
/// deletes the file too, and kd commits the merge.
#[tokio::test(flavor = "multi_thread")]
async fn a_conflict_without_markers_is_told_the_member_as_what_it_is_and_the_member_decides() {
    let (ws, kdd, w, king) = you_delete_what_it_changed().await;
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("claude's work is up to date with main"), "{}", out.stdout);
    let asked = request_to(&kdd, &w).await.expect("the request");
    assert!(asked.contains("- a.txt: main deleted it and you changed it") && asked.contains("no markers"), "{}", asked);
    let path = Path::new(&w.path);
    assert!(!path.join("a.txt").exists(), "claude deleted it");
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
    assert_eq!(git(path, &["status", "--porcelain"]), "");
}

/// Leaves the merge of `king` into the worktree at `path` in progress, as
/// kd rebase leaves it for the member, for a restart to cut short.
fn merge_left_in_progress(path: &Path, king: &str) {
    let merge = std::process::Command::new("git")
        .arg("-C")
        .arg(path)
        .args(["-c", "user.name=kd", "-c", "user.email=kd@localhost", "merge", "--no-ff", "--no-commit", king])
        .output()
        .unwrap();
    assert!(!merge.status.success(), "a conflict: {}", String::from_utf8_lossy(&merge.stdout));
}

/// A merge a restart cut short whose only conflict has no markers, the
/// file as git left it, is not concluded as if the member had decided it:
/// the member is asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_a_restart_cut_short_with_a_conflict_without_markers_asks_the_member() {
    let (ws, kdd, w, king) = you_delete_what_it_changed().await;
    let path = Path::new(&w.path);
    merge_left_in_progress(path, &king);
    assert!(path.join("a.txt").exists(), "git left claude's a.txt, without markers");
    let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("conflicts with claude's work in a.txt"), "{}", out.stderr);
    assert!(out.stdout.contains("claude's work is up to date with main"), "{}", out.stdout);
    assert!(!path.join("a.txt").exists(), "claude was asked, and deleted it");
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
}

/// The same conflict decided before the restart (the file deleted): the
/// merge is concluded, no one asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_a_restart_cut_short_with_a_conflict_without_markers_decided_is_concluded() {
    let (ws, kdd, w, king) = you_delete_what_it_changed().await;
    let path = Path::new(&w.path);
    merge_left_in_progress(path, &king);
    std::fs::remove_file(path.join("a.txt")).unwrap();
    let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
    assert!(out.status.success() && out.stdout.contains("merged into claude's work cleanly"), "{}", out.stdout);
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
    assert_eq!(request_to(&kdd, &w).await, None, "no one was asked");
}

/// A conflict git wrote its markers into, which the member resolved by
/// keeping its own version exactly before a restart cut the merge short:
/// the file is ours byte for byte, but git had left it with markers, so
/// the member decided it — the merge is concluded, no one asked again.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_a_restart_cut_short_with_markers_resolved_to_the_members_own_version_is_concluded() {
    let (ws, kdd, w, king) = both_change_line_two().await;
    let path = Path::new(&w.path);
    merge_left_in_progress(path, &king);
    assert!(std::fs::read_to_string(path.join("a.txt")).unwrap().contains("<<<<<<<"), "git wrote its markers");
    std::fs::write(path.join("a.txt"), "one\nclaude\n").unwrap();
    let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
    assert!(out.status.success() && out.stdout.contains("merged into claude's work cleanly"), "{}", out.stdout);
    assert_eq!(request_to(&kdd, &w).await, None, "no one was asked");
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "one\nclaude\n", "claude's version kept");
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
}

/// A binary file both sides changed: git writes no markers into it and
/// leaves the member's version. Found so after a restart, it is still
/// undecided — the member is asked (here it writes both sides' bytes).
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_a_restart_cut_short_with_a_binary_conflict_as_git_left_it_asks_the_member() {
    let run = "if git rev-parse -q --verify MERGE_HEAD > /dev/null; then printf 'both\\000\\n' > a.txt; \
               else printf 'claude\\000\\n' > a.txt; fi";
    let (ws, kdd, w) = working(run, "Change a.txt's bytes").await;
    let king = king_commits(ws.dir.path(), "a.txt", "king\0\n");
    let path = Path::new(&w.path);
    merge_left_in_progress(path, &king);
    assert_eq!(std::fs::read(path.join("a.txt")).unwrap(), b"claude\0\n", "git left claude's, without markers");
    let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("conflicts with claude's work in a.txt"), "{}{}", out.stdout, out.stderr);
    assert!(request_to(&kdd, &w).await.is_some(), "claude was asked");
    assert_eq!(std::fs::read(path.join("a.txt")).unwrap(), b"both\0\n", "claude decided it");
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
}

/// The same with line endings converted as git writes the file (CRLF by
/// `.gitattributes`), the member having deleted a file you changed: git
/// puts yours back, its bytes not the stored object's, and that is still
/// as git left it — the member is asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_git_put_back_with_its_line_endings_converted_counts_as_undecided() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\ntwo\n"), (".gitattributes", "*.txt text eol=crlf\n")], &[]);
    let run = "if test -f .git; then if git rev-parse -q --verify MERGE_HEAD > /dev/null; then rm a.txt; \
               else rm a.txt; echo b > b.md; fi; fi";
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", run)]) });
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents}));
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Drop a.txt").await;
    let king = king_commits(dir, "a.txt", "one\nking\n");
    let path = Path::new(&w.path);
    merge_left_in_progress(path, &king);
    assert_eq!(std::fs::read(path.join("a.txt")).unwrap(), b"one\r\nking\r\n", "git put yours back, converted");
    let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("conflicts with claude's work in a.txt"), "{}{}", out.stdout, out.stderr);
    assert!(!path.join("a.txt").exists(), "claude was asked, and deleted it again");
    let asked = request_to(&kdd, &w).await.expect("the request");
    assert!(asked.contains("- a.txt: you deleted it and main changed it"), "{}", asked);
    assert!(!asked.contains("hold git's conflict markers"), "no file has markers: {}", asked);
}

/// You made a.txt a directory while the member changed it: git moves the
/// member's file aside (`a.txt~HEAD`), and the member is told so — not
/// that you deleted it — and decides (here: drops it).
#[tokio::test(flavor = "multi_thread")]
async fn a_file_git_moved_aside_for_your_directory_is_told_as_moved_not_deleted() {
    let run = "if git rev-parse -q --verify MERGE_HEAD > /dev/null; then rm 'a.txt~HEAD'; \
               else printf 'one\\nclaude\\n' > a.txt; fi";
    let (ws, kdd, w) = working(run, "Change line two").await;
    let dir = ws.dir.path();
    git(dir, &["rm", "--quiet", "a.txt"]);
    std::fs::create_dir(dir.join("a.txt")).unwrap();
    std::fs::write(dir.join("a.txt/inside"), "king\n").unwrap();
    git(dir, &["add", "a.txt/inside"]);
    git(dir, &["commit", "--quiet", "-m", "King's a.txt a directory"]);
    let king = git(dir, &["rev-parse", "HEAD"]);
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let asked = request_to(&kdd, &w).await.expect("the request");
    assert!(asked.contains("- a.txt~HEAD: git moved your version of a.txt here, as main has a directory"), "{}", asked);
    assert!(!asked.contains("deleted it"), "{}", asked);
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
    assert_eq!(std::fs::read_to_string(path.join("a.txt/inside")).unwrap(), "king\n");
    assert!(!path.join("a.txt~HEAD").exists());
}

/// Both sides renamed a.txt, each to another name: neither name is told
/// as a file git moved aside; the member keeps one name (here its own).
#[tokio::test(flavor = "multi_thread")]
async fn a_file_both_sides_renamed_is_told_as_renamed_and_the_member_keeps_one_name() {
    let run = "if git rev-parse -q --verify MERGE_HEAD > /dev/null; then rm king.txt; \
               else git mv a.txt claude.txt; fi";
    let (ws, kdd, w) = working(run, "Rename a.txt").await;
    let dir = ws.dir.path();
    git(dir, &["mv", "a.txt", "king.txt"]);
    git(dir, &["commit", "--quiet", "-m", "King's name for a.txt"]);
    let king = git(dir, &["rev-parse", "HEAD"]);
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let body = request_to(&kdd, &w).await.expect("the request");
    assert!(body.contains("- claude.txt: it is yours, and main has no file of this name: most often both"), "{body}");
    assert!(body.contains("- king.txt: it is main's, and your work has no file of this name"), "{body}");
    assert!(!body.contains("aside"), "{body}");
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
    assert_eq!(std::fs::read_to_string(path.join("claude.txt")).unwrap(), "one\ntwo\n");
    assert!(!path.join("king.txt").exists() && !path.join("a.txt").exists());
}

/// `s` as a submodule (a gitlink) at `commit`, committed in `dir`.
fn submodule_at(dir: &Path, commit: &str) {
    git(dir, &["update-index", "--add", "--cacheinfo", &format!("160000,{commit},s")]);
    git(dir, &["commit", "--quiet", "-m", &format!("s at {commit}")]);
}

/// A submodule both sides moved conflicts with no file to resolve: a
/// member's worktree has no checkout of it (git refuses to stage it). kd
/// does not ask the member for what it cannot do: the merge is undone at
/// once, the branch as it was, and kd says how to merge it in your tree.
#[tokio::test(flavor = "multi_thread")]
async fn a_submodule_both_sides_moved_is_left_to_you_and_the_merge_undone() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let dir = ws.dir.path();
    submodule_at(dir, &"1".repeat(40));
    let run = format!(
        "if test -f .git; then git update-index --cacheinfo 160000,{},s; echo claude > b.txt; fi",
        "2".repeat(40)
    );
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", run.as_str())]) });
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents}));
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Move the submodule").await;
    let path = Path::new(&w.path);
    assert_eq!(git(path, &["rev-parse", "HEAD:s"]), "2".repeat(40), "claude moved s");
    submodule_at(dir, &"3".repeat(40));

    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(!out.status.success(), "{}{}", out.stdout, out.stderr);
    let said = format!("in a submodule: s (main: at {}; claude: at {})", "3".repeat(12), "2".repeat(12));
    assert!(out.stderr.contains(&said), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("git merge refs/heads/{}", w.branch)), "{}", out.stderr);
    assert_eq!(git(path, &["rev-parse", "HEAD"]), w.head, "its branch as it was");
    assert_eq!(git(path, &["status", "--porcelain"]), "", "no merge left in its worktree");
    let merging = std::process::Command::new("git")
        .arg("-C")
        .arg(path)
        .args(["rev-parse", "-q", "--verify", "MERGE_HEAD"])
        .output();
    assert!(!merging.unwrap().status.success(), "no merge in progress");
    assert_eq!(request_to(&kdd, &w).await, None, "claude was not asked");
    let c = kdd.client().await;
    let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!((now.state, now.head.as_str(), now.uncommitted), (WorkState::Done, w.head.as_str(), None));
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

/// A merge kd committed whose new base the registry did not get (the
/// write failed: `kd committed … but could not record its head`) is
/// recorded by the next `kd rebase`: the branch holds the King's HEAD
/// already, so its base becomes that commit, and the check runs again on
/// it. Before, that rebase said "already up to date", the work's diff went
/// on counting the King's commit as the member's, and its check stood as
/// of the commit before the merge.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_whose_new_base_was_not_recorded_gets_it_from_the_next_rebase() {
    let ws = repo("printf 'new\\n' > b.txt");
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", "if test -f .git; then printf 'new\\n' > b.txt; fi")]) });
    let check = json!({"check": ["grep", "-q", "king", "a.txt"]});
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents, "work": check}));
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    let king = king_commits(dir, "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.stdout.contains("merged into claude's work cleanly"), "{}{}", out.stdout, out.stderr);
    let c = kdd.client().await;
    let merged = checked(&c, &w.thread, |w| w.head != w.base).await;
    // The registry as a failed write of the merge's head leaves it: the
    // base, head and stat of before, the check of the commit before.
    let (old, head, thread) = (Val::Text(w.base.clone()), Val::Text(w.head.clone()), Val::Text(w.thread.clone()));
    let sql = "UPDATE worktrees SET base = $1, head = $2, files = 1, added = 1, check_commit = $2, \
               check_status = 'fail' WHERE thread_id = $3 AND member = 'claude'";
    assert_eq!(kdd.db.execute(sql, &[old, head, thread]), 1);
    // Accepting what the registry says is refused: it is not the branch.
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(!out.status.success() && out.stderr.contains("not at the commit kd recorded"), "{}", out.stderr);
    assert!(out.stderr.contains("kd rebase claude"), "{}", out.stderr);
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(
        out.status.success() && out.stdout.contains("already up to date with main"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("its base is now main"), "{}", out.stdout);
    let after = checked(&c, &w.thread, |a| a.check.as_ref().is_some_and(|c| c.commit == merged.head)).await;
    assert_eq!((&after.base, &after.head), (&king, &merged.head), "no new merge, the base recorded: {after:?}");
    assert_eq!((after.files, after.added), (1, 1), "its diff is b.txt alone: {after:?}");
    assert_eq!(after.check.map(|c| c.status), Some(CheckStatus::Pass), "checked again on the merge");
    let out = kd(&kdd, &ws, &["diff", "claude"]).await;
    assert!(out.stdout.contains("b.txt") && !out.stdout.contains("king"), "{}", out.stdout);
}

/// A member that takes your HEAD into its branch itself and drops your
/// change — in a merge (`git merge -s ours`), or by resetting its branch
/// onto yours and undoing it — cannot have that accepted unseen: its diff
/// from its recorded base shows neither your change nor its undoing, while
/// accepting would fast-forward your branch onto its tree. `kd accept`
/// refuses until `kd rebase` records your HEAD as its base, and then `kd
/// diff` shows the change undone. Before, the accept went through and your
/// commit's change was reverted silently.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_of_yours_the_member_dropped_is_not_accepted_unseen() {
    let drops = [
        "git -c user.name=m -c user.email=m@x merge -q -s ours --no-edit main",
        "git reset -q --hard main && printf 'one\\ntwo\\n' > a.txt && printf 'new\\n' > b.txt",
    ];
    for drop in drops {
        let ws = repo(&format!("if test -f b.txt; then {drop}; else printf 'new\\n' > b.txt; fi"));
        let dir = ws.dir.path();
        let kdd = Kdd::start();
        let w = at_work(&kdd, &ws, "Write b.txt").await;
        let king = king_commits(dir, "a.txt", "one\nking\n");
        let out = kd(&kdd, &ws, &["ask", "--thread", &w.thread, "--to", "claude", "--rounds", "0", "Go on"]).await;
        assert!(out.status.success(), "{drop}: {}", out.stderr);
        let c = kdd.client().await;
        let took = checked(&c, &w.thread, |n| n.head != w.head).await;
        assert!(is_ancestor(dir, &king, &took.head), "{drop}: claude took the King's HEAD: {took:?}");
        let out = kd(&kdd, &ws, &["diff", "claude"]).await;
        assert!(!out.stdout.contains("king"), "{drop}: the old base's diff hides it: {}", out.stdout);
        let out = kd(&kdd, &ws, &["accept", "claude"]).await;
        assert!(!out.status.success(), "{drop}: {}", out.stdout);
        assert!(out.stderr.contains("meet at") && out.stderr.contains("kd rebase claude"), "{drop}: {}", out.stderr);
        assert_eq!(git(dir, &["rev-parse", "HEAD"]), king, "{drop}: nothing changed");
        let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
        assert!(out.stdout.contains("its base is now main"), "{drop}: {}{}", out.stdout, out.stderr);
        let out = kd(&kdd, &ws, &["diff", "claude"]).await;
        assert!(out.stdout.contains("-king") && out.stdout.contains("+two"), "{drop}: shown: {}", out.stdout);
        let out = kd(&kdd, &ws, &["accept", "claude"]).await;
        assert!(out.status.success(), "{drop}: seen, it may be accepted: {}", out.stderr);
    }
}

/// `kd rebase` with your HEAD detached is refused, as `kd accept` is:
/// perhaps at the member's own commits, there is no branch of yours to
/// bring its work up to, and its record would read as changing nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebase_with_your_head_detached_is_refused_and_records_nothing() {
    let (ws, kdd, first, w) = begun_after_a_commit_of_yours().await;
    let dir = ws.dir.path();
    let c = kdd.client().await;
    for at in [w.head.as_str(), first.as_str()] {
        git(dir, &["checkout", "--quiet", "--detach", at]);
        let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
        assert!(!out.status.success() && out.stderr.contains("detached HEAD"), "{at}: {}{}", out.stdout, out.stderr);
        let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
        assert_eq!((&now.base, &now.head), (&w.base, &w.head), "{at}: nothing recorded: {now:?}");
    }
}

/// A merge of `kd rebase`'s that a restart cut short (its markers
/// resolved, not committed) is concluded by the next `kd rebase` with your
/// HEAD detached too: concluding it needs nothing of yours.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_a_restart_cut_short_is_concluded_with_your_head_detached() {
    let (ws, kdd, w, king) = both_change_line_two().await;
    let dir = ws.dir.path();
    // The merge as kd rebase leaves it for the member, its markers then
    // resolved by the member's run, which a restart of kdd cut short.
    let path = Path::new(&w.path);
    merge_left_in_progress(path, &king);
    std::fs::write(path.join("a.txt"), "one\nking and claude\n").unwrap();
    git(dir, &["checkout", "--quiet", "--detach"]);
    let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let said = format!("{} merged into claude's work cleanly", &king[..12]);
    assert!(out.stdout.starts_with(&said), "{}", out.stdout);
    assert_eq!(git(path, &["log", "-1", "--format=%P"]), format!("{} {king}", w.head), "the merge concluded");
    assert_eq!(git(path, &["status", "--porcelain"]), "");
    let c = kdd.client().await;
    let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!(now.base, king, "its base is your commit merged in: {now:?}");
}

/// Work you merged whole by hand (git fast-forwarded your branch onto it)
/// is accepted as it is: your branch holds it, nothing is merged, and kd
/// says so. With commits of yours on top, `kd rebase` leaves it as it is
/// (a fast-forward of its branch onto yours would make it read as changing
/// nothing) and `kd accept` takes it the same way.
#[tokio::test(flavor = "multi_thread")]
async fn work_you_merged_by_hand_is_accepted_as_it_is() {
    let ws = repo("printf 'new\\n' >> b.txt");
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let c = kdd.client().await;
    for more in [false, true] {
        let w = at_work(&kdd, &ws, "Write b.txt").await;
        git(dir, &["merge", "--quiet", "--ff-only", &w.branch]);
        let mut king = w.head.clone();
        if more {
            king = king_commits(dir, "a.txt", "one\nking\n");
            let out = kd(&kdd, &ws, &["rebase", "claude", "--thread", &w.thread]).await;
            assert!(out.status.success() && out.stdout.contains("already up to date"), "{}{}", out.stdout, out.stderr);
            let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
            assert_eq!((&now.base, &now.head), (&w.base, &w.head), "nothing recorded: {now:?}");
        }
        let out = kd(&kdd, &ws, &["accept", "claude", "--thread", &w.thread]).await;
        assert!(out.status.success(), "{more}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("claude's work is in main already: accepted, nothing merged"), "{}", out.stdout);
        assert_eq!(git(dir, &["rev-parse", "HEAD"]), king, "{more}: nothing merged");
        let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
        assert_eq!(now.state, WorkState::Accepted, "{more}: {now:?}");
    }
}

/// `kd accept` merges the commit kd recorded and showed, never the branch
/// by its name: a tag (or another ref) of the same name, which git would
/// take first, is not what is merged.
#[tokio::test(flavor = "multi_thread")]
async fn accept_merges_the_commit_kd_showed_not_a_tag_of_the_branchs_name() {
    let ws = repo("printf 'new\\n' > b.txt");
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    // A commit off the branch, tagged with the branch's name.
    let path = Path::new(&w.path);
    std::fs::write(path.join("e.txt"), "hidden\n").unwrap();
    git(path, &["add", "e.txt"]);
    git(path, &["-c", "user.name=m", "-c", "user.email=m@x", "commit", "--quiet", "-m", "hidden"]);
    git(path, &["tag", &w.branch]);
    git(path, &["reset", "--quiet", "--hard", "HEAD~1"]);
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(dir.join("b.txt").exists() && !dir.join("e.txt").exists(), "the tag's commit is not merged");
}

/// Your branch moved back (a branch at an older commit checked out): the
/// work's branch brings your later commits back, which its diff from its
/// recorded base does not show. `kd accept` asks for `kd rebase`, which
/// records your HEAD as its base, and the diff then shows them.
#[tokio::test(flavor = "multi_thread")]
async fn after_your_branch_moved_back_accept_asks_for_a_rebase_whose_diff_shows_what_it_brings() {
    let (ws, kdd, first, w) = begun_after_a_commit_of_yours().await;
    let dir = ws.dir.path();
    git(dir, &["switch", "--quiet", "-c", "old", &first]);
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(!out.status.success() && out.stderr.contains("meet at"), "{}", out.stderr);
    assert_eq!(git(dir, &["rev-parse", "HEAD"]), first, "nothing changed");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.stdout.contains("its base is now old"), "{}{}", out.stdout, out.stderr);
    let c = kdd.client().await;
    let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!((&now.base, &now.head), (&first, &w.head), "{now:?}");
    let out = kd(&kdd, &ws, &["diff", "claude"]).await;
    assert!(out.stdout.contains("+king") && out.stdout.contains("b.txt"), "{}", out.stdout);
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "one\nking\n");
}

/// You merged some of the member's commits by hand, then it went on: its
/// diff from its recorded base shows what you have already, and accepting
/// would bring only the rest. `kd accept` asks for `kd rebase`, which
/// merges your branch into its and records it as the base: the diff is
/// then the rest alone.
#[tokio::test(flavor = "multi_thread")]
async fn after_you_merged_part_of_the_work_by_hand_a_rebase_shows_the_rest() {
    let ws = repo("if test -f b.txt; then printf 'more\\n' > c.txt; else printf 'new\\n' > b.txt; fi");
    let dir = ws.dir.path();
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    git(dir, &["merge", "--quiet", "--no-ff", "--no-edit", &w.branch]);
    let out = kd(&kdd, &ws, &["ask", "--thread", &w.thread, "--to", "claude", "--rounds", "0", "Go on"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let c = kdd.client().await;
    checked(&c, &w.thread, |n| n.head != w.head).await;
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(!out.status.success() && out.stderr.contains("meet at"), "{}", out.stderr);
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.stdout.contains("merged into claude's work cleanly"), "{}{}", out.stdout, out.stderr);
    let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!((now.files, now.added), (1, 1), "c.txt alone: {now:?}");
    let out = kd(&kdd, &ws, &["accept", "claude"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(dir.join("b.txt").exists() && dir.join("c.txt").exists());
}

/// claude's work (b.txt) begun after a commit of yours (a.txt); your first
/// commit.
async fn begun_after_a_commit_of_yours() -> (Workspace, Kdd, String, Worktree) {
    let ws = repo("printf 'new\\n' > b.txt");
    let first = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    king_commits(ws.dir.path(), "a.txt", "one\nking\n");
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    (ws, kdd, first, w)
}

/// The member's worktree on `thread` once `ready` holds and no check runs.
async fn checked(c: &kd_client::Client, thread: &str, ready: impl Fn(&Worktree) -> bool) -> Worktree {
    kd_tests::within("the work checked", async {
        loop {
            let now = c.work_list(None, Some(thread.to_string())).await.unwrap().remove(0);
            if ready(&now) && now.check.as_ref().is_none_or(|c| c.status != CheckStatus::Running) {
                return now;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_rebase_checks_the_merged_work_again() {
    let ws = repo("printf 'new\\n' > b.txt");
    let agents = json!({ "claude": fake("claude", "claude", &[("FAKE_RUN", "if test -f .git; then printf 'new\\n' > b.txt; fi")]) });
    let check = json!({"check": ["grep", "-q", "king", "a.txt"]});
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": agents, "work": check}));
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    assert_eq!(w.check.as_ref().map(|c| c.status), Some(CheckStatus::Fail), "no King's line yet: {w:?}");
    king_commits(ws.dir.path(), "a.txt", "one\nking\n");
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.stdout.contains("merged into claude's work cleanly"), "{}{}", out.stdout, out.stderr);
    let c = kdd.client().await;
    let merged = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0).head;
    assert_ne!(merged, w.head);
    let checked = kd_tests::within("the merge's check", async {
        loop {
            let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
            if now.check.as_ref().is_some_and(|c| c.commit == merged && c.status != CheckStatus::Running) {
                return now.check.unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(checked.status, CheckStatus::Pass, "the merged work has the King's line: {checked:?}");
}

/// A bare repository standing for the King's GitHub remote: `origin` is
/// `https://github.com/king/kd.git`, which git pushes to the bare one
/// (`insteadOf`), `main` pushed there first.
pub(super) fn github_remote(ws: &Workspace) -> tempfile::TempDir {
    let bare = tempfile::tempdir().unwrap();
    git(bare.path(), &["init", "--quiet", "--bare"]);
    let dir = ws.dir.path();
    git(dir, &["remote", "add", "origin", "https://github.com/king/kd.git"]);
    let rewrite = format!("url.{}.insteadOf", bare.path().display());
    git(dir, &["config", &rewrite, "https://github.com/king/kd.git"]);
    git(dir, &["push", "--quiet", "origin", "main"]);
    bare
}

/// The commit `branch` is at in the bare repository, if it is there.
pub(super) fn remote_branch(bare: &Path, branch: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(bare)
        .args(["rev-parse", "--verify", "--quiet", &format!("refs/heads/{branch}")])
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// This test's PATH without any real gh, with `first` before it.
pub(super) fn path_without_gh(first: Option<&Path>) -> String {
    let own = std::env::var("PATH").unwrap_or_default();
    let dirs = own.split(':').filter(|d| !Path::new(d).join("gh").exists()).map(str::to_string);
    first.map(|f| f.display().to_string()).into_iter().chain(dirs).collect::<Vec<_>>().join(":")
}

/// A fake `gh` in a directory of its own: records its argv (NUL after
/// each) to `argv` beside it and prints a pull request's URL, as gh does;
/// asked again for the same branch, it refuses as gh does (exit 1, the
/// open pull request's URL on stderr). `gh pr edit` is recorded apart.
pub(super) fn fake_gh() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let (record, opened) = (bin.path().join("argv"), bin.path().join("opened"));
    // `gh pr edit` records its argv apart (`edited`) and prints the URL, as gh does.
    let script = format!(
        "#!/bin/sh\nif test \"$2\" = edit; then for a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{2}'; \
         echo \"$3\"; exit 0; fi\n\
         for a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{}'\n\
         if test -e '{1}'; then printf 'a pull request for branch \"%s\" into branch \"%s\" already exists:\\n%s\\n' \
         \"$4\" \"$6\" https://github.com/king/kd/pull/7 >&2; exit 1; fi\n: > '{1}'\n\
         echo 'Creating pull request' >&2\necho https://github.com/king/kd/pull/7\n",
        record.display(),
        opened.display(),
        bin.path().join("edited").display()
    );
    let gh = bin.path().join("gh");
    std::fs::write(&gh, script).unwrap();
    std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

async fn kd_with_path(kdd: &Kdd, ws: &Workspace, path: &str, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).env("PATH", path).args(args);
    kd_tests::run(cmd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_pr_pushes_the_branch_and_gh_opens_a_pull_request_with_the_task_the_check_and_the_review() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\ntwo\n")], &[]);
    let writes = "if test -f .git; then printf 'new\\n' > b.txt; fi".to_string();
    let approves = json!([["[Review]", "Fine.\nb.txt:1: a fine line.\nVERDICT: APPROVE"]]).to_string();
    let agents = json!({
        "claude": fake("claude", "claude", &[("FAKE_RUN", writes.as_str())]),
        "codex": fake("codex", "codex", &[("FAKE_RULES", approves.as_str())]),
    });
    let check = json!({"check": ["test", "-f", "b.txt"]});
    ws.write_config(&json!({"council": {"members": ["claude", "codex"]}, "agents": agents, "work": check}));
    let bare = github_remote(&ws);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "--to", "claude", "Write b.txt\n\nWith one line.", "--json"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let w: Worktree = serde_json::from_str::<Vec<Worktree>>(&out.stdout).unwrap().remove(0);
    let review = kd(&kdd, &ws, &["review", "claude"]).await;
    assert!(review.stdout.contains("Review of claude's work: 1 approve (codex)"), "{}", review.stdout);

    let bin = fake_gh();
    let out = kd_with_path(&kdd, &ws, &path_without_gh(Some(bin.path())), &["pr", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), "https://github.com/king/kd/pull/7");
    assert!(out.stderr.contains(&format!("kd: {} pushed to origin ({})", w.branch, &w.head[..12])), "{}", out.stderr);
    assert_eq!(remote_branch(bare.path(), &w.branch).as_deref(), Some(w.head.as_str()), "the branch was pushed");
    // What was shipped is in the text views too, not only in --json.
    let list = kd(&kdd, &ws, &["work", "--list"]).await;
    assert!(list.stdout.contains("done (pull request)"), "{}", list.stdout);
    let diff = kd(&kdd, &ws, &["diff", "claude", "--stat"]).await;
    let shipped = format!("pull request https://github.com/king/kd/pull/7 (pushed to origin, {})", &w.head[..12]);
    assert!(diff.stdout.contains(&shipped), "{}", diff.stdout);
    let argv = std::fs::read_to_string(bin.path().join("argv")).expect("gh was run");
    let argv: Vec<&str> = argv.trim_end_matches('\0').split('\0').collect();
    assert_eq!(
        argv[..10],
        ["pr", "create", "--head", w.branch.as_str(), "--base", "main", "--title", "Write b.txt", "--body", argv[9]]
    );
    assert_eq!(argv[10..], ["--repo", "github.com/king/kd"]);
    let body = argv[9];
    assert!(body.starts_with("Write b.txt\n\nWith one line.\n"), "the task: {body}");
    assert!(body.contains("Review of claude's work: 1 approve (codex)"), "the council's review: {body}");
    assert!(review.stdout.contains("kd comments claude lists them"), "{}", review.stdout);
    assert!(!body.contains("kd comments") && !body.contains("kd review --send"), "no terminal's advice: {body}");
    assert!(body.contains("## Check") && body.contains("`test -f b.txt`: pass in "), "the check's result: {body}");
    assert!(body.contains(&format!("on commit {}", &w.head[..12])) && !body.contains("not the pushed"), "{body}");
    // Recorded on the work.
    let c = kdd.client().await;
    let after = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    let shipped = after.shipped.expect("shipped");
    assert_eq!((shipped.remote.as_str(), shipped.commit.as_str(), shipped.pr), ("origin", w.head.as_str(), true));
    assert_eq!(shipped.url.as_deref(), Some("https://github.com/king/kd/pull/7"));
    assert_eq!(after.state, WorkState::Done, "kd pr does not settle the work");
}

/// A tag of the same name as your branch (`main`) changes nothing: the
/// work branches off the trunk `kd ask` is on (branch `main`, not git's
/// short `heads/main`), and its pull request is based on `main`.
#[tokio::test(flavor = "multi_thread")]
async fn a_tag_named_as_your_branch_leaves_the_work_on_your_trunk_and_its_pull_request_on_your_branch() {
    let ws = repo("printf 'new\\n' > b.txt");
    let bare = github_remote(&ws);
    git(ws.dir.path(), &["tag", "main"]);
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["ask", "--rounds", "0", "Where do we start?"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let c = kdd.client().await;
    let threads = c.thread_list(None, None, None).await.unwrap();
    let [trunk] = threads.as_slice() else { panic!("one thread: {threads:?}") };
    assert_eq!(trunk.branch.as_deref(), Some("main"));

    let w = at_work(&kdd, &ws, "Write b.txt").await;
    let t = c.thread_get(w.thread.clone()).await.unwrap();
    assert_eq!(t.parent.as_deref(), Some(trunk.id.as_str()), "the work is a branch of the same trunk: {t:?}");
    assert_eq!(t.branch.as_deref(), Some("main"), "{t:?}");
    assert_eq!(c.thread_list(None, None, None).await.unwrap().len(), 2, "no second trunk");

    let bin = fake_gh();
    let out = kd_with_path(&kdd, &ws, &path_without_gh(Some(bin.path())), &["pr", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert_eq!(remote_branch(bare.path(), &w.branch).as_deref(), Some(w.head.as_str()), "the branch was pushed");
    let argv = std::fs::read_to_string(bin.path().join("argv")).expect("gh was run");
    let argv: Vec<&str> = argv.trim_end_matches('\0').split('\0').collect();
    assert_eq!(argv[4..6], ["--base", "main"], "{argv:?}");
}

/// `kd pr` again once the pull request is open (after a rebase moved the
/// work on): gh refuses to open a second one and names the first, which
/// the push updated; kd says so, keeps its URL and exits 0, and `kd accept
/// --pr` then accepts the work by it. Until then `kd diff` says the pull
/// request is behind the work.
#[tokio::test(flavor = "multi_thread")]
async fn kd_pr_again_updates_the_open_pull_request_and_accept_pr_takes_it() {
    let ws = repo("printf 'new\\n' > b.txt");
    let bare = github_remote(&ws);
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    let bin = fake_gh();
    let path = path_without_gh(Some(bin.path()));
    let pull = "https://github.com/king/kd/pull/7";
    let out = kd_with_path(&kdd, &ws, &path, &["pr", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), pull);
    // You move on; the rebase merges it into the work: the pull request
    // is behind.
    std::fs::write(ws.dir.path().join("c.txt"), "king\n").unwrap();
    git(ws.dir.path(), &["add", "c.txt"]);
    git(ws.dir.path(), &["commit", "--quiet", "-m", "King's c.txt"]);
    let out = kd(&kdd, &ws, &["rebase", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let c = kdd.client().await;
    let rebased = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0).head;
    assert_ne!(rebased, w.head);
    let diff = kd(&kdd, &ws, &["diff", "claude", "--thread", &w.thread, "--stat"]).await;
    let behind = format!("behind the work ({}): kd pr claude --thread {} pushes it", &rebased[..12], w.thread);
    assert!(
        diff.stdout.contains(&format!("pull request {pull} (pushed to origin, {})", &w.head[..12])),
        "{}",
        diff.stdout
    );
    assert!(diff.stdout.contains(&behind), "{}", diff.stdout);

    let out = kd_with_path(&kdd, &ws, &path, &["pr", "claude"]).await;
    assert!(out.status.success(), "gh's refusal is the pull request updated: {}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), pull);
    assert!(out.stderr.contains(&format!("pushed to origin ({})", &rebased[..12])), "{}", out.stderr);
    assert!(
        out.stderr.contains("the pull request was open already: the push updated it and its description"),
        "{}",
        out.stderr
    );
    // Its description is the work's as it is now: gh pr edit was given the
    // pull request, the title and a body naming the rebased commit.
    let edited = std::fs::read(bin.path().join("edited")).expect("gh pr edit was run");
    let edited: Vec<String> =
        edited.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into()).collect();
    assert_eq!(edited[..3], ["pr", "edit", pull], "{edited:?}");
    let at = |flag: &str| edited.iter().position(|a| a == flag).map(|i| edited[i + 1].clone());
    assert_eq!(at("--title").as_deref(), Some("Write b.txt"), "{edited:?}");
    let body = at("--body").expect("a body");
    assert!(body.contains(&format!("commit {}", &rebased[..12])), "{body}");
    assert!(!body.contains(&w.head[..12]), "{body}");
    assert_eq!(remote_branch(bare.path(), &w.branch).as_deref(), Some(rebased.as_str()));
    let after = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    let shipped = after.shipped.expect("shipped");
    assert_eq!((shipped.url.as_deref(), shipped.pr, shipped.commit.as_str()), (Some(pull), true, rebased.as_str()));
    let diff = kd(&kdd, &ws, &["diff", "claude", "--stat"]).await;
    assert!(!diff.stdout.contains("behind"), "{}", diff.stdout);

    let out = kd_with_path(&kdd, &ws, &path, &["accept", "claude", "--pr"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("claude's work is accepted by its pull request"), "{}", out.stderr);
    let after = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!((after.state, after.shipped.and_then(|s| s.url)), (WorkState::Accepted, Some(pull.to_string())));
}

/// Work begun on a commit of yours not yet on the remote: its pull request
/// would carry that commit too, and `kd pr` says so (it said nothing).
#[tokio::test(flavor = "multi_thread")]
async fn kd_pr_says_the_pull_request_carries_your_unpushed_commits() {
    let ws = repo("printf 'new\\n' > b.txt");
    let _bare = github_remote(&ws);
    king_commits(ws.dir.path(), "a.txt", "one\nmine, not pushed\n");
    let kdd = Kdd::start();
    let _w = at_work(&kdd, &ws, "Write b.txt").await;
    let bin = fake_gh();
    let out = kd_with_path(&kdd, &ws, &path_without_gh(Some(bin.path())), &["pr", "claude"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("kd: the pull request also carries 1 commit of main not on origin (git push origin main)"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn accept_pr_without_gh_pushes_prints_the_compare_page_and_accepts() {
    let ws = repo("printf 'new\\n' > b.txt");
    let bare = github_remote(&ws);
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    let king = git(ws.dir.path(), &["rev-parse", "HEAD"]);
    let out = kd_with_path(&kdd, &ws, &path_without_gh(None), &["accept", "claude", "--pr"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let page = format!("https://github.com/king/kd/compare/main...{}?expand=1", w.branch);
    assert_eq!(out.stdout.trim(), page);
    assert!(out.stderr.contains("gh is not on your PATH"), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("kd: {} pushed to origin ({})", w.branch, &w.head[..12])), "{}", out.stderr);
    assert!(out.stderr.contains("claude's work is accepted by its pull request"), "{}", out.stderr);
    let list = kd(&kdd, &ws, &["work", "--list"]).await;
    assert!(list.stdout.contains("accepted (pushed)"), "{}", list.stdout);
    let diff = kd(&kdd, &ws, &["diff", "claude", "--stat"]).await;
    assert!(
        diff.stdout.contains(&format!("pushed to origin ({}): open a pull request at {page}", &w.head[..12])),
        "{}",
        diff.stdout
    );
    assert_eq!(remote_branch(bare.path(), &w.branch).as_deref(), Some(w.head.as_str()));
    assert_eq!(git(ws.dir.path(), &["rev-parse", "HEAD"]), king, "nothing merged in the King's tree");
    let c = kdd.client().await;
    let after = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!(after.state, WorkState::Accepted);
    let shipped = after.shipped.expect("shipped");
    assert_eq!((shipped.url.as_deref(), shipped.pr), (Some(page.as_str()), false));
}

#[tokio::test(flavor = "multi_thread")]
async fn pr_without_the_remote_is_refused_and_nothing_is_pushed() {
    let ws = repo("printf 'new\\n' > b.txt");
    // A remote there is, but not the one kd pushes to (origin).
    let bare = tempfile::tempdir().unwrap();
    git(bare.path(), &["init", "--quiet", "--bare"]);
    git(ws.dir.path(), &["remote", "add", "mirror", &bare.path().display().to_string()]);
    let kdd = Kdd::start();
    let w = at_work(&kdd, &ws, "Write b.txt").await;
    let bin = fake_gh();
    let out = kd_with_path(&kdd, &ws, &path_without_gh(Some(bin.path())), &["pr", "claude"]).await;
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(out.stderr.contains("has no remote named origin (work.remote)"), "{}", out.stderr);
    assert!(out.stderr.contains("nothing was pushed"), "{}", out.stderr);
    assert_eq!(remote_branch(bare.path(), &w.branch), None);
    assert!(!bin.path().join("argv").exists(), "gh was not run");
    let c = kdd.client().await;
    let after = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!((after.shipped, after.state), (None, WorkState::Done));
}
