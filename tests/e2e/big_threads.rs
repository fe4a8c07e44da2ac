//! Big threads stay readable (issue 9 item 12): a thread larger than one
//! answer may be is shown, exported and reopened page by page, in the one
//! display order, and `thread.messages` pages by `limit`, `since_seq`,
//! `before_seq` and a byte budget.

use kd_client::prelude::*;
use kd_proto::types::{Message, ThreadEvent};
use kd_tests::{Kdd, Workspace, collect_until, ended, run};

const KIB: usize = 1024;

/// kdd whose answers are at most 1 MiB, and a thread of about 3 MiB: a
/// question and two members answering it, six times over, the first
/// member always finishing last (so display order is not seq order).
async fn big_thread() -> (Kdd, Workspace, String) {
    let big = "word ".repeat(50 * KIB / 5);
    let ws = Workspace::new(&[]);
    let kdd = Kdd::start_with(&["--max-response-bytes", "1048576"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    for i in 0..6 {
        // claude holds its answer until codex's is in (the configuration
        // is read afresh by each send: a new hold each time).
        let hold = kd_tests::Hold::new();
        let claude = kd_tests::fake(
            "claude",
            "claude",
            &[("FAKE_TEXT", &big), ("FAKE_DELTAS", "4"), ("FAKE_HOLD", &hold.env())],
        );
        let codex = kd_tests::fake("codex", "codex", &[("FAKE_TEXT", &big), ("FAKE_DELTAS", "1")]);
        ws.write_config(&serde_json::json!({"council": {"members": ["claude", "codex"]}, "agents": {"claude": claude, "codex": codex}}));
        let body = format!("Question {i}: {}", "why ".repeat(40 * KIB / 4));
        c.council_send(t.clone(), body, None, None, None, None, None, Some(0), None, None).await.unwrap();
        collect_until(&mut sub, |e| {
            e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "codex"))
        })
        .await;
        hold.release();
        collect_until(&mut sub, |e| ended(e) == 1).await;
    }
    (kdd, ws, t)
}

