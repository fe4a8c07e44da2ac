//! Tests of shipping a member's work from the chat (issue 34): `/check`,
//! `/rebase`, `/pr`, `/accept --pr`, `/review` and `/review --send` are
//! asked of the daemon as the CLI asks them, and what comes back is said
//! as the CLI says it.

use kd_proto::types::*;
use kd_proto::work::{CheckStatus, PullRequest, RebaseOutcome, Rebased, Shipped, WorkCheck, WorkState, Worktree};
use ratatui::crossterm::event::KeyCode;

use super::app::{Effect, Kind};
use super::keys;
use super::requests::{Reply, on_reply};
use super::tests::{at_work, key, screen, typed, worktree};

fn check(status: CheckStatus, exit: Option<i32>, output: &str, started: i64) -> WorkCheck {
    WorkCheck {
        status,
        commit: "c".repeat(40),
        exit_code: exit,
        duration_ms: if status == CheckStatus::Running { 0 } else { 2100 },
        output: output.into(),
        started_at_ms: started,
    }
}

fn checked(member: &str, c: WorkCheck) -> Worktree {
    Worktree { check: Some(c), ..worktree(member, WorkState::Done, 1, 1, 0) }
}

fn work_event(w: &Worktree) -> ThreadEvent {
    ThreadEvent::Work { worktree: Box::new(w.clone()) }
}

fn enter(app: &mut super::app::App, line: &str) -> Vec<Effect> {
    typed(app, line);
    keys::on_key(app, key(KeyCode::Enter))
}

/// The notes kd wrote in this chat's log.
fn notes(app: &super::app::App) -> Vec<String> {
    app.entries.iter().filter(|e| e.kind == Kind::System && e.seq.is_none()).map(|e| e.text.clone()).collect()
}

#[test]
fn check_runs_again_and_its_result_is_said_as_kd_check_prints_it() {
    let mut app = at_work();
    app.set_work(vec![
        checked("claude", check(CheckStatus::Pass, Some(0), "", 10)),
        worktree("codex", WorkState::Rejected, 1, 1, 0),
    ]);
    assert!(enter(&mut app, "/check cursor").is_empty());
    assert!(app.notice.as_deref().unwrap().starts_with("cursor has no work on this thread"), "{:?}", app.notice);
    // Alone: every member's work the King may still take (not codex's, rejected).
    assert_eq!(enter(&mut app, "/check"), vec![Effect::Check(vec!["claude".into()])]);
    assert_eq!(app.notice.as_deref(), Some("checking the work of claude…"));
    let running = checked("claude", check(CheckStatus::Running, None, "", 20));
    on_reply(&mut app, Reply::Checking(Ok(vec![running.clone()])));
    app.apply(&work_event(&running));
    assert!(screen(&mut app, 80, 20).contains("· done · checking"), "the stat line says it runs");
    assert!(notes(&app).is_empty(), "nothing said before it ends");
    // An older result (of the check before) is not this one's.
    app.apply(&work_event(&checked("claude", check(CheckStatus::Pass, Some(0), "", 10))));
    assert!(notes(&app).is_empty());
    let output = (1..=25).map(|i| format!("line {i}")).collect::<Vec<_>>().join("\n") + "\nbroken\x1b[2J";
    app.apply(&work_event(&checked("claude", check(CheckStatus::Fail, Some(3), &output, 20))));
    let said = notes(&app);
    assert_eq!(said.len(), 1, "{said:?}");
    let first = format!("claude  check fail (exit 3) on {}, 2.1 s", "c".repeat(12));
    assert!(said[0].starts_with(&format!("{first}\n  line 7\n")), "the line, then the last 20 lines:\n{}", said[0]);
    assert!(!said[0].contains("line 6\n") && said[0].ends_with("\n  broken␛[2J"), "escaped:\n{}", said[0]);
    assert_eq!(app.notice.as_deref(), Some(first.as_str()));
    let s = screen(&mut app, 80, 40);
    assert!(s.contains("· done · check fail (exit 3)"), "the stat line follows:\n{s}");
    // Said once.
    app.apply(&work_event(&checked("claude", check(CheckStatus::Fail, Some(3), &output, 20))));
    assert_eq!(notes(&app).len(), 1);
}

