//! From a member's work to shipping it, in `kd chat` (issue 34): tmux runs
//! the TUI against a real kdd, real git (a bare repository as the GitHub
//! remote) and a fake `gh`; a fake claude writes in its worktree and a
//! real check runs after each of its runs. `/check`, `/comment` with
//! `/review --send`, `/rebase`, `/pr` and `/accept --pr` do what `kd check`,
//! `kd review --send`, `kd rebase`, `kd pr` and `kd accept --pr` do.

use kd_client::prelude::*;
use kd_proto::work::{CheckStatus, WorkState, Worktree};
use kd_tests::tmux::Tmux;
use kd_tests::{Kdd, Workspace, bin, fake, records};
use serde_json::json;

use super::ship::{fake_gh, github_remote, kd, king_commits, path_without_gh, remote_branch};

/// A first run writes `b.txt`; a later one (the review) adds a line to it.
const WRITES_THEN_REVISES: &str =
    "if test -f .git; then if test -f b.txt; then echo revised >> b.txt; else echo new > b.txt; fi; fi";

#[tokio::test(flavor = "multi_thread")]
async fn the_chat_checks_sends_comments_back_rebases_and_ships_a_members_work() {
    let dir = tempfile::tempdir().unwrap();
    let green = dir.path().join("green");
    let record = dir.path().join("claude.jsonl").display().to_string();
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    // The check passes once the test says so.
    let check = format!("test -e '{}' || {{ echo 'not green yet' >&2; exit 1; }}", green.display());
    let env = [("FAKE_RUN", WRITES_THEN_REVISES), ("FAKE_RECORD", record.as_str())];
    ws.write_config(&json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": fake("claude", "claude", &env)},
        "work": {"check": ["sh", "-c", check]},
    }));
    let bare = github_remote(&ws);
    let gh = fake_gh();
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let out = kd(&kdd, &ws, &["work", "Write b.txt", "--json"]).await;
    // kd work exits 1: the check of claude's work did not pass.
    assert_eq!(out.status.code(), Some(1), "{}{}", out.stdout, out.stderr);
    let w: Worktree = serde_json::from_str::<Vec<Worktree>>(&out.stdout).unwrap().remove(0);
    assert_eq!(w.check.as_ref().map(|c| c.status), Some(CheckStatus::Fail), "{w:?}");

    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 40);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!(
        "PATH='{}' KD_NO_AUTOSTART=1 {} --socket {} chat {}",
        path_without_gh(Some(gh.path())),
        bin("kd").display(),
        kdd.socket.display(),
        w.thread
    ));
    tmux.wait_for("claude's work, its check failed", |s| s.contains("+1 −0 · done · check fail (exit 1)")).await;

    // /check: run again, the result said as kd check prints it, the stat line follows.
    std::fs::write(&green, b"").unwrap();
    tmux.type_line("/check claude");
    let screen = tmux
        .wait_for("the check's result", |s| {
            s.contains(&format!("claude  check pass on {}", &w.head[..12])) && s.contains("· done · check pass")
        })
        .await;
    assert!(!screen.contains("check fail"), "{screen}");

    // /comment, then /review --send: one review; claude revises, its check runs again.
    tmux.type_line("/comment claude b.txt:1 say more");
    tmux.wait_for("the comment", |s| s.contains("on claude's b.txt:1 (pending")).await;
    tmux.type_line("/review --send claude Please add a line.");
    tmux.wait_for("the review sent", |s| s.contains("sent 1 comment to claude (message #")).await;
    tmux.wait_for("the revised work, checked", |s| s.contains("+2 −0 · done · check pass")).await;
    let prompts: Vec<String> = records(&record).iter().filter_map(|r| r["stdin"].as_str().map(String::from)).collect();
    assert_eq!(prompts.len(), 2, "the task, then the review: {prompts:?}");
    assert!(prompts[1].contains("Please add a line.") && prompts[1].contains("say more"), "{}", prompts[1]);

    // /rebase: the King's branch moved on; it merges cleanly.
    king_commits(ws.dir.path(), "a.txt", "one\nking\n");
    tmux.type_line("/rebase claude");
    tmux.wait_for("the rebase", |s| s.contains("merged into claude's work cleanly")).await;

    // /pr: pushed, gh opens the pull request; its URL in the log.
    tmux.type_line("/pr claude");
    tmux.wait_for("the pull request", |s| {
        s.contains("pull request: https://github.com/king/kd/pull/7")
            && s.contains("· done · check pass · pull request")
    })
    .await;
    let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!(remote_branch(bare.path(), &w.branch).as_deref(), Some(now.head.as_str()), "the branch was pushed");
    let argv = std::fs::read_to_string(gh.path().join("argv")).expect("gh was run");
    assert!(argv.starts_with("pr\0create\0"), "{argv:?}");

    // /accept --pr: accepted by its pull request, nothing merged here.
    let king = kd_tests::git(ws.dir.path(), &["rev-parse", "HEAD"]);
    tmux.type_line("/accept --pr claude");
    tmux.wait_for("accepted by its pull request", |s| {
        s.contains("claude's work is accepted by its pull request") && s.contains("· accepted")
    })
    .await;
    let now = c.work_list(None, Some(w.thread.clone())).await.unwrap().remove(0);
    assert_eq!(now.state, WorkState::Accepted);
    assert_eq!(kd_tests::git(ws.dir.path(), &["rev-parse", "HEAD"]), king, "nothing merged in the King's tree");
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}
