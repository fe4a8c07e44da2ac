//! The registry through the API: threads, messages, sessions, events, and
//! what survives a restart.

use std::collections::HashSet;
use std::sync::Arc;

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::{MessageKind, SessionStatus, ThreadStatus};
use kd_tests::{Kdd, append, within, workspace};

async fn new_thread(client: &kd_client::Client, name: &str) -> String {
    client
        .thread_create(
            workspace(name),
            Some("main".into()),
            None,
            Some(vec!["claude".into(), "codex".into()]),
            None,
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap()
        .id
}

#[tokio::test(flavor = "multi_thread")]
async fn thirty_two_concurrent_writers_get_a_dense_seq() {
    const WRITERS: usize = 32;
    const EACH: usize = 200;
    let kdd = Kdd::start();
    let setup = kdd.client().await;
    let thread = new_thread(&setup, "dense").await;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let client = kdd.client().await;
        let thread = thread.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::with_capacity(EACH);
            for i in 0..EACH {
                let m = kd_tests::append(&client, &thread, "claude", format!("w{w} m{i}"), &[]).await;
                seqs.push(m.seq);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let seqs = within("writers", t).await.unwrap();
        // Each writer's own messages are in increasing seq order.
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        all.extend(seqs);
    }
    all.sort_unstable();
    let expected: Vec<u64> = (1..=(WRITERS * EACH) as u64).collect();
    assert_eq!(all, expected, "seq is not exactly 1..={}", WRITERS * EACH);
    let stored = setup.thread_messages(thread.clone(), None, None, None, None).await.unwrap();
    assert_eq!(stored.iter().map(|m| m.seq).collect::<Vec<_>>(), expected);
    assert_eq!(setup.thread_get(thread).await.unwrap().last_seq, (WRITERS * EACH) as u64);
}

#[tokio::test(flavor = "multi_thread")]
async fn hundred_concurrent_resumes_allow_exactly_one() {
    let kdd = Kdd::start();
    let client = Arc::new(kdd.client().await);
    let thread = new_thread(&client, "resume").await;
    let s = client
        .session_start(thread, "claude".into(), Some("backend-1".into()), Some("setup".into()), None, None)
        .await
        .unwrap();
    client.session_end(s.id.clone(), Some(SessionStatus::Idle), None).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..100 {
        let client = client.clone();
        let id = s.id.clone();
        tasks.push(tokio::spawn(async move {
            client.session_resume(id, Some(format!("client-{i}")), Some(std::process::id())).await
        }));
    }
    let mut allowed = Vec::new();
    let mut rejected = 0;
    for t in tasks {
        match within("resumes", t).await.unwrap() {
            Ok(s) => allowed.push(s),
            Err(e) => {
                let e = ClientError::from(e);
                assert_eq!(e.code(), Some(ErrorCode::SessionActive), "{e}");
                assert!(e.to_string().contains("Session already active"), "{e}");
                let ClientError::Rpc { data: Some(data), .. } = &e else { panic!("no data: {e}") };
                assert!(data["holder"].as_str().unwrap().starts_with("client-"), "{data}");
                rejected += 1;
            }
        }
    }
    assert_eq!(allowed.len(), 1, "exactly one resume is allowed");
    assert_eq!(rejected, 99);
    let winner = &allowed[0];
    assert_eq!(winner.status, SessionStatus::Active);
    // The rejections name the winner as holder, and are in the event log.
    let events =
        client.events_list(None, None, Some("session.resume_rejected".into()), None, None, None).await.unwrap();
    assert_eq!(events.len(), 99);
    assert!(events.iter().all(|e| e.data["holder"] == serde_json::json!(winner.holder)));
}

#[tokio::test(flavor = "multi_thread")]
async fn one_active_session_per_thread_and_agent_and_a_dead_holder_frees_it() {
    let kdd = Kdd::start();
    let client = kdd.client().await;
    let thread = new_thread(&client, "sessions").await;
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let first = client
        .session_start(thread.clone(), "claude".into(), None, Some("a".into()), Some(child.id()), None)
        .await
        .unwrap();
    let err = ClientError::from(
        client.session_start(thread.clone(), "claude".into(), None, Some("b".into()), None, None).await.unwrap_err(),
    );
    assert_eq!(err.code(), Some(ErrorCode::SessionActive));
    // Another agent on the same thread is independent.
    client.session_start(thread.clone(), "codex".into(), None, None, None, None).await.unwrap();
    // Once the holder process is gone, the session can be taken.
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = client.session_resume(first.id.clone(), Some("b".into()), None).await.unwrap();
    assert_eq!(resumed.holder.as_deref(), Some("b"));
    let reclaimed = client.events_list(None, None, Some("session.reclaimed".into()), None, None, None).await.unwrap();
    assert_eq!(reclaimed.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_keeps_threads_messages_sessions_and_locks() {
    let mut kdd = Kdd::start();
    let client = kdd.client().await;
    let thread = new_thread(&client, "restart").await;
    append(&client, &thread, "king", "first", &[]).await;
    append(&client, &thread, "claude", "second\nwith two lines", &[]).await;
    let session = client
        .session_start(thread.clone(), "claude".into(), Some("b-123".into()), Some("h".into()), None, None)
        .await
        .unwrap();
    let lock = client.lock_acquire(thread.clone(), "h".into(), 3_600_000, None).await.unwrap();
    let before_threads = client.thread_list(None, None, None).await.unwrap();
    let before_messages = client.thread_messages(thread.clone(), None, None, None, None).await.unwrap();
    drop(client);

    kdd.restart();
    let client = kdd.client().await;
    assert_eq!(client.thread_list(None, None, None).await.unwrap(), before_threads);
    assert_eq!(client.thread_messages(thread.clone(), None, None, None, None).await.unwrap(), before_messages);
    let sessions = client.session_list(Some(thread.clone()), None, None).await.unwrap();
    assert_eq!(sessions, vec![session]);
    let locks = client.lock_list(None).await.unwrap();
    assert_eq!(locks.len(), 1);
    let kd_proto::types::LockOutcome::Acquired { token, .. } = lock else { panic!("not acquired") };
    assert_eq!(locks[0].token, token);
    // Appending continues the same sequence.
    assert_eq!(append(&client, &thread, "codex", "third", &[]).await.seq, 3);
    assert_eq!(client.daemon_status().await.unwrap().threads, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_workspace_and_branch_has_its_current_thread() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let ws = workspace("current");
    assert_eq!(c.thread_current(ws.clone(), Some("main".into())).await.unwrap(), None);
    let a =
        c.thread_create(ws.clone(), Some("main".into()), None, None, None, None, None, Some(true), None).await.unwrap();
    let b = c
        .thread_create(ws.clone(), Some("feature".into()), None, None, None, None, None, Some(true), None)
        .await
        .unwrap();
    assert_eq!(c.thread_current(ws.clone(), Some("main".into())).await.unwrap().map(|t| t.id), Some(a.id.clone()));
    assert_eq!(c.thread_current(ws.clone(), Some("feature".into())).await.unwrap().map(|t| t.id), Some(b.id.clone()));
    c.thread_set_current(ws.clone(), Some("main".into()), b.id.clone()).await.unwrap();
    assert_eq!(c.thread_current(ws.clone(), Some("main".into())).await.unwrap().map(|t| t.id), Some(b.id));
    assert_eq!(c.thread_current(workspace("elsewhere"), Some("main".into())).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn thread_ids_are_short_safe_and_unique_and_chosen_ids_are_checked() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let mut ids = HashSet::new();
    for _ in 0..50 {
        let id = kd_tests::new_thread(&c, &workspace("ids")).await;
        assert!(id.len() <= 12 && id.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit()), "{}", id);
        assert!(ids.insert(id));
    }
    let named = c
        .thread_create(workspace("ids"), None, None, None, Some("council-a8ba".into()), None, None, None, None)
        .await
        .unwrap();
    assert_eq!(named.id, "council-a8ba");
    let dup = ClientError::from(
        c.thread_create(workspace("ids"), None, None, None, Some("council-a8ba".into()), None, None, None, None)
            .await
            .unwrap_err(),
    );
    assert_eq!(dup.code(), Some(ErrorCode::AlreadyExists));
    let escape = ClientError::from(
        c.thread_create(workspace("ids"), None, None, None, Some("../../etc".into()), None, None, None, None)
            .await
            .unwrap_err(),
    );
    assert_eq!(escape.code(), Some(ErrorCode::InvalidArgument));
    let member = ClientError::from(
        c.thread_create(workspace("ids"), None, None, Some(vec!["../x".into()]), None, None, None, None, None)
            .await
            .unwrap_err(),
    );
    assert_eq!(member.code(), Some(ErrorCode::InvalidArgument));
}

#[tokio::test(flavor = "multi_thread")]
async fn branch_threads_need_an_existing_parent() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let trunk = new_thread(&c, "lineage").await;
    let branch = c
        .thread_create(workspace("lineage"), None, None, None, None, None, Some(trunk.clone()), None, None)
        .await
        .unwrap();
    assert_eq!(branch.lineage, kd_proto::types::Lineage::Branch);
    assert_eq!(branch.parent.as_deref(), Some(trunk.as_str()));
    let orphan = ClientError::from(
        c.thread_create(workspace("lineage"), None, None, None, None, None, Some("nope".into()), None, None)
            .await
            .unwrap_err(),
    );
    assert_eq!(orphan.code(), Some(ErrorCode::NotFound));
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_carry_routing_and_kind_and_page_by_seq() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = new_thread(&c, "routing").await;
    let king = append(&c, &t, "king", "hello", &[]).await;
    assert_eq!(king.kind, MessageKind::King);
    assert_eq!(king.to, vec!["all".to_string()]);
    let directed = c
        .message_append(
            t.clone(),
            "codex".into(),
            "to you".into(),
            Some(vec!["claude".into()]),
            Some(vec!["cursor".into()]),
            Some(1),
            None,
            Some(2),
            Some("corr-1".into()),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        (directed.seq, directed.kind, directed.round, directed.reply_to),
        (2, MessageKind::Agent, Some(2), Some(1))
    );
    assert_eq!(directed.cc, vec!["cursor".to_string()]);
    let bad_reply = ClientError::from(
        c.message_append(t.clone(), "codex".into(), "x".into(), None, None, Some(9), None, None, None, None)
            .await
            .unwrap_err(),
    );
    assert_eq!(bad_reply.code(), Some(ErrorCode::InvalidArgument));
    // A refused append does not consume a seq.
    assert_eq!(append(&c, &t, "claude", "three", &[]).await.seq, 3);
    let page = c.thread_messages(t.clone(), Some(1), Some(1), None, None).await.unwrap();
    assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![2]);
    let missing = ClientError::from(c.thread_messages("nope".into(), None, None, None, None).await.unwrap_err());
    assert_eq!(missing.code(), Some(ErrorCode::NotFound));
}

#[tokio::test(flavor = "multi_thread")]
async fn each_member_is_addressed_once_on_append_and_import() {
    // A name given twice is one addressee; one in `to` is not also copied.
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = new_thread(&c, "addressed").await;
    let names = |n: &[&str]| Some(n.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let m = c
        .message_append(
            t.clone(),
            "king".into(),
            "twice".into(),
            names(&["claude", "codex", "claude"]),
            names(&["codex", "cursor", "cursor"]),
            None,
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!((m.to.clone(), m.cc.clone()), (vec!["claude".to_string(), "codex".into()], vec!["cursor".to_string()]));
    let stored = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!((stored[0].to.clone(), stored[0].cc.clone()), (m.to.clone(), m.cc.clone()));
    let imported = kd_proto::types::ImportedMessage {
        from: "king".into(),
        to: vec!["0_".into(), "a".into(), "0_".into()],
        kind: None,
        body: "imported".into(),
        created_at_ms: 0,
        refs: vec![],
        backend: None,
        model: None,
    };
    let copy =
        c.thread_import(workspace("addressed"), None, None, None, None, None, vec![imported], None).await.unwrap();
    let read = c.thread_messages(copy.id, None, None, None, None).await.unwrap();
    assert_eq!(read[0].to, ["0_", "a"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_event_log_reconstructs_a_thread_and_filters() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = new_thread(&c, "events").await;
    for (from, body) in [("king", "q"), ("claude", "a1"), ("codex", "a2")] {
        append(&c, &t, from, body, &[]).await;
    }
    let s = c.session_start(t.clone(), "claude".into(), None, None, None, None).await.unwrap();
    c.session_end(s.id, None, None).await.unwrap();
    let events = c.events_list(Some(t.clone()), None, None, None, None, None).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["thread.create", "message", "message", "message", "session.start", "session.end"]);
    let rebuilt: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.kind == "message")
        .map(|e| (e.from.clone().unwrap(), e.data["body"].as_str().unwrap().to_string()))
        .collect();
    let stored: Vec<(String, String)> = c
        .thread_messages(t.clone(), None, None, None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.from, m.body))
        .collect();
    assert_eq!(rebuilt, stored);
    // "Concerning claude": as member, sender or session owner; not the king's broadcast.
    let claude = c.events_list(Some(t.clone()), Some("claude".into()), None, None, None, None).await.unwrap();
    let kinds: Vec<&str> = claude.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["thread.create", "message", "session.start", "session.end"]);
    let after = c.events_list(Some(t), None, None, Some(events[3].id), Some(1), None).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, events[4].id);
}

#[tokio::test(flavor = "multi_thread")]
async fn archiving_a_thread_archives_its_sessions() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = new_thread(&c, "archive").await;
    let s = c.session_start(t.clone(), "claude".into(), None, None, None, None).await.unwrap();
    let archived = c.thread_archive(t.clone()).await.unwrap();
    assert_eq!(archived.status, ThreadStatus::Archived);
    let sessions = c.session_list(Some(t.clone()), None, None).await.unwrap();
    assert_eq!(sessions.iter().map(|s| s.status).collect::<Vec<_>>(), vec![SessionStatus::Archived]);
    let err = ClientError::from(c.session_resume(s.id, None, None).await.unwrap_err());
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument));
    let listed = c.thread_list(None, Some(ThreadStatus::Archived), None).await.unwrap();
    assert_eq!(listed.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_whose_holder_died_is_listed_released_and_session_get_checks_one() {
    let kdd = Kdd::start();
    let client = kdd.client().await;
    let thread = new_thread(&client, "dead-holder").await;
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let s = client
        .session_start(thread.clone(), "claude".into(), Some("b-1".into()), Some("tool".into()), Some(child.id()), None)
        .await
        .unwrap();
    let got = client.session_get(s.id.clone()).await.unwrap();
    assert_eq!((got.status, got.holder.as_deref(), got.pid), (SessionStatus::Active, Some("tool"), Some(child.id())));
    child.kill().unwrap();
    child.wait().unwrap();
    // Nobody resumed it: listing alone finds the holder gone.
    let listed = client.session_list(Some(thread.clone()), None, None).await.unwrap();
    assert_eq!((listed[0].status, listed[0].holder.as_deref(), listed[0].pid), (SessionStatus::Expired, None, None));
    let active = client.session_list(Some(thread.clone()), None, Some(SessionStatus::Active)).await.unwrap();
    assert!(active.is_empty());
    assert_eq!(client.session_get(s.id.clone()).await.unwrap().status, SessionStatus::Expired);
    let missing = ClientError::from(client.session_get("s-nope".into()).await.unwrap_err());
    assert_eq!(missing.code(), Some(ErrorCode::NotFound));
}

/// `events.list` gives the newest events by default, oldest first among
/// them (like `tail`), pages back with `before_id` and forward with
/// `since_id`, and refuses a limit it would otherwise cap (issue 21 item 10).
#[tokio::test(flavor = "multi_thread")]
async fn the_event_log_gives_its_newest_page_and_pages_both_ways() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = new_thread(&c, "tail").await;
    for i in 0..12 {
        append(&c, &t, "king", format!("m{i}"), &[]).await;
    }
    let list = |params: serde_json::Value| -> Vec<u64> {
        let v = kd_tests::rpc_post(
            &kdd.socket,
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "events.list", "params": params}).to_string(),
        );
        let events: Vec<kd_proto::types::Event> =
            serde_json::from_value(v["result"].clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
        events.iter().map(|e| e.id).collect()
    };
    let all = list(serde_json::json!({"thread": t}));
    assert_eq!(all.len(), 13, "thread.create and 12 messages");
    assert!(all.windows(2).all(|w| w[0] < w[1]), "oldest first: {all:?}");
    assert_eq!(list(serde_json::json!({"thread": t, "limit": 5})), all[8..], "the newest five");
    assert_eq!(list(serde_json::json!({"thread": t, "limit": 5, "before_id": all[8]})), all[3..8]);
    assert_eq!(list(serde_json::json!({"thread": t, "limit": 5, "since_id": 0})), all[..5]);
    assert_eq!(list(serde_json::json!({"thread": t, "since_id": all[2], "before_id": all[6]})), all[3..6]);
    let v = kd_tests::rpc_post(
        &kdd.socket,
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "events.list", "params": {"limit": 1001}}).to_string(),
    );
    assert_eq!(v["error"]["code"], 1001, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("at most 1000"), "{v}");
}