#[test]
fn a_check_that_ended_before_its_answer_came_is_still_said() {
    let mut app = at_work();
    app.set_work(vec![checked("claude", check(CheckStatus::Fail, Some(1), "no", 10))]);
    assert_eq!(enter(&mut app, "/check @claude"), vec![Effect::Check(vec!["claude".into()])]);
    app.apply(&work_event(&checked("claude", check(CheckStatus::Pass, Some(0), "", 20))));
    on_reply(&mut app, Reply::Checking(Ok(vec![checked("claude", check(CheckStatus::Running, None, "", 20))])));
    assert_eq!(notes(&app), [format!("claude  check pass on {}, 2.1 s", "c".repeat(12))]);
    assert!(screen(&mut app, 80, 20).contains("· done · check pass"), "the result stays on the stat line");
    // Refused (no work.check set): said, and nothing waits.
    assert_eq!(enter(&mut app, "/check claude"), vec![Effect::Check(vec!["claude".into()])]);
    let refused = kd_client::ClientError::from(jsonrpsee::core::client::Error::Call(
        jsonrpsee::types::ErrorObjectOwned::owned(1001, "no check: set work.check", None::<()>),
    ));
    on_reply(&mut app, Reply::Checking(Err(refused)));
    assert_eq!(app.notice.as_deref(), Some("no check: set work.check"));
    assert!(app.checks.is_empty());
}

