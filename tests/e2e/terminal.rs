//! Text from agents, imports and workspaces never drives the terminal
//! (issue 9 item 10): control characters are shown, not obeyed, by
//! `kd ask`, `kd show`, `kd threads`, `kd watch`, errors and `kd chat`; a
//! workspace path with control characters is refused like a title.

use kd_client::prelude::*;
use kd_tests::{Kdd, Workspace, bin, collect_until, ended, rpc_post, run, tmux::Tmux};

/// Sets the window title, clears the screen, rings the bell, moves the
/// cursor home with an 8-bit CSI, and overwrites the line.
const HOSTILE: &str = "before \u{1b}]0;pwned\u{7} \u{1b}[2J \u{9b}H \rafter";

/// What kd shows instead: the same characters, visible.
const SHOWN: &str = "before ␛]0;pwned␇ ␛[2J \u{fffd}H ␍after";

fn assert_inert(what: &str, text: &str) {
    for bad in ["\u{1b}]", "\u{1b}[2J", "\u{7}", "\u{9b}", "\r"] {
        assert!(!text.contains(bad), "{what} passed {bad:?} to the terminal:\n{text:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_text_is_shown_not_obeyed_by_ask_show_and_watch() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", HOSTILE), ("FAKE_DELTAS", "7")])]);
    let kdd = Kdd::start();
    let mut ask = kdd.kd();
    ask.current_dir(ws.dir.path()).args(["ask", "--new", "Say it."]);
    let out = run(ask).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_inert("kd ask", &out.stdout);
    assert!(out.stdout.contains(SHOWN), "{:?}", out.stdout);
    let c = kdd.client().await;
    let thread = c.thread_list(None, None, None).await.unwrap().remove(0).id;
    let mut show = kdd.kd();
    show.args(["show", &thread]);
    let out = run(show).await;
    assert_inert("kd show", &out.stdout);
    assert!(out.stdout.contains(SHOWN), "{:?}", out.stdout);
    // Stored as the agent said it: only the display is made safe.
    let stored = c.thread_messages(thread, Some(1), None, None, None).await.unwrap().remove(0).body;
    assert_eq!(stored, HOSTILE);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agents_error_is_shown_not_obeyed() {
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_ERROR", HOSTILE)])]);
    let kdd = Kdd::start();
    let mut ask = kdd.kd();
    ask.current_dir(ws.dir.path()).args(["ask", "--new", "Fail."]);
    let out = run(ask).await;
    assert_inert("kd ask's errors", &out.stderr);
    assert_inert("kd ask's output", &out.stdout);
    assert!(format!("{}{}", out.stdout, out.stderr).contains("␛]0;pwned␇"), "{}{}", out.stdout, out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_with_control_characters_is_refused() {
    let kdd = Kdd::start();
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "thread.create",
        "params": {"workspace": "/tmp/\u{1b}]0;pwned\u{7}"}});
    let v = rpc_post(&kdd.socket, &body.to_string());
    assert_eq!(v["error"]["code"], 1001, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("control characters"), "{v}");
    let import = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "thread.import",
        "params": {"workspace": "/tmp/\u{9b}2J", "messages": []}});
    let v = rpc_post(&kdd.socket, &import.to_string());
    assert_eq!(v["error"]["code"], 1001, "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_chat_shows_agent_text_without_obeying_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "hi \u{1b}]2;pwned\u{7} \u{1b}[2J there")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let tmux = Tmux::start(dir.path(), ws.dir.path());
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    let title_before = tmux.display("#{pane_title}");
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat {t}", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the chat header", |s| s.contains("kd chat")).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    tmux.type_line("Say it.");
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let screen = tmux.wait_for("the answer, visible", |s| s.contains("␛]2;pwned␇ ␛[2J there")).await;
    assert!(screen.contains("kd chat"), "the screen was not cleared:\n{screen}");
    // The agent's escape set no title; kd's own call (issue 33) does: the
    // exchange ended, the title says so.
    let title = kd_tests::within("kd's title", async {
        loop {
            let title = tmux.display("#{pane_title}");
            if title != title_before {
                return title;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(!title.contains("pwned"), "the agent set the title: {title}");
    assert!(title.starts_with("kd: the council answered — "), "{title}");
    // A key puts it back to the chat's own.
    tmux.send_keys(&["x"]);
    tmux.wait_for("the key typed", |s| s.contains('x')).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !tmux.display("#{pane_title}").starts_with("kd chat — ") {
        assert!(std::time::Instant::now() < deadline, "the title stayed {}", tmux.display("#{pane_title}"));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tmux.send_keys(&["BSpace"]);
    tmux.type_line("/quit");
}
