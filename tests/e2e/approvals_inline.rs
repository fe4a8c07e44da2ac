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