#[test]
fn rebase_pr_and_accept_by_pull_request_say_what_kd_did() {
    let mut app = at_work();
    app.set_work(vec![worktree("claude", WorkState::Done, 1, 1, 0)]);
    assert!(enter(&mut app, "/rebase codex").is_empty(), "no work of codex here");
    assert_eq!(enter(&mut app, "/rebase claude"), vec![Effect::Rebase("claude".into())]);
    let rebased = |outcome, conflicts: &[&str]| Rebased {
        member: "claude".into(),
        branch: "kd/x/claude".into(),
        from: "main".into(),
        onto: "a".repeat(40),
        outcome,
        commit: Some("d".repeat(40)),
        conflicts: conflicts.iter().map(|c| c.to_string()).collect(),
        seq: Some(4),
    };
    on_reply(&mut app, Reply::Rebased(Ok(rebased(RebaseOutcome::Merged, &[]))));
    assert_eq!(
        app.notice.as_deref(),
        Some("main (aaaaaaaaaaaa) merged into claude's work cleanly (dddddddddddd): /accept claude merges it")
    );
    on_reply(&mut app, Reply::Rebased(Ok(rebased(RebaseOutcome::Resolving, &["a.txt", "b\x1b[2J"]))));
    assert_eq!(
        app.notice.as_deref(),
        Some(
            "main (aaaaaaaaaaaa) conflicts with claude's work in a.txt, b␛[2J: claude is asked to resolve the \
             conflicts in its worktree"
        )
    );
    on_reply(&mut app, Reply::Rebased(Ok(rebased(RebaseOutcome::UpToDate, &[]))));
    assert_eq!(app.notice.as_deref(), Some("claude's work is already up to date with main (aaaaaaaaaaaa)"));

    assert_eq!(enter(&mut app, "/pr claude"), vec![Effect::Pr { member: "claude".into(), accept: false }]);
    let shipped = Shipped {
        remote: "origin".into(),
        commit: "c".repeat(40),
        at_ms: 0,
        url: Some("https://github.com/king/kd/pull/7".into()),
        pr: true,
    };
    let pr = PullRequest {
        member: "claude".into(),
        branch: "kd/x/claude".into(),
        base: "main".into(),
        shipped: shipped.clone(),
        note: None,
        accepted: false,
        superseded: vec![],
    };
    on_reply(&mut app, Reply::Shipped(Ok(pr.clone())));
    assert_eq!(
        app.notice.as_deref(),
        Some("kd/x/claude pushed to origin (cccccccccccc): pull request https://github.com/king/kd/pull/7")
    );
    assert_eq!(
        notes(&app),
        ["kd/x/claude pushed to origin (cccccccccccc)\npull request: https://github.com/king/kd/pull/7"]
    );
    app.apply(&work_event(&Worktree {
        shipped: Some(shipped.clone()),
        ..worktree("claude", WorkState::Done, 1, 1, 0)
    }));
    assert!(screen(&mut app, 80, 30).contains("· done · pull request"), "the stat line says it");
    // Again, once it is open: the push updated it, and the log says so.
    let updated =
        PullRequest { note: Some("the pull request was open already: the push updated it".into()), ..pr.clone() };
    on_reply(&mut app, Reply::Shipped(Ok(updated)));
    assert_eq!(
        notes(&app)[1],
        "kd/x/claude pushed to origin (cccccccccccc)\nthe pull request was open already: the push updated it\n\
         pull request: https://github.com/king/kd/pull/7"
    );

    // Accepted by its pull request, without gh: the page to open one.
    assert_eq!(enter(&mut app, "/accept claude --pr"), vec![Effect::Pr { member: "claude".into(), accept: true }]);
    let page = "https://github.com/king/kd/compare/main...kd/x/claude?expand=1";
    let accepted = PullRequest {
        shipped: Shipped { url: Some(page.into()), pr: false, ..shipped },
        note: Some("gh is not on your PATH".into()),
        accepted: true,
        superseded: vec!["codex".into()],
        ..pr
    };
    on_reply(&mut app, Reply::Shipped(Ok(accepted)));
    assert_eq!(
        notes(&app)[2],
        format!(
            "kd/x/claude pushed to origin (cccccccccccc)\ngh is not on your PATH\nopen a pull request of kd/x/claude \
             into main at: {page}\nclaude's work is accepted by its pull request; the work of codex is superseded"
        )
    );
    assert_eq!(
        app.notice.as_deref(),
        Some(format!("kd/x/claude pushed to origin (cccccccccccc): open a pull request at {page}").as_str())
    );
    // The notes stay after the thread's messages, in the log.
    let last = app.entries.last().unwrap();
    assert_eq!((last.kind, last.member.as_str()), (Kind::System, "kd"));
    assert!(screen(&mut app, 100, 40).contains("the work of codex is superseded"));
}

#[test]
fn review_and_review_send_are_asked_and_the_revising_run_is_this_chats() {
    let mut app = at_work();
    app.set_work(vec![worktree("claude", WorkState::Done, 1, 1, 0)]);
    assert_eq!(enter(&mut app, "/review claude"), vec![Effect::Review("claude".into())]);
    on_reply(&mut app, Reply::Reviewing("claude".into(), Ok(4)));
    assert_eq!(
        app.notice.as_deref(),
        Some("the council reviews claude's work (message #4); kd counts the verdicts here")
    );
    assert!(enter(&mut app, "/review --send codex").is_empty(), "no work of codex here");
    assert_eq!(
        enter(&mut app, "/review --send claude Close, two things."),
        vec![Effect::SendReview { member: "claude".into(), message: Some("Close, two things.".into()) }]
    );
    let sent = kd_proto::comment::ReviewSent { seq: 5, comments: vec![], runs: vec!["r9".into()] };
    on_reply(&mut app, Reply::ReviewSent("claude".into(), Ok(sent)));
    assert_eq!(app.notice.as_deref(), Some("sent 0 comments to claude (message #5); claude revises in its worktree"));
    assert!(app.my_runs.contains("r9"), "Esc interrupts it, /quit waits for it");
}
