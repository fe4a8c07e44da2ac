//! `kd chat` in a real terminal: tmux runs the TUI against a real kdd with
//! fake agents; the test types with `send-keys` and reads the screen with
//! `capture-pane`.

use jsonrpsee::core::client::Subscription;
use kd_client::prelude::*;
use kd_proto::types::{RoundState, ThreadEvent};
use kd_tests::tmux::Tmux;
use kd_tests::{Kdd, Workspace, bin, collect_until, records};

/// Waits for the end of the exchange in progress; returns its events.
async fn exchange_end(sub: &mut Subscription<ThreadEvent>) -> Vec<ThreadEvent> {
    collect_until(sub, |events| {
        events.iter().any(|e| matches!(e, ThreadEvent::Round { state: RoundState::Done | RoundState::Stopped, .. }))
    })
    .await
}

/// How many runs among `events` have begun (their agents started).
fn started(events: &[ThreadEvent]) -> usize {
    events.iter().filter(|e| matches!(e, ThreadEvent::RunStarted { .. })).count()
}

fn text(name: &str) -> String {
    format!("## Notes from {name}\n\n- **ship** it\n- `cargo test` first")
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_in_a_real_terminal_streams_mutes_interrupts_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let hold = dir.path().join("hold");
    let hold_s = hold.display().to_string();
    let rec = |name: &str| dir.path().join(format!("{name}.jsonl")).display().to_string();
    let (claude, codex, gemini) = (text("claude"), text("codex"), text("gemini"));
    let env = |name: &str, body: &str| -> Vec<(String, String)> {
        vec![
            ("FAKE_TEXT".into(), body.into()),
            ("FAKE_DELTAS".into(), "6".into()),
            ("FAKE_HOLD".into(), hold_s.clone()),
            ("FAKE_RECORD".into(), rec(name)),
        ]
    };
    let envs = [env("claude", &claude), env("codex", &codex), env("gemini", &gemini)];
    let refs: Vec<Vec<(&str, &str)>> =
        envs.iter().map(|e| e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()).collect();
    let ws = Workspace::new(&[
        ("claude", "claude", refs[0].as_slice()),
        ("codex", "codex", refs[1].as_slice()),
        ("gemini", "gemini", refs[2].as_slice()),
    ]);
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    config["council"]["auto_rounds"] = 1.into();
    ws.write_config(&config);

    let kdd = Kdd::start();
    let c = kdd.client().await;
    let thread = c.thread_create(ws.path(), None, None, None, None, None, None, Some(true), None).await.unwrap();
    let mut sub = c.thread_subscribe(thread.id.clone(), Some(0), None).await.unwrap();

    // Another client starts a (held) exchange before the chat opens.
    std::fs::write(&hold, b"").unwrap();
    c.council_send(thread.id.clone(), "Started elsewhere.".into(), None, None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    let streaming = |e: &[ThreadEvent]| {
        let members: std::collections::HashSet<&str> = e
            .iter()
            .filter_map(|e| match e {
                ThreadEvent::Delta { member, .. } => Some(member.as_str()),
                _ => None,
            })
            .collect();
        members.len() == 3
    };
    collect_until(&mut sub, streaming).await;

    let tmux = Tmux::start(dir.path(), ws.dir.path());
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!(
        "KD_NO_AUTOSTART=1 {} --socket {} chat {}",
        bin("kd").display(),
        kdd.socket.display(),
        thread.id
    ));
    // Runs started elsewhere are picked up mid-stream.
    tmux.wait_for("the chat header", |s| s.contains("kd chat") && s.contains(&thread.id)).await;
    assert_eq!(tmux.display("#{alternate_on}"), "1", "the chat runs on the alternate screen");
    let screen = tmux.wait_for("runs in flight", |s| s.matches("(streaming · ").count() == 3).await;
    assert!(screen.contains("Started elsewhere."), "the history is shown:\n{screen}");
    std::fs::remove_file(&hold).unwrap();
    exchange_end(&mut sub).await;
    tmux.wait_for("their answers", |s| !s.contains("(streaming · ") && s.contains("Notes from gemini")).await;

    // Broadcast: a panel per member, held mid-stream. Every member streams
    // tokens, codex through its app-server.
    std::fs::write(&hold, b"").unwrap();
    tmux.type_line("Plan the release.");
    let screen = tmux.wait_for("streaming panels", |s| s.matches("(streaming · ").count() == 3).await;
    for name in ["claude", "codex", "gemini"] {
        assert!(screen.contains(&format!("{name} (streaming · ")), "{name} streams:\n{screen}");
    }
    // (The header is cut at the terminal's width.)
    assert!(screen.contains("streaming: claude, codex"), "the header says who streams:\n{screen}");
    assert!(screen.contains('▍'), "a streaming cursor:\n{screen}");
    assert!(screen.contains("## Notes"), "streaming text is shown raw:\n{screen}");

    // Let them finish: the panels become Markdown.
    std::fs::remove_file(&hold).unwrap();
    exchange_end(&mut sub).await;
    let screen = tmux
        .wait_for("finalized Markdown panels", |s| !s.contains("(streaming · ") && s.contains("Notes from gemini"))
        .await;
    assert!(!screen.contains("## Notes"), "headings are rendered:\n{screen}");
    assert!(!screen.contains("**ship**"), "emphasis is rendered:\n{screen}");
    assert!(screen.contains("ship it"), "{screen}");
    let asked = |name: &str| records(&rec(name)).len();
    assert_eq!(
        (asked("claude"), asked("codex"), asked("gemini")),
        (3, 3, 3),
        "one elsewhere, one broadcast, one auto-round"
    );

    // /mute codex, then send again: codex is not asked.
    tmux.type_line("/mute codex");
    tmux.wait_for("the mute notice", |s| s.contains("codex is muted")).await;
    tmux.type_line("Again, without codex.");
    exchange_end(&mut sub).await;
    assert_eq!((asked("claude"), asked("codex"), asked("gemini")), (5, 3, 5), "codex is muted");

    // A slow stream, then Esc: the runs are cancelled and the panels say so.
    std::fs::write(&hold, b"").unwrap();
    tmux.type_line("Take your time.");
    // Both runs under way before Esc: a run stopped before it began leaves
    // no trace, and the screen may still show the last exchange streaming.
    let mut events = collect_until(&mut sub, |e| started(e) == 2).await;
    tmux.wait_for("two streaming panels", |s| s.matches("(streaming · ").count() == 2).await;
    tmux.send_keys(&["Escape"]);
    events.extend(exchange_end(&mut sub).await);
    let cancelled = events.iter().filter(|e| matches!(e, ThreadEvent::RunCancelled { .. })).count();
    assert_eq!(cancelled, 2, "{events:?}");
    let screen = tmux.wait_for("interrupted panels", |s| s.matches("· interrupted").count() >= 2).await;
    assert!(!screen.contains("(streaming · "), "{screen}");
    std::fs::remove_file(&hold).unwrap();

    // The daemon goes away: a banner; it comes back: the chat resyncs.
    drop(sub);
    let mut kdd = kdd;
    kdd.stop();
    tmux.wait_for("the disconnected banner", |s| s.contains("kdd is not reachable")).await;
    kdd.launch().unwrap();
    let screen = tmux.wait_for("the reconnection", |s| s.contains("reconnected to kdd")).await;
    assert!(!screen.contains("kdd is not reachable"), "{screen}");
    assert!(screen.contains("Take your time."), "the history is back:\n{screen}");

    // /quit waits for this client's runs; Esc then stops them and leaves.
    let c = kdd.client().await;
    let last = c.thread_get(thread.id.clone()).await.unwrap().last_seq;
    let mut sub = c.thread_subscribe(thread.id.clone(), Some(last), None).await.unwrap();
    std::fs::write(&hold, b"").unwrap();
    tmux.type_line("One more.");
    let mut events = collect_until(&mut sub, |e| started(e) == 2).await;
    tmux.wait_for("two streaming panels", |s| s.matches("(streaming · ").count() == 2).await;
    tmux.type_line("/quit");
    tmux.wait_for("the quitting notice", |s| s.contains("quitting when your runs finish")).await;
    assert_eq!(tmux.display("#{alternate_on}"), "1", "/quit waits for the runs");
    tmux.send_keys(&["Escape"]);
    events.extend(exchange_end(&mut sub).await);
    let cancelled = events.iter().filter(|e| matches!(e, ThreadEvent::RunCancelled { .. })).count();
    assert_eq!(cancelled, 2, "Esc during /quit cancels the runs: {events:?}");
    std::fs::remove_file(&hold).unwrap();

    // Leaving puts the terminal back as it was.
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
    assert_restored(&tmux, "0").await;

    // So does SIGTERM.
    tmux.type_line(&format!(
        "KD_NO_AUTOSTART=1 {} --socket {} chat {}",
        bin("kd").display(),
        kdd.socket.display(),
        thread.id
    ));
    tmux.wait_for("the chat header", |s| s.contains("kd chat") && s.contains(&thread.id)).await;
    let kd = tmux.foreground_pid().expect("kd runs under the shell");
    let pid = rustix::process::Pid::from_raw(kd as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM to kd chat");
    tmux.wait_for("the shell after SIGTERM", |_| tmux.display("#{alternate_on}") == "0").await;
    assert_restored(&tmux, "143").await;
}

/// `kd chat` whose output is not a terminal says it needs one, and draws
/// nothing into the pipe (it said "cannot put the terminal in raw mode:
/// No such device or address").
#[tokio::test(flavor = "multi_thread")]
async fn chat_without_a_terminal_says_it_needs_one() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).arg("chat").stdin(std::process::Stdio::null());
    let out = kd_tests::run(kd).await;
    assert_eq!(out.status.code(), Some(1), "{} {}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(out.stderr.contains("kd chat draws on a terminal, and its output is not one"), "{}", out.stderr);
}

