//! Tests of the chat's approvals (issue 33): a request is shown in its
//! member's panel and asked in the status bar, the keys send the right
//! decision, a decision made anywhere clears the prompt and the panel
//! says how it ended (snapshots in `snapshots/`).

use kd_proto::approval::{Approval, ApprovalState, ApprovalTool, DecidedBy, Decision, Scope, ToolKind};
use kd_proto::types::*;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::app::{App, Effect, Kind, Overlay};
use super::keys;
use super::requests::{Reply, on_reply};
use super::tests::{key, screen, thread, typed};
use crate::testkit::{THREAD, answer, message, run_at};

/// A pending approval of `member`'s run `run`, asked at `at` ms: run a command.
fn asks(id: &str, member: &str, run: &str, command: &str, at: i64) -> Approval {
    let mut tool = ApprovalTool::new(ToolKind::Execute, command);
    tool.name = Some("Bash".into());
    tool.command = Some(command.into());
    Approval {
        id: id.into(),
        thread: THREAD.into(),
        member: member.into(),
        run: Some(run.into()),
        tool,
        scopes: vec![Scope::Once, Scope::Run, Scope::Thread],
        state: ApprovalState::Pending,
        decided_by: None,
        scope: None,
        message: None,
        requested_at_ms: at,
        decided_at_ms: None,
        expires_at_ms: None,
    }
}

fn decided(a: &Approval, state: ApprovalState, by: Option<DecidedBy>, message: Option<&str>) -> Approval {
    Approval {
        state,
        decided_by: by,
        scope: (state == ApprovalState::Approved).then_some(Scope::Once),
        message: message.map(str::to_string),
        decided_at_ms: Some(a.requested_at_ms + 1),
        ..a.clone()
    }
}

fn requested(a: &Approval) -> ThreadEvent {
    ThreadEvent::ApprovalRequested { approval: Box::new(a.clone()) }
}

fn decided_event(a: &Approval) -> ThreadEvent {
    ThreadEvent::ApprovalDecided { approval: Box::new(a.clone()) }
}

fn decide(id: &str, decision: Decision, scope: Option<Scope>, message: Option<&str>) -> Effect {
    Effect::Decide { id: id.into(), decision, scope, message: message.map(str::to_string) }
}

/// The King asked; claude streams (run r1), codex waits (run r2).
fn asking() -> App {
    let mut app = App::new(thread());
    app.load(thread(), &[message(1, "king", MessageKind::King, "Touch the file.", None)]);
    app.apply(&ThreadEvent::RunWaiting { run: run_at("r1", "claude", 1) });
    app.apply(&ThreadEvent::Delta {
        run: "r1".into(),
        member: "claude".into(),
        text: "I will touch it.".into(),
        chars: 16,
    });
    app.apply(&ThreadEvent::RunWaiting { run: run_at("r2", "codex", 2) });
    app
}

/// The status bar's row.
fn status(s: &str, height: usize) -> &str {
    s.lines().nth(height - 4).unwrap_or_default()
}

#[test]
fn a_request_is_shown_in_its_members_panel_and_the_status_bar_names_the_keys() {
    let mut app = asking();
    assert_eq!(app.asked(), None);
    app.apply(&requested(&asks("ap-1", "claude", "r1", "touch /repo/x", 10)));
    assert_eq!(app.asked().map(|a| a.id.as_str()), Some("ap-1"));
    insta::assert_snapshot!(screen(&mut app, 80, 20));
    let s = screen(&mut app, 120, 20);
    assert!(
        status(&s, 20).contains(
            "claude asks: y allow once · a allow for the rest of the run · n deny · N deny with a message · Esc later"
        ),
        "{s}"
    );
    // A CLI that cannot honour "for the run" is not offered it.
    let mut once = asking();
    let mut a = asks("ap-2", "codex", "r2", "curl example.org", 10);
    a.scopes = vec![Scope::Once];
    once.apply(&requested(&a));
    let s = screen(&mut once, 120, 20);
    assert!(s.contains("codex ── waits for your approval"), "{s}");
    assert!(
        !s.contains("allow for the rest of the run") && status(&s, 20).contains("codex asks: y allow once · n deny")
    );
    assert_eq!(keys::on_key(&mut once, key(KeyCode::Char('a'))), vec![]);
    assert_eq!(once.notice.as_deref(), Some("codex's CLI cannot be allowed for the run: y allows this once"));
}

