//! A check in every worktree and fix until green (issue 34 items 1-2), end
//! to end: a real kdd, the real `kd`, real git, fake agents writing files
//! in their worktree (`FAKE_RUN`), and `work.check` a real command run
//! after each commit — confined to the worktree, bounded in time, its
//! result on the work, in `kd work`, `kd diff`, `kd check` and ballots.

use std::path::Path;

use kd_client::prelude::*;
use kd_proto::types::Purpose;
use kd_proto::work::{CheckStatus, WorkState, Worktree};
use kd_tests::{Kdd, Workspace, fake, git, worktree_until as until};
use serde_json::{Value, json};

/// In a member's worktree only (where `.git` is a file), runs `cmd`.
pub(crate) fn in_worktree(cmd: &str) -> String {
    format!("if test -f .git; then {cmd}; fi")
}

/// A git repository whose council is `members` (name → FAKE_* env, claude's
/// format), with `work` as its work settings.
pub(crate) fn repo(members: &[(&str, Vec<(&str, String)>)], work: Value) -> Workspace {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let mut agents = serde_json::Map::new();
    for (name, env) in members {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        agents.insert(name.to_string(), fake("claude", name, &env));
    }
    let names: Vec<&str> = members.iter().map(|m| m.0).collect();
    ws.write_config(&json!({"council": {"members": names}, "agents": agents, "work": work}));
    ws
}

async fn kd(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> kd_tests::Output {
    let mut cmd = kdd.kd();
    cmd.current_dir(ws.dir.path()).args(args);
    kd_tests::run(cmd).await
}

/// `kd work TASK --json ARGS`: the worktrees once every run ended and
/// every check came out.
async fn work(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> Vec<Worktree> {
    let mut all = vec!["work", "Do the task", "--json"];
    all.extend_from_slice(args);
    let out = kd(kdd, ws, &all).await;
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("kd work --json: {e}: {}{}", out.stdout, out.stderr))
}

fn tree_of<'a>(trees: &'a [Worktree], member: &str) -> &'a Worktree {
    trees.iter().find(|w| w.member == member).unwrap_or_else(|| panic!("no worktree of {member}: {trees:?}"))
}

