//! `kd inbox` covers the whole inbox API (F-X3): reading, `--process`
//! (queue.process), `--subscribe … --mode` (queue.subscribe) and
//! `--follow`, which prints entries as they arrive (issue 21 item 12).

use std::process::Stdio;

use kd_client::prelude::*;
use kd_proto::types::{DeliveryStatus, InboxStatus};
use kd_tests::{Kdd, Workspace, fake, run, within};
use tokio::io::{AsyncBufReadExt, BufReader};

/// A workspace of claude (immediate) and codex (queued).
fn council() -> Workspace {
    let ws = Workspace::new(&[]);
    let mut codex = fake("codex", "codex", &[]);
    codex["delivery"] = serde_json::json!({"mode": "queued"});
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {"claude": fake("claude", "claude", &[]), "codex": codex},
    }));
    ws
}

async fn note(c: &kd_client::Client, t: &str, from: &str, to: &str, body: &str) -> kd_proto::types::Routed {
    c.message_route(t.into(), from.into(), body.into(), Some(vec![to.into()]), None, None, None, None, None)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_inbox_processes_entries_and_subscribes_a_member_to_types() {
    let ws = council();
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    note(&c, &t, "claude", "codex", "first").await;
    note(&c, &t, "claude", "codex", "second").await;
    let items = c.queue_read("codex".into(), Some(t.clone()), None, None, None, None).await.unwrap();
    let (first, second) = (items[0].id, items[1].id);
    let kd = |args: &[&str]| {
        let mut k = kdd.kd();
        k.current_dir(ws.dir.path()).args(["inbox", "--thread", &t]).args(args);
        run(k)
    };

    let out = kd(&["--as", "codex", "--process", &first.to_string()]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "codex: 1 entry marked processed");
    let out = kd(&["--as", "codex", "--process", &second.to_string(), "--action", "dismissed", "--json"]).await;
    let p: kd_proto::types::Processed = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!((p.updated, p.status), (1, InboxStatus::Dismissed));
    let pending = c.queue_read("codex".into(), Some(t.clone()), None, None, None, None).await.unwrap();
    assert!(pending.is_empty(), "{pending:?}");
    let out = kd(&["--as", "codex", "--process", "1", "--action", "done"]).await;
    assert_eq!(out.status.code(), Some(2), "an unknown action is a usage error: {}", out.stderr);

    // claude takes point-to-point messages queued from now on.
    let out = kd(&["--as", "claude", "--subscribe", "point_to_point", "--mode", "queued"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("claude: immediate") && out.stdout.contains("queued: point_to_point"),
        "{}",
        out.stdout
    );
    let routed = note(&c, &t, "codex", "claude", "later").await;
    assert_eq!(routed.deliveries[0].status, DeliveryStatus::Queued);
    let out = kd(&["--as", "claude", "--subscribe", "point_to_point"]).await;
    assert_eq!(out.status.code(), Some(2), "--subscribe needs --mode: {}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_inbox_follow_prints_each_entry_as_it_arrives() {
    let ws = council();
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    note(&c, &t, "claude", "codex", "already there").await;
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path())
        .args(["inbox", "--as", "codex", "--thread", &t, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = k.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || within("a line from kd inbox --follow", lines.next_line()).await.unwrap().unwrap();
    assert!(next().await.contains("from claude"));
    assert_eq!(next().await, "  already there");
    // kd subscribed before it read the inbox: what comes now, it prints as it comes.
    note(&c, &t, "claude", "codex", "new one").await;
    assert!(next().await.contains("from claude"));
    assert_eq!(next().await, "  new one");
    note(&c, &t, "codex", "claude", "to claude only").await;
    note(&c, &t, "claude", "codex", "third").await;
    assert!(next().await.contains("from claude"));
    assert_eq!(next().await, "  third", "nothing of another member's inbox");
    child.start_kill().unwrap();
}

/// What waited in a member's inbox reaches it in the prompt of its next
/// run, once: it is marked given before the agent is given the prompt, so
/// the inbox the agent reads then no longer holds it.
#[tokio::test(flavor = "multi_thread")]
async fn what_waited_in_the_inbox_is_in_the_prompt_and_no_longer_in_the_inbox_the_agent_reads() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let mut claude = fake("claude", "claude", &[("FAKE_MCP_CALL", "inbox {}"), ("FAKE_RECORD", &record)]);
    claude["delivery"] = serde_json::json!({"mode": "queued"});
    ws.write_config(&serde_json::json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    let routed = note(&c, &t, "king", "claude", "a note that waited").await;
    assert_eq!(routed.deliveries[0].status, DeliveryStatus::Queued);
    kd_tests::send_one_round(&c, &t, "Read your inbox.").await;
    kd_tests::collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let prompt = kd_tests::records(&record).into_iter().find_map(|r| r["stdin"].as_str().map(str::to_string));
    assert!(prompt.is_some_and(|p| p.contains("a note that waited")), "the note is in the prompt");
    let last = kd_tests::last_message(&c, &t).await;
    assert!(last.body.starts_with("Tool said: "), "{last:?}");
    assert!(!last.body.contains("a note that waited"), "given in the prompt, yet still in the inbox: {}", last.body);
    let pending = c.queue_read("claude".into(), Some(t.clone()), None, None, None, None).await.unwrap();
    assert!(pending.is_empty(), "{pending:?}");
}
