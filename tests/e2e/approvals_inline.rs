//! The King answers an approval without leaving the command (issue 33):
//! `kd ask` and `kd work`, in a real terminal (tmux), say what a member
//! waits for and take `y`, `a` or `n`. The fake claude asks through kd's
//! permission prompt tool as captured (shared/captures/approvals).

use kd_client::prelude::*;
use kd_proto::approval::{ApprovalEvent, ApprovalState, DecidedBy, Scope};
use kd_tests::tmux::Tmux;
use kd_tests::{Kdd, Workspace, bin, fake};
use serde_json::json;

/// A council of claude alone, which asks (`FAKE_PERMISSION`) to run
/// `touch <path>`.
fn asks_to_touch(ws: &Workspace, path: &str) {
    let asked = json!({"tool_name": "Bash", "input": {"command": format!("touch {path}"), "description": "touch it"}});
    let asked = asked.to_string();
    ws.write_config(&json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": fake("claude", "claude", &[("FAKE_PERMISSION", asked.as_str())])},
    }));
}

/// Whether the command's exit status is on the screen (not only in the
/// command line that asks for it).
fn ended(screen: &str) -> bool {
    screen.match_indices("exit=").any(|(i, _)| screen[i + 5..].starts_with(|c: char| c.is_ascii_digit()))
}

/// A terminal in `ws` whose shell runs the real `kd` of `kdd` with `args`.
async fn kd_in_a_terminal(dir: &std::path::Path, ws: &Workspace, kdd: &Kdd, args: &str) -> Tmux {
    let tmux = Tmux::start(dir, ws.dir.path());
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!(
        "KD_NO_AUTOSTART=1 {} --socket {} {args}; echo exit=$?",
        bin("kd").display(),
        kdd.socket.display()
    ));
    tmux
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_shows_the_approval_and_y_lets_the_tool_run() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[]);
    let file = ws.file("x-inline");
    asks_to_touch(&ws, &file);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let tmux = kd_in_a_terminal(dir.path(), &ws, &kdd, "ask 'Touch the file.'").await;
    let screen = tmux.wait_for("the approval asked", |s| s.contains("n deny")).await;
    assert!(screen.contains(&format!("claude asks to run: touch {file}")), "{screen}");
    assert!(screen.contains("y allow · a allow for the rest of its run · n deny"), "{screen}");
    let pending = c.approval_list(None, None, None).await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(screen.contains(&format!("[{}]", pending[0].id)), "its id is named:\n{screen}");
    assert!(!std::path::Path::new(&file).exists(), "nothing runs before the King says so");

    tmux.send_keys(&["y"]);
    let screen = tmux.wait_for("the command's end", ended).await;
    assert!(screen.contains("exit=0"), "{screen}");
    assert!(screen.contains(&format!("kd: {} claude approved by king", pending[0].id)), "{screen}");
    assert!(screen.contains("allowed, ran touch"), "the answer says the tool ran:\n{screen}");
    assert!(std::path::Path::new(&file).exists(), "the approved command ran");
    let all = c.approval_list(Some(true), None, None).await.unwrap();
    assert_eq!(
        (all[0].state, all[0].decided_by, all[0].scope),
        (ApprovalState::Approved, Some(DecidedBy::King), Some(Scope::Once))
    );
    // The terminal is given back as it was: what is typed is echoed again.
    tmux.send_keys(&["-l", "echo visible"]);
    tmux.wait_for("echo back on", |s| s.contains("$ echo visible")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_without_a_terminal_says_how_to_answer() {
    let ws = Workspace::new(&[]);
    let file = ws.file("x-piped");
    asks_to_touch(&ws, &file);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let mut asked = c.approval_subscribe().await.unwrap();
    let mut ask = kdd.kd();
    ask.current_dir(ws.dir.path())
        .args(["ask", "Touch the file."])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let ask = ask.spawn().unwrap();
    let id = match asked.next().await {
        Some(Ok(ApprovalEvent::Requested { approval })) => approval.id,
        other => panic!("an approval requested, not {other:?}"),
    };
    let denied = kdd.kd().args(["deny", &id, "-m", "not now"]).output().await.unwrap();
    assert!(denied.status.success());
    let out = ask.wait_with_output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("answer with: kd approve {id} · kd deny {id}")), "{err}");
    assert!(err.contains(&format!("kd: {id} claude denied by king: not now")), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("denied: not now"));
    assert!(!std::path::Path::new(&file).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_work_takes_n_and_the_member_is_told_no() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let file = ws.file("x-work");
    asks_to_touch(&ws, &file);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let tmux = kd_in_a_terminal(dir.path(), &ws, &kdd, "work 'Touch the file.'").await;
    tmux.wait_for("the approval asked", |s| s.contains("n deny")).await;
    tmux.send_keys(&["n"]);
    let screen = tmux.wait_for("the command's end", ended).await;
    assert!(screen.contains("claude denied by king"), "{screen}");
    assert!(!std::path::Path::new(&file).exists());
    let all = c.approval_list(Some(true), None, None).await.unwrap();
    assert_eq!((all[0].state, all[0].decided_by), (ApprovalState::Denied, Some(DecidedBy::King)));
}