#[test]
fn each_key_sends_its_decision_with_its_scope() {
    let a = asks("ap-1", "claude", "r1", "touch /repo/x", 10);
    let ask = || {
        let mut app = asking();
        app.apply(&requested(&a));
        app
    };
    let mut app = ask();
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Char('y'))),
        vec![decide("ap-1", Decision::Approve, Some(Scope::Once), None)]
    );
    // Being decided: not asked again, and the next key types.
    assert_eq!(app.asked(), None);
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('y'))), vec![]);
    assert_eq!(app.input.lines(), ["y"]);

    let mut app = ask();
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Char('a'))),
        vec![decide("ap-1", Decision::Approve, Some(Scope::Run), None)]
    );
    let mut app = ask();
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('n'))), vec![decide("ap-1", Decision::Deny, None, None)]);
    // N: the King writes what the member is told.
    let mut app = ask();
    let shift_n = KeyEvent::new(KeyCode::Char('N'), KeyModifiers::SHIFT);
    assert_eq!(keys::on_key(&mut app, shift_n), vec![]);
    assert_eq!(app.input.lines(), ["/deny ap-1 "]);
    typed(&mut app, "use the test database");
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Enter)),
        vec![decide("ap-1", Decision::Deny, None, Some("use the test database"))]
    );
    // The daemon refused (decided elsewhere first): asked no more as being
    // decided, the notice says why, escaped.
    let refused = kd_client::ClientError::from(jsonrpsee::core::client::Error::Call(
        jsonrpsee::types::ErrorObjectOwned::owned(1009, "approval ap-1 is approved already\x1b[2J", None::<()>),
    ));
    on_reply(&mut app, Reply::Decided("ap-1".into(), Err(refused)));
    assert!(app.notice.as_deref().unwrap().contains("approved already␛[2J"), "{:?}", app.notice);
    assert_eq!(app.asked().map(|a| a.id.as_str()), Some("ap-1"));
}

#[test]
fn the_keys_never_eat_the_kings_typing() {
    let mut app = asking();
    typed(&mut app, "now");
    app.apply(&requested(&asks("ap-1", "claude", "r1", "touch /repo/x", 10)));
    // Typing goes on: y, n and Esc are what they always are.
    typed(&mut app, " yes and no");
    assert_eq!(app.input.lines(), ["now yes and no"]);
    let s = screen(&mut app, 120, 20);
    assert!(
        status(&s, 20).contains("claude asks (ap-1): empty the input to answer y/n, or /approve · /deny it"),
        "{s}"
    );
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![Effect::Interrupt]);
    // Emptied: the keys answer; Esc leaves it for later, not an interrupt.
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    assert!(app.input.is_empty());
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![]);
    assert_eq!(app.asked(), None);
    assert_eq!(app.notice.as_deref(), Some("ap-1 left for later: /approvals lists it again"));
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('n'))), vec![]);
    assert_eq!(app.input.lines(), ["n"], "left for later: n types");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![Effect::Interrupt]);
    // Other keys type even while asked.
    let mut app = asking();
    app.apply(&requested(&asks("ap-1", "claude", "r1", "touch /repo/x", 10)));
    typed(&mut app, "hello");
    assert_eq!(app.input.lines(), ["hello"]);
    assert_eq!(app.approvals.deciding.len(), 0);
}

#[test]
fn several_pending_are_asked_oldest_first_and_the_others_counted() {
    let mut app = asking();
    app.apply(&requested(&asks("ap-2", "codex", "r2", "curl example.org", 20)));
    app.apply(&requested(&asks("ap-1", "claude", "r1", "touch /repo/x", 10)));
    app.apply(&requested(&asks("ap-1", "claude", "r1", "touch /repo/x", 10)));
    assert_eq!(app.asked().map(|a| a.id.as_str()), Some("ap-1"));
    let s = screen(&mut app, 120, 24);
    assert!(status(&s, 24).contains("Esc later · 1 more pending"), "{s}");
    assert_eq!(s.matches("asks to execute").count(), 2, "each in its member's panel:\n{s}");
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Char('y'))),
        vec![decide("ap-1", Decision::Approve, Some(Scope::Once), None)]
    );
    assert_eq!(app.asked().map(|a| a.id.as_str()), Some("ap-2"));
    let s = screen(&mut app, 120, 24);
    assert!(status(&s, 24).contains("codex asks: y allow once") && !s.contains("more pending"), "{s}");
}

#[test]
fn decided_elsewhere_the_prompt_goes_and_the_panel_says_how() {
    let mut app = asking();
    let a = asks("ap-1", "claude", "r1", "touch /repo/x", 10);
    let b = asks("ap-2", "codex", "r2", "curl example.org", 20);
    app.apply(&requested(&a));
    app.apply(&requested(&b));
    // Another client denies the first, the policy's timeout ends the second.
    app.apply(&decided_event(&decided(&a, ApprovalState::Denied, Some(DecidedBy::King), Some("not this one"))));
    assert_eq!(app.asked().map(|a| a.id.as_str()), Some("ap-2"));
    app.apply(&decided_event(&decided(&b, ApprovalState::Expired, Some(DecidedBy::Timeout), Some("nobody answered"))));
    assert_eq!(app.asked(), None);
    assert!(app.approvals.pending.is_empty());
    // The answer comes: the panel keeps how its run's approval ended.
    app.apply(&ThreadEvent::Message { message: Box::new(answer(2, "claude", "I could not touch it.", "r1", 1)) });
    assert_eq!(app.kinds()[1], ("claude".into(), Kind::Answer));
    insta::assert_snapshot!(screen(&mut app, 80, 20));
    // A late request of a decided one is not asked again.
    app.apply(&requested(&a));
    assert_eq!(app.asked(), None);
    // Approved: said so with its scope.
    let mut app = asking();
    app.apply(&requested(&a));
    let mut ok = decided(&a, ApprovalState::Approved, Some(DecidedBy::King), None);
    ok.scope = Some(Scope::Run);
    on_reply(&mut app, Reply::Decided("ap-1".into(), Ok(ok)));
    assert_eq!(app.notice.as_deref(), Some("ap-1: approved by king, for the rest of the run"));
    let s = screen(&mut app, 100, 20);
    assert!(s.contains("✓ execute: touch /repo/x — approved by king, for the rest of the run"), "{s}");
    assert!(!s.contains("asks"), "{s}");
}