fn status(w: &Worktree) -> CheckStatus {
    w.check.as_ref().unwrap_or_else(|| panic!("{} has no check: {w:?}", w.member)).status
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_passes_for_one_member_and_fails_for_another_and_every_view_says_so() {
    let ws = repo(
        &[
            ("claude", vec![("FAKE_RUN", in_worktree("echo good > impl.txt"))]),
            ("codex", vec![("FAKE_RUN", in_worktree("echo bad > impl.txt"))]),
        ],
        json!({"check": ["sh", "-c", "grep -q good impl.txt || { echo 'impl.txt is broken' >&2; exit 3; }"]}),
    );
    let kdd = Kdd::start();
    let trees = work(&kdd, &ws, &[]).await;
    let (claude, codex) = (tree_of(&trees, "claude"), tree_of(&trees, "codex"));
    for w in [claude, codex] {
        let c = w.check.as_ref().unwrap();
        assert_eq!(w.state, WorkState::Done, "{w:?}");
        assert_eq!(c.commit, w.head, "the check ran on the work's commit: {w:?}");
        assert_ne!(w.head, w.base);
    }
    assert_eq!((status(claude), claude.check.as_ref().unwrap().exit_code), (CheckStatus::Pass, Some(0)));
    let failed = codex.check.as_ref().unwrap();
    assert_eq!((failed.status, failed.exit_code), (CheckStatus::Fail, Some(3)));
    assert!(failed.output.contains("impl.txt is broken"), "the output's tail: {failed:?}");
    // kd work --list (--json: check.status), kd diff, and the line kd work printed.
    let list = kd(&kdd, &ws, &["work", "--list", "--json"]).await;
    let listed: Value = serde_json::from_str(&list.stdout).unwrap();
    let by = |m: &str| listed.as_array().unwrap().iter().find(|w| w["member"] == m).unwrap()["check"]["status"].clone();
    assert_eq!((by("claude"), by("codex")), (json!("pass"), json!("fail")), "{}", list.stdout);
    let table = kd(&kdd, &ws, &["work", "--list"]).await.stdout;
    assert!(table.contains("CHECK") && table.contains("fail (exit 3)"), "{table}");
    let diff = kd(&kdd, &ws, &["diff", "codex", "--stat"]).await.stdout;
    assert!(diff.contains("check fail (exit 3) on"), "{diff}");
    let again = kd(&kdd, &ws, &["work", "Again"]).await;
    let out = &again.stdout;
    assert!(out.contains("check pass") && out.contains("check fail (exit 3)"), "kd work's lines: {out}");
    // A check that did not pass is kd work's failure, said on stderr.
    assert_eq!(again.status.code(), Some(1), "{out}{}", again.stderr);
    assert!(
        again.stderr.contains("kd: the check of codex's work did not pass (check fail (exit 3))"),
        "{}",
        again.stderr
    );
    assert_eq!(git(ws.dir.path(), &["status", "--porcelain"]), "", "the check never runs in the King's tree");
}

#[tokio::test(flavor = "multi_thread")]
async fn until_green_sends_a_failing_member_back_and_its_work_passes_after_its_second_try() {
    // Its first try leaves a mark; its second, seeing it, fixes the work.
    let fixes = in_worktree("if test -f tried; then echo ok > fixed.txt; fi; touch tried");
    let ws = repo(&[("claude", vec![("FAKE_RUN", fixes)])], json!({"check": ["test", "-f", "fixed.txt"]}));
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Do the task", "--until-green", "2"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("fixing 1/2") && out.stdout.contains("check fail (exit 1)"), "{}", out.stdout);
    let trees: Vec<Worktree> =
        serde_json::from_str(&kd(&kdd, &ws, &["work", "--list", "--json"]).await.stdout).unwrap();
    let w = tree_of(&trees, "claude");
    assert_eq!((status(w), w.fixes, w.until_green, w.state), (CheckStatus::Pass, 1, 2, WorkState::Done), "{w:?}");
    assert!(Path::new(&w.path).join("fixed.txt").exists());
    assert_eq!(w.check.as_ref().unwrap().commit, w.head, "the passing check is of the fix's commit");
    // Each try is a run of its own, the second told the failure.
    let rows = kdd.db.query(
        "SELECT count(*) FROM runs WHERE thread_id = $1 AND member = 'claude' AND purpose IS NULL",
        &[w.thread.clone().into()],
    );
    assert_eq!(rows[0][0].int(), 2, "two runs");
    let c = kdd.client().await;
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let sent_back = messages.iter().find(|m| m.body.contains("did not pass")).expect("the member was sent back");
    assert!(sent_back.body.contains("try 1 of 2") && sent_back.to == ["claude"], "{}", sent_back.body);
    assert_eq!(messages.iter().filter(|m| m.purpose == Some(Purpose::Tally)).count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_running_past_its_timeout_is_killed_and_recorded_timeout() {
    let ws = repo(
        &[("claude", vec![("FAKE_RUN", in_worktree("echo x > impl.txt"))])],
        json!({"check": ["sh", "-c", "echo started; sleep 60 & sleep 60"], "check_timeout": 1}),
    );
    let kdd = Kdd::start();
    let begun = std::time::Instant::now();
    let trees = work(&kdd, &ws, &[]).await;
    let c = tree_of(&trees, "claude").check.clone().unwrap();
    assert_eq!((c.status, c.exit_code), (CheckStatus::Timeout, None), "{c:?}");
    assert!(c.output.contains("started"), "{c:?}");
    assert!(c.duration_ms >= 1000 && begun.elapsed().as_secs() < 30, "{c:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_check_runs_the_check_again_on_the_members_last_commit() {
    let marker = tempfile::tempdir().unwrap();
    let flag = marker.path().join("green");
    let ws = repo(
        &[("claude", vec![("FAKE_RUN", in_worktree("echo x > impl.txt"))])],
        json!({"check": ["test", "-f", flag.display().to_string()]}),
    );
    let kdd = Kdd::start();
    let trees = work(&kdd, &ws, &[]).await;
    let first = tree_of(&trees, "claude").check.clone().unwrap();
    assert_eq!(first.status, CheckStatus::Fail);
    let out = kd(&kdd, &ws, &["check", "claude"]).await;
    assert!(!out.status.success() && out.stdout.contains("check fail (exit 1)"), "{}{}", out.stdout, out.stderr);
    std::fs::write(&flag, "").unwrap();
    let out = kd(&kdd, &ws, &["check", "claude", "--json"]).await;
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let again: Vec<Worktree> = serde_json::from_str(&out.stdout).unwrap();
    let c = again[0].check.clone().unwrap();
    assert_eq!((c.status, c.commit.as_str()), (CheckStatus::Pass, first.commit.as_str()));
    assert!(c.started_at_ms > first.started_at_ms, "a new check");
    // Without a check configured, kd check says how to set one.
    ws.write_config(&json!({"council": {"members": ["claude"]}, "agents": {"claude": fake("claude", "claude", &[])}}));
    let out = kd(&kdd, &ws, &["check", "claude"]).await;
    assert!(!out.status.success() && out.stderr.contains("work.check"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_check_writes_in_its_worktree_and_nowhere_else() {
    let outside = tempfile::tempdir().unwrap();
    let theirs = outside.path().join("written-by-the-check");
    let script = format!(
        "echo in > inside.txt; echo out > {}; echo king > ../../king.txt; echo tree > {}/a.txt; echo done",
        theirs.display(),
        "KING"
    );
    let ws = repo(&[("claude", vec![("FAKE_RUN", in_worktree("echo x > impl.txt"))])], json!({}));
    let king = ws.dir.path().display().to_string();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    config["work"] = json!({"check": ["sh", "-c", script.replace("KING", &king)]});
    ws.write_config(&config);
    let kdd = Kdd::start();
    let trees = work(&kdd, &ws, &[]).await;
    let w = tree_of(&trees, "claude");
    assert_eq!(status(w), CheckStatus::Pass, "{w:?}");
    let said = &w.check.as_ref().unwrap().output;
    assert!(said.contains("done") && said.contains("ermission denied"), "the writes outside were refused: {said}");
    assert_eq!(std::fs::read_to_string(Path::new(&w.path).join("inside.txt")).unwrap(), "in\n");
    assert!(!theirs.exists(), "nothing written outside the worktree");
    assert_eq!(std::fs::read_to_string(ws.dir.path().join("a.txt")).unwrap(), "one\n", "the King's tree untouched");
    assert!(!Path::new(&w.path).join("../../king.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn ballots_show_each_diffs_check_result_beside_it() {
    let record = |m: &str| format!("/tmp/kd-work-check-vote-{m}-{}.jsonl", std::process::id());
    let rules = json!([["[Evaluation]", "FINAL RANKING:\n1. {label:+alpha}\n2. {label:+beta}"]]).to_string();
    let member = |m: &str, text: &str| {
        vec![
            ("FAKE_RUN", in_worktree(&format!("echo {text} > impl.txt"))),
            ("FAKE_RULES", rules.clone()),
            ("FAKE_RECORD", record(m)),
        ]
    };
    let ws = repo(
        &[("claude", member("claude", "alpha")), ("codex", member("codex", "beta"))],
        json!({"check": ["grep", "-q", "alpha", "impl.txt"]}),
    );
    let kdd = Kdd::start();
    let trees = work(&kdd, &ws, &["--vote"]).await;
    assert_eq!(
        (status(tree_of(&trees, "claude")), status(tree_of(&trees, "codex"))),
        (CheckStatus::Pass, CheckStatus::Fail)
    );
    for m in ["claude", "codex"] {
        let prompts: Vec<String> = kd_tests::records(&record(m)).iter().map(kd_tests::prompt_of).collect();
        let ballot = prompts.iter().find(|p| p.contains("[Evaluation]")).expect("a ballot prompt");
        let shown = &ballot[ballot.find("[Evaluation]").unwrap()..];
        let other = if m == "claude" { "fail (exit 1)" } else { "pass in" };
        assert!(shown.contains(&format!("Check (work.check) on its last commit: {other}")), "{m}'s ballot: {shown}");
        assert!(!shown.contains("claude") && !shown.contains("codex"), "anonymised: {shown}");
        let _ = std::fs::remove_file(record(m));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_check_holds_no_shutdown_and_runs_again_after_the_restart() {
    let marker = tempfile::tempdir().unwrap();
    let flag = marker.path().join("green");
    let ws = repo(
        &[("claude", vec![("FAKE_RUN", in_worktree("echo x > impl.txt"))])],
        json!({"check": ["sh", "-c", format!("test -f {} || sleep 600", flag.display())]}),
    );
    let mut kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Do the task", "--async"]).await;
    let thread = out.stdout.trim().to_string();
    let w = until(&kdd, &thread, "the check running", |w| w.state == WorkState::Done && w.checking()).await;
    let begun = w.check.unwrap();
    std::fs::write(&flag, "").unwrap();
    // The check sleeps on: kdd stops anyway (SIGTERM), and the check is not recorded.
    kdd.restart();
    let w = until(&kdd, &thread, "the check run again", |w| !w.checking()).await;
    let c = w.check.unwrap();
    assert_eq!((c.status, c.commit.as_str()), (CheckStatus::Pass, begun.commit.as_str()), "{c:?}");
    assert!(c.started_at_ms == begun.started_at_ms, "the check left running is the one that ran again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_sent_back_early_leaves_another_members_run_undisturbed() {
    let marker = tempfile::tempdir().unwrap();
    let go = marker.path().join("go");
    let fixes = in_worktree("if test -f tried; then echo ok > fixed.txt; fi; touch tried");
    // codex works until claude's fix has been asked for (its second run began).
    let slow = in_worktree(&format!("while ! test -f {}; do sleep 0.05; done; echo ok > fixed.txt", go.display()));
    let ws = repo(
        &[("claude", vec![("FAKE_RUN", fixes)]), ("codex", vec![("FAKE_RUN", slow)])],
        json!({"check": ["test", "-f", "fixed.txt"]}),
    );
    let kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Do the task", "--async", "--until-green", "1"]).await;
    let thread = out.stdout.trim().to_string();
    // Nothing of kd follows the work: it says how to answer what members ask.
    assert!(out.stderr.contains("unless a King's client follows them: kd approvals --follow"), "{}", out.stderr);
    until(&kdd, &thread, "claude sent back", |w| w.member == "claude" && w.fixes == 1).await;
    std::fs::write(&go, "").unwrap();
    for m in ["claude", "codex"] {
        let w = until(&kdd, &thread, "both checked", |w| {
            w.member == m && w.state == WorkState::Done && !w.checking() && w.check.is_some()
        })
        .await;
        assert_eq!(status(&w), CheckStatus::Pass, "{w:?}");
        assert!(Path::new(&w.path).join("fixed.txt").exists(), "{m}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn until_green_with_a_vote_ranks_the_work_once_it_is_fixed() {
    let record = |m: &str| format!("/tmp/kd-work-check-green-vote-{m}-{}.jsonl", std::process::id());
    let rules = json!([["[Evaluation]", "FINAL RANKING:\n1. {label:+alpha}\n2. {label:+beta}"]]).to_string();
    // claude's first try fails the check, its second passes; codex's first passes.
    let fixes = in_worktree("if test -f tried; then echo alpha > fixed.txt; fi; touch tried");
    let member =
        |m: &str, run: String| vec![("FAKE_RUN", run), ("FAKE_RULES", rules.clone()), ("FAKE_RECORD", record(m))];
    let ws = repo(
        &[("claude", member("claude", fixes)), ("codex", member("codex", in_worktree("echo beta > fixed.txt")))],
        json!({"check": ["test", "-f", "fixed.txt"]}),
    );
    let kdd = Kdd::start();
    let trees = work(&kdd, &ws, &["--vote", "--until-green", "2"]).await;
    let claude = tree_of(&trees, "claude");
    assert_eq!(
        (status(claude), claude.fixes, status(tree_of(&trees, "codex"))),
        (CheckStatus::Pass, 1, CheckStatus::Pass)
    );
    // codex's ballot ranks claude's fixed work, its check passing on the fix's commit.
    let prompts: Vec<String> = kd_tests::records(&record("codex")).iter().map(kd_tests::prompt_of).collect();
    let ballot = prompts.iter().find(|p| p.contains("[Evaluation]")).expect("a ballot prompt");
    let shown = &ballot[ballot.find("[Evaluation]").unwrap()..];
    assert!(shown.contains("Check (work.check) on its last commit: pass in"), "codex's ballot: {shown}");
    assert!(shown.contains("fixed.txt") && !shown.contains("fail"), "the fixed diff is ranked: {shown}");
    let c = kdd.client().await;
    let messages = c.thread_messages(claude.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let tallies: Vec<_> = messages.iter().filter(|m| m.purpose == Some(Purpose::Tally)).collect();
    assert_eq!(tallies.len(), 1, "one vote, after the fix: {messages:?}");
    let fix_answered = messages.iter().filter(|m| m.from == "claude").map(|m| m.seq).max().unwrap();
    assert!(tallies[0].seq > fix_answered, "the vote came after the fix");
    for m in ["claude", "codex"] {
        let _ = std::fs::remove_file(record(m));
    }
}

/// kill -9 of kdd while a check runs: what the check started (a `sleep`
/// its shell put in the background) is killed when kdd starts again — it
/// ran on beside the check run again, past any timeout.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_check_started_does_not_outlive_a_killed_kdd() {
    let marker = tempfile::tempdir().unwrap();
    let flag = marker.path().join("green");
    // It writes only in its worktree: the pid is written there.
    let check = format!(
        "test -f {} && exit 0; sleep 600 & echo $! > sleep.part && mv sleep.part sleep.pid; wait",
        flag.display()
    );
    let ws = repo(
        &[("claude", vec![("FAKE_RUN", in_worktree("echo x > impl.txt"))])],
        json!({"check": ["sh", "-c", check]}),
    );
    let mut kdd = Kdd::start();
    let out = kd(&kdd, &ws, &["work", "Do the task", "--async"]).await;
    let thread = out.stdout.trim().to_string();
    let w = until(&kdd, &thread, "the check running", |w| w.state == WorkState::Done && w.checking()).await;
    let pidfile = Path::new(&w.path).join("sleep.pid");
    let sleeping: u32 = kd_tests::within("the check's sleep", async {
        loop {
            if let Ok(pid) = std::fs::read_to_string(&pidfile) {
                return pid.trim().parse().unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    kdd.kill9();
    assert!(kd_tests::alive(sleeping), "the check's sleep outlived kdd (its shell died with it)");
    std::fs::write(&flag, "").unwrap();
    kdd.launch().expect("kdd starts again");
    kd_tests::until_gone(sleeping, "the killed kdd's check's sleep").await;
    let w = until(&kdd, &thread, "the check run again", |w| !w.checking()).await;
    assert_eq!(w.check.map(|c| c.status), Some(CheckStatus::Pass));
}