/// The shell prompt is back in cooked mode with echo, and kd exited with `code`.
async fn assert_restored(tmux: &Tmux, code: &str) {
    // The screen is cleared first and the end marker is new, so nothing
    // left from an earlier check can match.
    let done = format!("stty-done-{code}");
    tmux.type_line(&format!(
        "x=$?; printf '\\033[H\\033[2J'; echo kd-exit=$x; \
         stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e echo -e -icanon -e -echo; echo {done}"
    ));
    let screen = tmux.wait_for("stty output", |s| s.lines().any(|l| l == done)).await;
    assert!(screen.lines().any(|l| l == format!("kd-exit={code}")), "kd chat exits {code}:\n{screen}");
    let modes: Vec<&str> = screen.lines().filter(|l| matches!(*l, "icanon" | "echo" | "-icanon" | "-echo")).collect();
    assert_eq!(modes, ["icanon", "echo"], "cooked mode and echo are back:\n{screen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_new_makes_its_thread_with_the_first_message_in_the_chosen_context() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Hello back.")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let tmux = Tmux::start(dir.path(), ws.dir.path());
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!(
        "KD_NO_AUTOSTART=1 {} --socket {} chat --new --context resume",
        bin("kd").display(),
        kdd.socket.display()
    ));
    tmux.wait_for("the chat header", |s| s.contains("kd chat") && s.contains("· resume")).await;
    assert!(c.thread_list(None, None, None).await.unwrap().is_empty(), "no thread until something is said");
    tmux.type_line("Hello there.");
    tmux.wait_for("the answer", |s| s.contains("Hello back.")).await;
    let threads = c.thread_list(None, None, None).await.unwrap();
    assert_eq!(threads.len(), 1);
    assert_eq!(threads[0].context, kd_proto::types::ContextMode::Resume);
    assert_eq!(c.thread_current(ws.path(), None).await.unwrap().map(|t| t.id), Some(threads[0].id.clone()));
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// F-B4 in the chat: /archive and /unarchive, and /delete after a y at its
/// question (issue 21 item 12).
#[tokio::test(flavor = "multi_thread")]
async fn the_chat_archives_unarchives_and_deletes_its_thread_after_asking() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    kd_tests::append(&c, &t, "king", "Keep this for a while.", &[]).await;
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 30);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat {t}", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the chat header", |s| s.contains("kd chat") && s.contains(&t)).await;

    tmux.type_line("/archive");
    tmux.wait_for("the archived notice", |s| s.contains("archived:")).await;
    assert_eq!(c.thread_get(t.clone()).await.unwrap().status, kd_proto::types::ThreadStatus::Archived);
    tmux.type_line("/unarchive");
    tmux.wait_for("the unarchived notice", |s| s.contains("takes messages again")).await;
    assert_eq!(c.thread_get(t.clone()).await.unwrap().status, kd_proto::types::ThreadStatus::Active);

    tmux.type_line("/delete");
    tmux.wait_for("the question", |s| s.contains(&format!("Delete thread {t}"))).await;
    tmux.send_keys(&["n"]);
    tmux.wait_for("kept", |s| s.contains(&format!("kept thread {t}"))).await;
    assert!(c.thread_get(t.clone()).await.is_ok(), "n keeps it");
    tmux.type_line("/delete");
    tmux.wait_for("the question again", |s| s.contains(&format!("Delete thread {t}"))).await;
    tmux.send_keys(&["y"]);
    tmux.wait_for("the deleted notice and the thread picker", |s| {
        s.contains(&format!("deleted thread {t}")) && s.contains("+ new thread")
    })
    .await;
    assert!(c.thread_get(t.clone()).await.is_err(), "deleted");
    // Enter on "+ new thread"; the picker closes before anything else is typed
    // (a key right after Esc would read as Alt+key).
    tmux.send_keys(&["Enter"]);
    tmux.wait_for("the picker closed", |s| !s.contains("+ new thread")).await;
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// `/work` in the chat (issue 23): work.start for the chat's workspace, and
/// the chat opens the task's thread, where each member's panel carries its
/// work's stat; `/diff` opens a member's diff. The members write nothing,
/// so what is shown does not depend on kd committing their work.
#[tokio::test(flavor = "multi_thread")]
async fn work_in_the_chat_opens_the_tasks_thread_with_each_members_work() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Claude looked at x.")]),
        ("codex", "codex", &[("FAKE_TEXT", "Codex looked at x.")]),
    ]);
    let repo = ws.dir.path();
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let tmux = Tmux::start_sized(dir.path(), repo, 120, 40);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat --new", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the chat header", |s| s.contains("kd chat")).await;
    tmux.type_line("/work Write x");
    tmux.wait_for("the work notice", |s| s.contains(" at work, each in its own worktree")).await;
    let trees = c.work_list(Some(ws.path()), None).await.unwrap();
    let mut members: Vec<&str> = trees.iter().map(|w| w.member.as_str()).collect();
    members.sort();
    assert_eq!(members, ["claude", "codex"], "{trees:?}");
    let thread = trees[0].thread.clone();
    assert_eq!(c.thread_get(thread.clone()).await.unwrap().title.as_deref(), Some("Write x"));
    let screen = tmux
        .wait_for("the task's thread, its answers and each member's work", |s| {
            s.contains(&format!("kd chat · {thread}"))
                && s.contains("Claude looked at x.")
                && s.contains("Codex looked at x.")
                && s.matches("└─ no changes · ").count() == 2
        })
        .await;
    assert!(screen.contains("Write x"), "the King's message gives the task: {screen}");
    tmux.type_line("/diff codex");
    tmux.wait_for("codex's diff", |s| {
        s.contains("diff · codex · no changes · ") && s.contains(&format!("no changes on kd/{thread}/codex yet"))
    })
    .await;
    tmux.send_keys(&["q"]);
    tmux.wait_for("the diff closed", |s| !s.contains("diff · codex")).await;
    tmux.type_line("/diff gemini");
    tmux.wait_for("the notice", |s| s.contains("gemini has no work on this thread")).await;
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// The chat does what the CLI does (issue 31 item 5): `/vote` and
/// `/synthesize` run a completion on the chat's thread (its panels, ballots
/// and tally in the log), `/cost` says what the thread cost, and Ctrl+U
/// clears the line being typed.
#[tokio::test(flavor = "multi_thread")]
async fn the_chat_votes_synthesizes_and_says_what_the_thread_cost() {
    let dir = tempfile::tempdir().unwrap();
    let rules = |ranking: &str| {
        serde_json::json!([
            ["[Evaluation]", format!("Fine.\nFINAL RANKING:\n1. {{label:{ranking}}}")],
            ["[Synthesis]", "Chair: use a lock."]
        ])
        .to_string()
    };
    let (a, b) = (rules("Use a lock."), rules("Use a queue."));
    // Both speak claude's format, which reports a cost.
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Use a queue."), ("FAKE_RULES", &a)]),
        ("codex", "claude", &[("FAKE_TEXT", "Use a lock."), ("FAKE_RULES", &b)]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 60);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat {t}", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the chat header", |s| s.contains("kd chat") && s.contains(&t)).await;

    tmux.send_keys(&["-l", "a typo here"]);
    tmux.wait_for("the typed line", |s| s.contains("a typo here")).await;
    tmux.send_keys(&["C-u"]);
    tmux.wait_for("the line cleared", |s| !s.contains("a typo")).await;

    tmux.type_line("/vote Queue or lock?");
    let screen = tmux
        .wait_for("the tally and the vote's notice", |s| s.contains("Vote: tie between") && s.contains("vote: tie"))
        .await;
    assert!(screen.contains("Queue or lock?") && screen.contains("· ballot"), "{screen}");
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let purposes = messages.iter().filter_map(|m| m.purpose).collect::<Vec<_>>();
    assert_eq!(purposes.len(), 3, "two ballots and the tally: {messages:?}");

    tmux.type_line("/synthesize claude Which, then?");
    // Its end said (the chair's text shows as it streams, before the run
    // and its cost are written; the end's notice would also take the
    // place of `/cost`'s).
    tmux.wait_for("the synthesis", |s| {
        s.contains("claude · synthesis") && s.contains("Chair: use a lock.") && s.contains("synthesis by claude")
    })
    .await;

    tmux.type_line("/cost");
    let cost = c.cost_report(Some(t.clone()), None, None, None).await.unwrap();
    let said = format!("cost ${:.4}", cost.total.cost_usd);
    assert!(cost.total.cost_usd > 0.0, "{cost:?}");
    tmux.wait_for("the cost", |s| s.contains(&said) && s.contains("claude $") && s.contains("codex $")).await;
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// Runs another client started (`kd ask --async`) are shown in the chat;
/// Esc leaves them (they are not the chat's), `/cancel` stops them after
/// asking (issue 31 item 5).
#[tokio::test(flavor = "multi_thread")]
async fn the_chat_cancels_runs_it_did_not_start_after_asking() {
    let dir = tempfile::tempdir().unwrap();
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_HOLD", hold.var()), ("FAKE_TEXT", "Done at last.")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    let mut ask = kdd.kd();
    ask.current_dir(ws.dir.path()).args(["ask", "--thread", &t, "--async", "Take your time."]);
    let out = kd_tests::run(ask).await;
    assert!(out.status.success(), "{}", out.stderr);
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 30);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat {t}", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the run started elsewhere", |s| s.contains("claude (streaming · ")).await;

    tmux.send_keys(&["Escape"]);
    tmux.wait_for("Esc's notice", |s| s.contains("nothing of yours was running")).await;
    assert_eq!(c.run_list(Some(t.clone())).await.unwrap().len(), 1, "Esc stops only the chat's own runs");

    tmux.type_line("/cancel");
    tmux.wait_for("the question", |s| s.contains("Stop 1 run started elsewhere (claude)?")).await;
    tmux.send_keys(&["n"]);
    tmux.wait_for("kept", |s| s.contains("kept the runs")).await;
    assert_eq!(c.run_list(Some(t.clone())).await.unwrap().len(), 1, "n keeps them");

    tmux.type_line("/cancel");
    tmux.wait_for("the question again", |s| s.contains("Stop 1 run started elsewhere (claude)?")).await;
    tmux.send_keys(&["y"]);
    tmux.wait_for("the run cancelled", |s| s.contains("cancelled claude") && s.contains("· interrupted")).await;
    assert!(c.run_list(Some(t.clone())).await.unwrap().is_empty());
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// `/vote` as the first thing said in `kd chat --new` makes the thread (the
/// one the chat shows) and votes there.
#[tokio::test(flavor = "multi_thread")]
async fn a_vote_in_a_new_chat_makes_its_thread_first() {
    let dir = tempfile::tempdir().unwrap();
    let rules = |ranking: &str| {
        serde_json::json!([["[Evaluation]", format!("FINAL RANKING:\n1. {{label:{ranking}}}")]]).to_string()
    };
    // claude ranks codex's answer first; codex has nothing it can rank.
    let (a, b) = (rules("Use a lock."), rules("Use a lock."));
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_TEXT", "Use a queue."), ("FAKE_RULES", &a)]),
        ("codex", "codex", &[("FAKE_TEXT", "Use a lock."), ("FAKE_RULES", &b)]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 50);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat --new", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the chat header", |s| s.contains("kd chat")).await;
    tmux.type_line("/vote Queue or lock?");
    tmux.wait_for("the tally and its notice", |s| {
        s.matches("broken by first places (codex has 1): codex wins.").count() == 2
    })
    .await;
    let threads = c.thread_list(None, None, None).await.unwrap();
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(c.thread_current(ws.path(), None).await.unwrap().map(|t| t.id), Some(threads[0].id.clone()));
    tmux.type_line("Thanks.");
    tmux.wait_for("the next answers", |s| s.contains("Thanks.")).await;
    assert_eq!(c.thread_list(None, None, None).await.unwrap().len(), 1, "the same thread");
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// `/fork` in the chat opens the branch, whose bundle carries the
/// conversation the chat was showing (issue 31 item 3); `--carry none`
/// gives only the bundle's files.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_in_the_chat_opens_the_branch_carrying_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "Shard by tenant.")])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "How do we scale orders?").await;
    kd_tests::within("the answer", async {
        while c.thread_get(t.clone()).await.unwrap().last_seq < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 40);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat {t}", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the chat", |s| s.contains("kd chat") && s.contains("Shard by tenant.")).await;
    tmux.type_line("/fork Try tenants");
    let screen =
        tmux.wait_for("the branch", |s| s.contains(&format!("forked from {t}")) && s.contains("kd · bundle")).await;
    assert!(screen.contains(&format!("conversation of thread {t}, up to #2")), "{screen}");
    assert!(
        screen.contains("king: How do we scale orders?") && screen.contains("claude: Shard by tenant."),
        "{screen}"
    );
    let branch = c.thread_current(ws.path(), None).await.unwrap().unwrap();
    assert_eq!((branch.parent.as_deref(), branch.title.as_deref()), (Some(t.as_str()), Some("Try tenants")));
    assert!(screen.contains(&format!("kd chat · {}", branch.id)), "the branch is open: {screen}");

    tmux.type_line("/fork --carry none");
    tmux.wait_for("the second branch", |s| s.contains(&format!("forked from {}", branch.id))).await;
    let bare = c.thread_current(ws.path(), None).await.unwrap().unwrap();
    assert_eq!(bare.parent.as_deref(), Some(branch.id.as_str()));
    assert_eq!(bare.last_seq, 0, "no bundle files, nothing carried: {bare:?}");
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// A vote asked in the chat is the chat's: Esc stops its runs, though the
/// daemon runs it on a connection of its own.
#[tokio::test(flavor = "multi_thread")]
async fn esc_stops_the_runs_of_a_vote_asked_in_the_chat() {
    let dir = tempfile::tempdir().unwrap();
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[
        ("claude", "claude", &[("FAKE_HOLD", hold.var()), ("FAKE_TEXT", "Use a queue.")]),
        ("codex", "codex", &[("FAKE_HOLD", hold.var()), ("FAKE_TEXT", "Use a lock.")]),
    ]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 40);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat {t}", bin("kd").display(), kdd.socket.display()));
    tmux.wait_for("the chat header", |s| s.contains("kd chat") && s.contains(&t)).await;
    tmux.type_line("/vote Queue or lock?");
    tmux.wait_for("both answering", |s| s.matches("(streaming · ").count() == 2).await;
    assert_eq!(c.run_list(Some(t.clone())).await.unwrap().len(), 2);
    tmux.send_keys(&["Escape"]);
    let screen = tmux.wait_for("the vote stopped", |s| s.matches("· interrupted").count() == 2).await;
    assert!(!screen.contains("nothing of yours was running"), "{screen}");
    assert!(c.run_list(Some(t.clone())).await.unwrap().is_empty(), "no run left");
    tmux.wait_for("the vote's end", |s| s.contains("no vote: too few answers · 0 of 2 answered · 2 failed")).await;
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// Approvals in the chat (issue 33): the fake claude asks kd's permission
/// tool to run `touch FILE` at every answer. One asked before the chat
/// opens is listed when it opens; `n` denies it. One asked while the chat
/// is open: `y` allows it and the tool runs. One decided by another
/// client: the prompt goes and the panel says how.
#[tokio::test(flavor = "multi_thread")]
async fn the_king_answers_approvals_in_the_chat_and_claudes_tool_runs() {
    use kd_proto::approval::{ApprovalState, DecidedBy, Decision, Scope};
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[]);
    let file = crate::approvals::asking(&ws, "x-chat", serde_json::json!({}));
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    config["council"]["auto_rounds"] = 1.into();
    ws.write_config(&config);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    // This test's subscription is a King's client: the approval waits.
    let mut sub = c.thread_subscribe(t.clone(), Some(0), None).await.unwrap();
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let first = crate::approvals::requested(&mut sub).await;

    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 40);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!("KD_NO_AUTOSTART=1 {} --socket {} chat {t}", bin("kd").display(), kdd.socket.display()));
    let asked = |id: String| {
        let file = file.clone();
        move |s: &str| {
            s.contains(&format!("claude asks to execute (Bash) · {id}"))
                && s.contains(&format!("touch {file}"))
                && s.contains("claude asks: y allow once · a allow for the rest of the run · n deny")
        }
    };
    tmux.wait_for("the approval asked before the chat opened", asked(first.id.clone())).await;
    tmux.send_keys(&["n"]);
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    tmux.wait_for("the denial in claude's panel", |s| {
        s.contains(&format!("✗ execute: touch {file} — denied by king")) && !s.contains("claude asks:")
    })
    .await;
    assert!(!std::path::Path::new(&file).exists(), "denied: the tool did not run");

    tmux.type_line("Touch it now.");
    let second = crate::approvals::requested(&mut sub).await;
    tmux.wait_for("the approval asked in the chat", asked(second.id.clone())).await;
    assert!(!std::path::Path::new(&file).exists(), "nothing runs before the King says so");
    tmux.send_keys(&["y"]);
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    tmux.wait_for("the tool ran and the panel says it was allowed", |s| {
        s.contains("allowed, ran touch") && s.contains("— approved by king, once")
    })
    .await;
    assert!(std::path::Path::new(&file).exists(), "the approved command ran");
    let all = c.approval_list(Some(true), Some(t.clone()), None).await.unwrap();
    let state = |id: &str| all.iter().find(|a| a.id == id).map(|a| (a.state, a.decided_by, a.scope));
    assert_eq!(state(&first.id), Some((ApprovalState::Denied, Some(DecidedBy::King), None)));
    assert_eq!(state(&second.id), Some((ApprovalState::Approved, Some(DecidedBy::King), Some(Scope::Once))));

    // Decided by another client: the prompt goes, the panel says how.
    std::fs::remove_file(&file).unwrap();
    tmux.type_line("Once more.");
    let third = crate::approvals::requested(&mut sub).await;
    tmux.wait_for("the third approval asked", asked(third.id.clone())).await;
    c.approval_decide(third.id.clone(), Decision::Approve, Some(Scope::Run), None).await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    tmux.wait_for("the prompt gone, the panel saying how", |s| {
        s.contains("— approved by king, for the rest of the run") && !s.contains("claude asks:")
    })
    .await;
    assert!(std::path::Path::new(&file).exists(), "approved elsewhere: the command ran");
    tmux.type_line("/quit");
    tmux.wait_for("the shell again", |_| tmux.display("#{alternate_on}") == "0").await;
}