#[test]
fn pending_ones_listed_on_open_are_shown_once_their_panel_comes() {
    let mut app = App::new(thread());
    app.load(thread(), &[message(1, "king", MessageKind::King, "Touch the file.", None)]);
    let a = asks("ap-1", "claude", "r1", "touch /repo/x", 10);
    let mut elsewhere = a.clone();
    elsewhere.thread = "other1".into();
    elsewhere.id = "ap-9".into();
    app.set_approvals(&[elsewhere, a.clone()]);
    assert_eq!(app.approvals.pending.len(), 1, "only this thread's");
    assert_eq!(app.asked().map(|a| a.id.as_str()), Some("ap-1"), "asked before its panel is there");
    // The subscription's snapshot brings the run waiting on it.
    app.apply(&ThreadEvent::RunWaiting { run: RunInfo { status: RunStatus::Waiting, ..run_at("r1", "claude", 1) } });
    let s = screen(&mut app, 100, 20);
    assert!(
        s.contains("claude ── waits for your approval") && s.contains("⚠ claude asks to execute (Bash) · ap-1"),
        "{s}"
    );
    // Reconnected: the log is loaded again and the list no longer has it
    // (decided meanwhile): nothing asks.
    app.load(thread(), &[message(1, "king", MessageKind::King, "Touch the file.", None)]);
    app.apply(&ThreadEvent::RunWaiting { run: run_at("r1", "claude", 1) });
    assert!(screen(&mut app, 100, 20).contains("asks to execute"), "still pending until the list says");
    app.set_approvals(&[]);
    assert_eq!(app.asked(), None);
    assert!(!screen(&mut app, 100, 20).contains("asks to execute"));
}

#[test]
fn what_an_agent_wrote_is_escaped_before_the_terminal() {
    let mut app = asking();
    let mut a = asks("ap-1", "claude", "r1", "printf '\x1b]0;owned\x07'\nrm -rf /tmp/x", 10);
    a.tool.name = Some("Ba\x1b[2Jsh".into());
    a.tool.reason = Some("because\x1b[31m".into());
    app.apply(&requested(&a));
    let s = screen(&mut app, 100, 24);
    assert!(!s.contains('\x1b') && !s.contains('\x07'), "{s:?}");
    assert!(s.contains("printf '␛]0;owned␇'") && s.contains("  rm -rf /tmp/x"), "{s}");
    assert!(s.contains("(Ba␛[2Jsh)") && s.contains("why: because␛[31m"), "{s}");
    app.apply(&decided_event(&decided(&a, ApprovalState::Denied, Some(DecidedBy::King), Some("no\x1b[2J"))));
    let s = screen(&mut app, 100, 24);
    assert!(!s.contains('\x1b') && s.contains("— denied by king: no␛[2J"), "{s}");
}

#[test]
fn slash_commands_list_approve_and_deny_by_id() {
    let mut app = asking();
    let a = asks("ap-1", "claude", "r1", "touch /repo/x", 10);
    app.apply(&requested(&a));
    keys::on_key(&mut app, key(KeyCode::Esc));
    assert_eq!(app.asked(), None);
    typed(&mut app, "/approvals");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![Effect::ListApprovals]);
    assert_eq!(app.asked().map(|a| a.id.as_str()), Some("ap-1"), "asked again");
    let mut other = asks("ap-7", "gemini", "r9", "npm test", 5);
    other.thread = "k2m9p4".into();
    on_reply(&mut app, Reply::Approvals(Ok(vec![a.clone(), other])));
    assert!(matches!(&app.overlay, Some(Overlay::Approvals(l)) if l.len() == 2));
    let s = screen(&mut app, 100, 24);
    assert!(s.contains("  ap-7  k2m9p4  gemini  execute: npm test"), "{s}");
    assert!(s.contains(&format!("● ap-1  {THREAD}  claude  execute: touch /repo/x")), "{s}");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('y'))), vec![], "any key closes the list, deciding nothing");
    assert_eq!(app.overlay, None);
    on_reply(&mut app, Reply::Approvals(Ok(vec![])));
    assert_eq!((app.overlay.as_ref(), app.notice.as_deref()), (None, Some("no approval is pending")));
    typed(&mut app, "/approve ap-7 thread");
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Enter)),
        vec![decide("ap-7", Decision::Approve, Some(Scope::Thread), None)]
    );
    typed(&mut app, "/deny ap-1 not now");
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Enter)),
        vec![decide("ap-1", Decision::Deny, None, Some("not now"))]
    );
    typed(&mut app, "/approve ap-1 always");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    assert!(app.notice.as_deref().unwrap().contains("once, run or thread"));
}