/// Every message of the thread, read in pages.
async fn all_messages(c: &kd_client::Client, t: &str) -> Vec<Message> {
    let mut all: Vec<Message> = Vec::new();
    loop {
        let after = all.last().map(|m| m.seq).unwrap_or(0);
        let page = c.thread_messages(t.to_string(), Some(after), None, None, None).await.unwrap();
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_larger_than_an_answer_is_shown_and_exported_in_display_order() {
    let (kdd, _ws, t) = big_thread().await;
    let c = kdd.client().await;
    let all = all_messages(&c, &t).await;
    assert_eq!(all.len(), 18);
    let order: Vec<String> =
        kd_proto::types::display_order(&all).iter().map(|m| format!("#{} {}", m.seq, m.from)).collect();
    let mut show = kdd.kd();
    show.args(["show", &t]);
    let out = run(show).await;
    assert!(out.status.success(), "{}", out.stderr);
    let shown: Vec<String> =
        out.stdout.lines().filter(|l| l.starts_with('#')).map(|l| l.split(" · ").next().unwrap().to_string()).collect();
    let shown: Vec<String> = shown.iter().map(|l| l.split(" (").next().unwrap().to_string()).collect();
    let shown: Vec<String> = shown.iter().map(|l| l.split(" →").next().unwrap().to_string()).collect();
    assert_eq!(shown, order);
    for m in &all {
        assert!(out.stdout.contains(m.body.trim_end()), "the body of #{} is shown", m.seq);
    }
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("out");
    let mut kd = kdd.kd();
    kd.args(["export", &t]).arg(&export);
    let out = run(kd).await;
    assert!(out.status.success(), "{}", out.stderr);
    let mut files: Vec<String> =
        std::fs::read_dir(&export).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files.len(), 19, "thread.json and every message");
    let exported: Vec<String> =
        files[..18].iter().map(|f| f.trim_end_matches(".md").split_once('-').unwrap().1.to_string()).collect();
    let expected: Vec<String> = kd_proto::types::display_order(&all).iter().map(|m| m.from.clone()).collect();
    assert_eq!(exported, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn thread_messages_pages_forward_backward_by_budget_and_without_bodies() {
    let (kdd, _ws, t) = big_thread().await;
    let c = kdd.client().await;
    // No limit: as much as fits a quarter of the answer limit, at least one.
    let first = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let bytes: usize = first.iter().map(|m| m.body.len()).sum();
    assert!(
        !first.is_empty() && first.len() < 18 && bytes <= 256 * KIB + 60 * KIB,
        "{} messages, {bytes} bytes",
        first.len()
    );
    assert_eq!(first.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=first.len() as u64).collect::<Vec<_>>());
    // A limit, after a seq.
    let page = c.thread_messages(t.clone(), Some(3), Some(2), None, None).await.unwrap();
    assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), [4, 5]);
    // The newest before a seq, oldest first.
    let tail = c.thread_messages(t.clone(), None, Some(3), Some(19), None).await.unwrap();
    assert_eq!(tail.iter().map(|m| m.seq).collect::<Vec<_>>(), [16, 17, 18]);
    let between = c.thread_messages(t.clone(), Some(10), Some(100), Some(13), None).await.unwrap();
    assert_eq!(between.iter().map(|m| m.seq).collect::<Vec<_>>(), [11, 12]);
    // The outline: every message, no bodies, in one answer.
    let outline = c.thread_messages(t.clone(), None, None, None, Some(false)).await.unwrap();
    assert_eq!(outline.len(), 18);
    assert!(outline.iter().all(|m| m.body.is_empty()));
    assert!(outline.iter().any(|m| m.run.as_ref().and_then(|r| r.ordinal).is_some()), "what the order needs is there");
    let err = c.thread_messages(t, None, None, Some(1 << 63), None).await.unwrap_err().to_string();
    assert!(err.contains("before_seq"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_from_the_start_of_a_big_thread_gets_every_message() {
    let (kdd, _ws, t) = big_thread().await;
    let c = kdd.client().await;
    let mut sub = c.thread_subscribe(t, Some(0), None).await.unwrap();
    let events =
        collect_until(&mut sub, |e| e.iter().filter(|e| matches!(e, ThreadEvent::Message { .. })).count() == 18).await;
    let seqs: Vec<u64> = events
        .iter()
        .filter_map(|e| if let ThreadEvent::Message { message } = e { Some(message.seq) } else { None })
        .collect();
    assert_eq!(seqs, (1..=18).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_chat_opens_a_big_thread_at_its_end() {
    let (kdd, ws, t) = big_thread().await;
    let dir = tempfile::tempdir().unwrap();
    let tmux = kd_tests::tmux::Tmux::start(dir.path(), ws.dir.path());
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    tmux.type_line(&format!(
        "KD_NO_AUTOSTART=1 {} --socket {} chat {t}",
        kd_tests::bin("kd").display(),
        kdd.socket.display()
    ));
    tmux.wait_for("the chat with the last answer", |s| s.contains("kd chat") && s.contains("word word")).await;
    tmux.send_keys(&["Home"]);
    tmux.wait_for("the note on what is not shown", |s| s.contains("earlier messages are not shown here")).await;
    tmux.type_line("/quit");
}

/// A thread of thousands of messages is answered whole, in seq order, each
/// body as it was sent: kdd writes such a page in two halves on two
/// threads. With a smaller answer limit the byte budget ends the page
/// inside its second half, and the next page goes on from there.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_thread_is_read_whole_and_by_budget() {
    const N: u64 = 5_000;
    let body: fn(u64) -> String = |i| format!("message {i}: {}", "x".repeat(150 + (i % 7) as usize));
    for (limit, whole) in [(None, true), (Some("8388608"), false)] {
        let kdd = match limit {
            None => Kdd::start(),
            Some(bytes) => Kdd::start_with(&["--max-response-bytes", bytes]),
        };
        let c = kdd.client().await;
        let t = kd_tests::new_thread(&c, &kd_tests::workspace("long")).await;
        kd_tests::fill(&kdd, &t, N, 4, body).await;
        let first = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
        let counted: usize = first.iter().map(|m| m.body.len() + 256).sum();
        if whole {
            assert_eq!(first.len() as u64, N, "one answer");
        } else {
            // A quarter of 8 MiB holds more than half the thread, not all.
            assert!(first.len() as u64 > N / 2 && (first.len() as u64) < N, "{} messages", first.len());
            assert!(counted <= 2 * 1024 * 1024, "{counted} bytes counted");
        }
        let all = all_messages(&c, &t).await;
        assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=N).collect::<Vec<_>>());
        assert_eq!(all[..first.len()], first[..]);
        let mut bodies: Vec<&str> = all.iter().map(|m| m.body.as_str()).collect();
        bodies.sort_unstable();
        let mut sent: Vec<String> = (0..N).map(body).collect();
        sent.sort_unstable();
        assert_eq!(bodies, sent);
    }
}