/// A council of claude alone that writes `b.txt` in its worktree (a later
/// run adds a line) and then asks to run `touch <path>`; a check that passes.
fn writes_then_asks_to_touch(ws: &Workspace, path: &str) {
    let asked = json!({"tool_name": "Bash", "input": {"command": format!("touch {path}"), "description": "touch it"}});
    let asked = asked.to_string();
    let run = "if test -f .git; then if test -f b.txt; then echo revised >> b.txt; else echo new > b.txt; fi; fi";
    let env = [("FAKE_RUN", run), ("FAKE_PERMISSION", asked.as_str())];
    ws.write_config(&json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": fake("claude", "claude", &env)},
        "work": {"check": ["true"]},
    }));
}

/// `kd work --async`, its approval denied by another client, its work
/// committed and checked; then a pending comment on it. Returns the thread.
async fn at_work_with_a_comment(kdd: &Kdd, ws: &Workspace) -> String {
    let c = kdd.client().await;
    let mut asked = c.approval_subscribe().await.unwrap();
    let out = kdd.kd().current_dir(ws.dir.path()).args(["work", "--async", "Write b.txt"]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let thread = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut sub = c.thread_subscribe(thread.clone(), Some(0), None).await.unwrap();
    let id = loop {
        if let Some(Ok(ApprovalEvent::Requested { approval })) = asked.next().await {
            break approval.id;
        }
    };
    c.approval_decide(id, kd_proto::approval::Decision::Deny, None, None).await.unwrap();
    kd_tests::collect_until(&mut sub, |events| {
        events.iter().any(|e| {
            matches!(e, kd_proto::types::ThreadEvent::Work { worktree }
                if worktree.check.as_ref().is_some_and(|c| c.status == kd_proto::work::CheckStatus::Pass))
        })
    })
    .await;
    let out = kdd.kd().current_dir(ws.dir.path()).args(["comment", "claude", "b.txt:1", "say more"]).output();
    let out = out.await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    thread
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_review_send_asks_inline_takes_n_and_follows_the_revision_to_its_check() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let file = ws.file("x-review");
    writes_then_asks_to_touch(&ws, &file);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let thread = at_work_with_a_comment(&kdd, &ws).await;
    let tmux = kd_in_a_terminal(dir.path(), &ws, &kdd, "review --send claude --message 'Please.'").await;
    let screen = tmux.wait_for("the approval asked", |s| s.contains("n deny")).await;
    assert!(screen.contains(&format!("claude asks to run: touch {file}")), "{screen}");
    tmux.send_keys(&["n"]);
    let screen = tmux.wait_for("the command's end", ended).await;
    assert!(screen.contains("exit=0"), "{screen}");
    assert!(screen.contains("claude denied by king"), "{screen}");
    assert!(screen.contains(&format!("claude  done  1 file, +2 −0  check pass  kd/{thread}/claude")), "{screen}");
    assert!(screen.contains("comments resolved by its commit"), "{screen}");
    assert!(!std::path::Path::new(&file).exists());
    let all = c.approval_list(Some(true), None, None).await.unwrap();
    assert!(all.iter().all(|a| a.state == ApprovalState::Denied), "{all:?}");
    assert_eq!(all.iter().filter(|a| a.decided_by == Some(DecidedBy::King)).count(), 2, "{all:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_review_send_async_returns_at_once_saying_how_to_follow() {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let file = ws.file("x-review-async");
    writes_then_asks_to_touch(&ws, &file);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let thread = at_work_with_a_comment(&kdd, &ws).await;
    let mut asked = c.approval_subscribe().await.unwrap();
    // It returns while claude waits on the King: nothing follows the run.
    let out = kdd.kd().current_dir(ws.dir.path()).args(["review", "--send", "claude", "--async"]).output();
    let out = out.await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), thread);
    assert!(err.contains("sent 1 comment to claude"), "{err}");
    assert!(err.contains(&format!("kd watch {thread}")), "{err}");
    let approval = loop {
        if let Some(Ok(ApprovalEvent::Requested { approval })) = asked.next().await {
            break approval;
        }
    };
    assert!(err.contains(approval.run.as_deref().unwrap()), "the run is named: {err}");
    assert_eq!(c.approval_list(None, None, None).await.unwrap().len(), 1, "still pending: nobody answered it");
}
