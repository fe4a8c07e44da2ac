//! The thread lifecycle (issue 11, SPEC §8 F-L2): idle after
//! `lifecycle.idle_after`, archived with a summary after
//! `lifecycle.archive_after` (branches; the trunk only idles), revived by a
//! message when idle, refused when archived; archive, unarchive and delete
//! from the CLI; titles. Real kdd (reaping every 100 ms), fake agents.

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::*;
use kd_tests::{Kdd, Workspace, collect_until, run};

fn config(ws: &Workspace, lifecycle: serde_json::Value) {
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {
            "claude": kd_tests::fake("claude", "claude", &[("FAKE_TEXT", "Shard by tenant.")]),
            "codex": kd_tests::fake("codex", "codex", &[("FAKE_TEXT", "Add an index first.")])
        },
        "lifecycle": lifecycle,
    }));
}

fn reaping() -> Kdd {
    Kdd::start_with(&["--reap-interval-ms", "100"])
}

async fn ask(c: &kd_client::Client, t: &str, body: &str) -> Result<Sent, ClientError> {
    c.council_send(t.into(), body.into(), None, None, None, None, None, Some(0), None, None)
        .await
        .map_err(ClientError::from)
}

/// A trunk in `ws` and a branch of it titled "Sharding" whose question
/// the workspace's `members` answered; their ids.
async fn sharding_branch(c: &kd_client::Client, ws: &Workspace, members: usize) -> (String, String) {
    let trunk = kd_tests::new_thread(c, &ws.path()).await;
    let branch = c.thread_fork(trunk.clone(), Some("Sharding".into()), None, None).await.unwrap().id;
    let mut sub = c.thread_subscribe(branch.clone(), None, None).await.unwrap();
    ask(c, &branch, "How do we scale orders?").await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == members).await;
    (trunk, branch)
}

async fn until_status(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, want: ThreadStatus) {
    collect_until(sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Status { status, .. } if *status == want))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_branch_idles_then_archives_with_a_summary_and_then_refuses_messages() {
    let ws = Workspace::new(&[]);
    // Nothing ages while the test sets the thread up, however slow the
    // machine; then the workspace's times are cut to seconds.
    config(&ws, serde_json::json!({}));
    let kdd = reaping();
    let c = kdd.client().await;
    let trunk = kd_tests::new_thread(&c, &ws.path()).await;
    let branch = c
        .thread_create(ws.path(), None, None, None, None, Some(Lineage::Branch), Some(trunk.clone()), None, None)
        .await
        .unwrap()
        .id;
    let mut sub = c.thread_subscribe(branch.clone(), None, None).await.unwrap();
    ask(&c, &branch, "How do we scale the orders table?").await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 2).await;
    let mut trunk_sub = c.thread_subscribe(trunk.clone(), None, None).await.unwrap();
    config(&ws, serde_json::json!({"idle_after": "1s", "archive_after": "2s"}));

    until_status(&mut sub, ThreadStatus::Idle).await;
    let sessions = c.session_list(Some(branch.clone()), None, None).await.unwrap();
    assert!(sessions.iter().all(|s| s.status != SessionStatus::Active), "{sessions:?}");
    until_status(&mut sub, ThreadStatus::Archived).await;
    let t = c.thread_get(branch.clone()).await.unwrap();
    assert_eq!(t.status, ThreadStatus::Archived);
    let summary = t.summary.clone().expect("a summary is persisted at archive");
    for part in ["How do we scale the orders table?", "claude: Shard by tenant.", "codex: Add an index first."] {
        assert!(summary.contains(part), "{part:?} missing from the summary:\n{summary}");
    }
    let archived =
        c.events_list(Some(branch.clone()), None, Some("thread.archive".into()), None, None, None).await.unwrap();
    assert_eq!(archived[0].data["reason"], "age", "{archived:?}");
    assert!(
        c.events_list(Some(branch.clone()), None, Some("thread.idle".into()), None, None, None).await.unwrap().len()
            == 1
    );

    // The trunk is offered the branch's summary (which revives it), then
    // idles again but is never archived for its age.
    collect_until(&mut trunk_sub, |e| {
        e.iter().any(|e| {
            matches!(e, ThreadEvent::Message { message } if message.purpose == Some(Purpose::Summary)
            && message.body.contains("claude: Shard by tenant."))
        })
    })
    .await;
    until_status(&mut trunk_sub, ThreadStatus::Idle).await;
    assert_eq!(c.thread_get(trunk.clone()).await.unwrap().status, ThreadStatus::Idle);

    // A message to an archived thread is refused with the way back.
    let refused = ask(&c, &branch, "Still there?").await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::ThreadArchived), "{refused}");
    assert!(refused.to_string().contains(&format!("kd unarchive {branch}")), "{refused}");
    assert_eq!(c.thread_get(branch.clone()).await.unwrap().last_seq, 3, "nothing was written");
    let mut k = kdd.kd();
    k.args(["show", &branch]);
    let out = run(k).await;
    assert!(out.stdout.contains("Summary") && out.stdout.contains("claude: Shard by tenant."), "{}", out.stdout);
    let mut k = kdd.kd();
    k.args(["threads"]);
    let out = run(k).await;
    let row = out.stdout.lines().find(|l| l.contains(&branch)).unwrap();
    assert!(
        out.stdout.lines().next().unwrap().ends_with("SUMMARY") && row.ends_with("  How do we scale the orders table?"),
        "{}",
        out.stdout
    );

    // kd unarchive, and the thread takes messages again (no longer aged
    // in seconds, so that it is still active when the message comes).
    config(&ws, serde_json::json!({}));
    let mut k = kdd.kd();
    k.args(["unarchive", &branch]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(c.thread_get(branch.clone()).await.unwrap().status, ThreadStatus::Active);
    ask(&c, &branch, "Still there?").await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_revives_an_idle_thread() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = reaping();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    config(&ws, serde_json::json!({"idle_after": "1s"}));
    until_status(&mut sub, ThreadStatus::Idle).await;
    // Idle after a day again, so that the revived thread stays active.
    config(&ws, serde_json::json!({}));
    ask(&c, &t, "Back again.").await.unwrap();
    until_status(&mut sub, ThreadStatus::Active).await;
    assert_eq!(c.thread_get(t.clone()).await.unwrap().status, ThreadStatus::Active);
    let revived = c.events_list(Some(t.clone()), None, Some("thread.revive".into()), None, None, None).await.unwrap();
    assert_eq!(revived.len(), 1);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A message said `at`, for an import.
fn said_at(at: i64, body: &str) -> ImportedMessage {
    ImportedMessage {
        from: "king".into(),
        to: vec![],
        kind: None,
        body: body.into(),
        created_at_ms: at,
        refs: vec![],
        backend: None,
        model: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_old_thread_is_aged_when_it_is_read() {
    // Default settings (idle after 24 h), no periodic pass due for a
    // minute: reading a thread last active two days ago ages it.
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let two_days_ago = now_ms() - 48 * 3600 * 1000;
    let t =
        c.thread_import(ws.path(), None, None, None, None, None, vec![said_at(two_days_ago, "An old question")], None);
    let t = t.await.unwrap();
    assert_eq!(t.status, ThreadStatus::Active, "as imported");
    // Nothing has happened on it for two days (the import itself was
    // activity: its time is put back by hand).
    kdd.db.execute("UPDATE threads SET last_activity_at = $1 WHERE id = $2", &[two_days_ago.into(), (&t.id).into()]);
    let mut sub = c.thread_subscribe(t.id.clone(), None, None).await.unwrap();
    let read = c.thread_get(t.id.clone()).await.unwrap();
    assert_eq!(read.status, ThreadStatus::Idle, "aged on reading");
    until_status(&mut sub, ThreadStatus::Idle).await;
    let listed = c.thread_list(Some(ws.path()), None, None).await.unwrap();
    assert_eq!(listed.iter().find(|x| x.id == t.id).map(|x| x.status), Some(ThreadStatus::Idle));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_import_of_old_messages_is_activity_and_neither_idles_nor_archives_the_thread() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = reaping();
    let c = kdd.client().await;
    kd_tests::new_thread(&c, &ws.path()).await;
    let before = now_ms();
    let ten_days_ago = before - 10 * 24 * 3600 * 1000;
    let old = vec![said_at(ten_days_ago, "An old question"), said_at(ten_days_ago + 1000, "And another")];
    let t = c.thread_import(ws.path(), None, None, None, None, None, old, None).await.unwrap();
    assert_eq!(t.lineage, Lineage::Branch, "a branch: the one that archives");
    let read = c.thread_get(t.id.clone()).await.unwrap();
    assert_eq!(read.status, ThreadStatus::Active, "imported is active: {read:?}");
    assert!(read.last_activity_at_ms >= before, "its last activity is the import: {read:?}");
    assert_eq!(read.created_at_ms, ten_days_ago, "it was made when its first message was said");
    let messages = c.thread_messages(t.id.clone(), None, None, None, None).await.unwrap();
    let times: Vec<i64> = messages.iter().map(|m| m.created_at_ms).collect();
    assert_eq!(times, [ten_days_ago, ten_days_ago + 1000], "each message keeps its time");
    let listed = c.thread_list(Some(ws.path()), None, None).await.unwrap();
    assert_eq!(listed.iter().find(|x| x.id == t.id).map(|x| x.status), Some(ThreadStatus::Active));
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_unarchive_and_delete_from_the_cli() {
    let ws = Workspace::new(&[]);
    let hold = ws.file("hold");
    std::fs::write(&hold, b"").unwrap();
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_HOLD", &hold)])},
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    ask(&c, &t, "Long one.").await.unwrap();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;

    // Refused while a run is in flight, unless --force (which cancels it).
    let mut k = kdd.kd();
    k.args(["delete", &t, "--yes"]);
    let out = run(k).await;
    assert!(!out.status.success());
    assert!(out.stderr.contains("1 run in flight") && out.stderr.contains("--force"), "{}", out.stderr);
    let mut k = kdd.kd();
    k.args(["delete", &t, "--force"]);
    let out = run(k).await;
    assert!(!out.status.success() && out.stderr.contains("--yes"), "not on a terminal: asks for --yes: {}", out.stderr);
    let mut k = kdd.kd();
    k.args(["delete", &t, "--yes", "--force"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("deleted thread {t} (2 messages, 1 run cancelled)")), "{}", out.stdout);
    let gone = ClientError::from(c.thread_get(t.clone()).await.unwrap_err());
    assert_eq!(gone.code(), Some(ErrorCode::NotFound));
    // Nothing of it is left in the registry.
    for table in ["messages", "runs", "sessions", "conversation_events", "inbox", "current_threads"] {
        let n = kdd.db.one(&format!("SELECT count(*) FROM {table} WHERE thread_id = $1"), &[(&t).into()]).int();
        assert_eq!(n, 0, "{table} keeps rows of the deleted thread");
    }
    std::fs::remove_file(&hold).unwrap();

    // kd archive stops nothing that is not running and prints the summary.
    let other = kd_tests::new_thread(&c, &ws.path()).await;
    let mut k = kdd.kd();
    k.args(["archive", &other]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("archived thread {other}")) && out.stdout.contains("Nothing was said."));
    assert_eq!(c.thread_get(other).await.unwrap().status, ThreadStatus::Archived);
}

#[tokio::test(flavor = "multi_thread")]
async fn titles_are_given_or_taken_from_the_first_question() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    ask(&c, &t, "  How do we shard the orders table?\nDetails follow.").await.unwrap();
    assert_eq!(c.thread_get(t.clone()).await.unwrap().title.as_deref(), Some("How do we shard the orders table?"));
    let mut k = kdd.kd();
    k.args(["title", &t, "Orders sharding"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    ask(&c, &t, "Another question").await.unwrap();
    assert_eq!(c.thread_get(t.clone()).await.unwrap().title.as_deref(), Some("Orders sharding"), "a set title stays");
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["ask", "--new", "--title", "Schema review", "--async", "Look at the schema"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let new = out.stdout.trim().to_string();
    assert_eq!(c.thread_get(new).await.unwrap().title.as_deref(), Some("Schema review"));
    let mut k = kdd.kd();
    k.args(["threads"]);
    let out = run(k).await;
    assert!(out.stdout.contains("Orders sharding") && out.stdout.contains("Schema review"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_trunk_per_workspace_under_concurrent_asks_and_new_threads_branch_off_it() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let mut asks = Vec::new();
    for i in 0..6 {
        let mut k = kdd.kd();
        k.current_dir(ws.path()).args(["ask", "--new", "--async", &format!("Question {i}")]);
        asks.push(tokio::spawn(run(k)));
    }
    for a in asks {
        let out = a.await.unwrap();
        assert!(out.status.success(), "{}", out.stderr);
    }
    let threads = c.thread_list(Some(ws.path()), None, None).await.unwrap();
    assert_eq!(threads.len(), 6);
    let trunks: Vec<&Thread> = threads.iter().filter(|t| t.lineage == Lineage::Trunk).collect();
    assert_eq!(trunks.len(), 1, "{threads:#?}");
    let trunk = &trunks[0].id;
    for t in threads.iter().filter(|t| t.lineage == Lineage::Branch) {
        assert_eq!(t.parent.as_ref(), Some(trunk), "{t:?}");
    }
    let second = c.thread_create(ws.path(), None, None, None, None, Some(Lineage::Trunk), None, None, None).await;
    let e = ClientError::from(second.unwrap_err());
    assert_eq!(e.code(), Some(ErrorCode::AlreadyExists));
    assert!(e.to_string().contains(&format!("thread {trunk}")), "{e}");
    // kd threads shows the tree: the branches under the trunk.
    let mut k = kdd.kd();
    k.args(["threads"]);
    let out = run(k).await;
    let branch = threads.iter().find(|t| t.lineage == Lineage::Branch).unwrap();
    assert!(out.stdout.contains(&format!("└ {}", branch.id)), "{}", out.stdout);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[1].starts_with(trunk.as_str()), "the trunk first: {}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_asks_in_a_fresh_workspace_all_land_in_its_one_trunk() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    // 3 to 8 questions at once, each in a workspace with no thread yet.
    for n in 3..=8 {
        let ws = Workspace::new(&[]);
        config(&ws, serde_json::json!({}));
        let mut asks = Vec::new();
        for i in 0..n {
            let mut k = kdd.kd();
            k.current_dir(ws.path()).args(["ask", "--async", &format!("Question {i}")]);
            asks.push(tokio::spawn(run(k)));
        }
        let mut ids = std::collections::HashSet::new();
        for a in asks {
            let out = a.await.unwrap();
            assert!(out.status.success(), "{}", out.stderr);
            ids.insert(out.stdout.trim().to_string());
        }
        let threads = c.thread_list(Some(ws.path()), None, None).await.unwrap();
        assert_eq!(threads.len(), 1, "{n} asks at once made one thread: {threads:#?}");
        assert_eq!(threads[0].lineage, Lineage::Trunk);
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), [threads[0].id.clone()], "every ask printed the trunk");
        let messages = c.thread_messages(threads[0].id.clone(), None, None, None, None).await.unwrap();
        let kings = messages.iter().filter(|m| m.kind == MessageKind::King).count();
        assert_eq!(kings, n, "every question is in the trunk");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_current_branch_is_deleted_kd_ask_goes_back_to_the_trunk() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let trunk = kd_tests::new_thread(&c, &ws.path()).await;
    let branch = c.thread_fork(trunk.clone(), None, None, None).await.unwrap().id;
    assert_eq!(c.thread_current(ws.path(), None).await.unwrap().unwrap().id, branch);
    c.thread_delete(branch.clone(), None).await.unwrap();
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["ask", "--async", "Where now?"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), trunk, "the trunk, not a new branch");
    assert_eq!(c.thread_list(Some(ws.path()), None, None).await.unwrap().len(), 1);
    assert_eq!(c.thread_current(ws.path(), None).await.unwrap().unwrap().id, trunk);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_starts_with_the_bundle_and_its_own_sessions() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    std::fs::write(format!("{}/AGENTS.md", ws.path()), "Always run the tests.\n").unwrap();
    std::fs::write(format!("{}/CLAUDE.md", ws.path()), "Use British spelling.\n").unwrap();
    std::fs::write(format!("{}/NOTES.md", ws.path()), "Not in the bundle.\n").unwrap();
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_RECORD", &record), ("FAKE_TEXT", "Noted.")])},
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let trunk = c
        .thread_create(ws.path(), None, None, None, None, None, None, Some(true), Some(ContextMode::Resume))
        .await
        .unwrap();
    let mut sub = c.thread_subscribe(trunk.id.clone(), None, None).await.unwrap();
    ask(&c, &trunk.id, "Trunk question").await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let parent_session = c.session_list(Some(trunk.id.clone()), None, None).await.unwrap()[0].clone();
    assert!(parent_session.backend_session_id.is_some());

    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["fork", "--title", "Try sharding", "--carry", "none"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let branch = c.thread_get(out.stdout.trim().to_string()).await.unwrap();
    assert_eq!((branch.lineage, branch.parent.as_ref()), (Lineage::Branch, Some(&trunk.id)));
    assert_eq!((branch.title.as_deref(), branch.context), (Some("Try sharding"), ContextMode::Resume));
    let current = c.thread_current(ws.path(), None).await.unwrap().unwrap();
    assert_eq!(current.id, branch.id, "the branch is the current thread");
    let first = &c.thread_messages(branch.id.clone(), None, None, None, None).await.unwrap()[0];
    assert_eq!((first.kind, first.purpose), (MessageKind::System, Some(Purpose::Bundle)));

    let mut sub = c.thread_subscribe(branch.id.clone(), None, None).await.unwrap();
    ask(&c, &branch.id, "Branch question").await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let recs = kd_tests::records(&record);
    let prompt = kd_tests::prompt_of(&recs[1]);
    for part in
        ["=== AGENTS.md ===\nAlways run the tests.", "=== CLAUDE.md ===\nUse British spelling.", "Branch question"]
    {
        assert!(prompt.contains(part), "{part:?} missing from the branch's first prompt:\n{prompt}");
    }
    assert!(!prompt.contains("Not in the bundle") && !prompt.contains("Trunk question"), "{prompt}");
    let argv: Vec<&str> = recs[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(!argv.contains(&"--resume"), "the branch never resumes the trunk's session: {argv:?}");
    let sessions = c.session_list(Some(branch.id.clone()), None, None).await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_ne!(sessions[0].id, parent_session.id);

    // Every branch starts so: one made by thread.create with a parent, and a
    // new thread of `kd ask --new`, which branches off the trunk.
    let made =
        c.thread_create(ws.path(), None, None, None, None, None, Some(trunk.id.clone()), None, None).await.unwrap();
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["ask", "--new", "--async", "A new topic"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let asked = c.thread_get(out.stdout.trim().to_string()).await.unwrap();
    assert_eq!((asked.lineage, asked.parent.as_ref()), (Lineage::Branch, Some(&trunk.id)));
    for t in [&made.id, &asked.id] {
        let first = &c.thread_messages(t.clone(), None, None, None, None).await.unwrap()[0];
        assert_eq!(first.purpose, Some(Purpose::Bundle), "{t}");
        assert!(first.body.contains("Always run the tests."), "{}", first.body);
    }
    let messages = c.thread_messages(asked.id.clone(), None, None, None, None).await.unwrap();
    assert_eq!((messages[1].kind, messages[1].body.as_str()), (MessageKind::King, "A new topic"));
    assert_eq!(asked.title.as_deref(), Some("A new topic"), "titled from the question, not the bundle");
}

/// The prompts `record` holds that contain `needle`.
fn prompts_with(record: &str, needle: &str) -> Vec<String> {
    kd_tests::records(record).iter().map(kd_tests::prompt_of).filter(|p| p.contains(needle)).collect()
}

/// `kd fork` in `ws` with `args`; the branch.
async fn fork(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> String {
    fork_saying(kdd, ws, args).await.0
}

/// `kd fork` in `ws` with `args`; the branch and what kd said of it.
async fn fork_saying(kdd: &Kdd, ws: &Workspace, args: &[&str]) -> (String, String) {
    let mut k = kdd.kd();
    k.current_dir(ws.path()).arg("fork").args(args);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    (out.stdout.trim().to_string(), out.stderr)
}

/// Asks `body` in `thread` and waits for its `members` answers.
async fn ask_and_wait(c: &kd_client::Client, thread: &str, body: &str, members: usize) {
    let mut sub = c.thread_subscribe(thread.into(), None, None).await.unwrap();
    ask(c, thread, body).await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == members).await;
}

/// Issue 31 item 3: a fork carries its parent's conversation into the
/// branch's prompt by default (`--carry conversation`), or a summary made
/// at fork time (`--carry summary`), or only the bundle (`--carry none`);
/// `lifecycle.fork_carry` sets the default, and a client that names no
/// carry gets it.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_carries_the_parents_conversation_or_a_summary_or_nothing() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let rules = serde_json::json!([["[Summary]", "They chose to shard orders by tenant."]]).to_string();
    let configure = |lifecycle: serde_json::Value| {
        ws.write_config(&serde_json::json!({
            "council": {"members": ["claude", "codex"]},
            "agents": {
                "claude": kd_tests::fake("claude", "claude", &[("FAKE_RECORD", &record), ("FAKE_TEXT", "Shard by tenant."), ("FAKE_RULES", &rules)]),
                "codex": kd_tests::fake("codex", "codex", &[("FAKE_TEXT", "Add an index first.")])
            },
            "lifecycle": lifecycle,
        }))
    };
    configure(serde_json::json!({"summarizer": "claude"}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let trunk = kd_tests::new_thread(&c, &ws.path()).await;
    ask_and_wait(&c, &trunk, "How do we scale orders?", 2).await;
    let conversation = "king: How do we scale orders?\n\nclaude: Shard by tenant.\n\ncodex: Add an index first.";

    // By default: the conversation, in the history format, then the branch's own.
    let (carried, said) = fork_saying(&kdd, &ws, &["--title", "Try tenants", &trunk]).await;
    assert!(said.contains(&format!("kd: its context bundle: conversation of thread {trunk}, up to #3")), "{said}");
    ask_and_wait(&c, &carried, "Question A in the branch", 2).await;
    let p = prompts_with(&record, "Question A in the branch").pop().expect("claude was asked in the branch");
    assert!(p.contains(conversation), "the parent's conversation is carried:\n{p}");
    assert!(p.find(conversation) < p.find("king: Question A in the branch"), "before the branch's own:\n{p}");
    let bundle = &c.thread_messages(carried.clone(), None, None, None, None).await.unwrap()[0];
    assert_eq!(bundle.purpose, Some(Purpose::Bundle));
    assert!(bundle.body.contains(conversation), "{}", bundle.body);

    // --carry none: the seed's minimal bundle.
    let bare = fork(&kdd, &ws, &["--carry", "none", &trunk]).await;
    ask_and_wait(&c, &bare, "Question B in the branch", 2).await;
    let p = prompts_with(&record, "Question B in the branch").pop().unwrap();
    assert!(!p.contains("How do we scale orders?") && !p.contains("Shard by tenant."), "nothing carried:\n{p}");

    // --carry summary: the summarizer's summary, made now.
    let (summed, said) = fork_saying(&kdd, &ws, &["--carry", "summary", &trunk]).await;
    assert!(said.contains(&format!("kd: its context bundle: summary of thread {trunk}, made at the fork")), "{said}");
    ask_and_wait(&c, &summed, "Question C in the branch", 2).await;
    let p = prompts_with(&record, "Question C in the branch").pop().unwrap();
    assert!(p.contains("They chose to shard orders by tenant."), "the summary is carried:\n{p}");
    assert!(!p.contains(conversation), "not the conversation:\n{p}");

    // The workspace's default, for kd fork and for a client that names none.
    configure(serde_json::json!({"fork_carry": "none"}));
    let by_config = fork(&kdd, &ws, &[&trunk]).await;
    let old_client = kd_tests::rpc_post(
        &kdd.socket,
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "thread.fork", "params": {"thread": trunk}})
            .to_string(),
    );
    let old_client = old_client["result"]["id"].as_str().expect("thread.fork without carry").to_string();
    for branch in [by_config, old_client] {
        let first = &c.thread_messages(branch.clone(), None, None, None, None).await.unwrap();
        assert!(first.iter().all(|m| !m.body.contains("Shard by tenant.")), "{branch}: {first:?}");
    }
    // A carry kd does not know is refused, and nothing is made.
    let before = c.thread_list(None, None, None).await.unwrap().len();
    let bad = kd_tests::rpc_post(
        &kdd.socket,
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "thread.fork", "params": {"thread": trunk, "carry": "all"}})
            .to_string(),
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let why = bad["error"]["data"].as_str().unwrap_or_default();
    assert!(why.contains("expected one of `conversation`, `summary`, `none`"), "{bad}");
    assert_eq!(c.thread_list(None, None, None).await.unwrap().len(), before);
    configure(serde_json::json!({}));
    let old_client = kd_tests::rpc_post(
        &kdd.socket,
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "thread.fork", "params": {"thread": trunk}})
            .to_string(),
    );
    let branch = old_client["result"]["id"].as_str().unwrap().to_string();
    let first = &c.thread_messages(branch, None, None, None, None).await.unwrap()[0];
    assert!(first.body.contains(conversation), "the default carries the conversation: {}", first.body);
}

/// In resume mode the branch's members start sessions of their own, given
/// the carried conversation once, in their first prompt.
#[tokio::test(flavor = "multi_thread")]
async fn a_resume_mode_fork_gives_the_carried_conversation_once() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_RECORD", &record), ("FAKE_TEXT", "Shard by tenant.")])},
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let trunk = c
        .thread_create(ws.path(), None, None, None, None, None, None, Some(true), Some(ContextMode::Resume))
        .await
        .unwrap()
        .id;
    ask_and_wait(&c, &trunk, "How do we scale orders?", 1).await;
    let branch = fork(&kdd, &ws, &[&trunk]).await;
    ask_and_wait(&c, &branch, "First in the branch", 1).await;
    ask_and_wait(&c, &branch, "Second in the branch", 1).await;
    let recs = kd_tests::records(&record);
    let argv = |r: &serde_json::Value| -> Vec<String> {
        r["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
    };
    let first = recs.iter().find(|r| kd_tests::prompt_of(r).contains("First in the branch")).unwrap();
    assert!(kd_tests::prompt_of(first).contains("king: How do we scale orders?\n\nclaude: Shard by tenant."));
    assert!(!argv(first).contains(&"--resume".to_string()), "a session of its own: {:?}", argv(first));
    let second = recs.iter().find(|r| kd_tests::prompt_of(r).contains("Second in the branch")).unwrap();
    assert!(argv(second).contains(&"--resume".to_string()), "{:?}", argv(second));
    assert!(!kd_tests::prompt_of(second).contains("How do we scale orders?"), "given once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_branch_archived_by_a_read_gets_the_summarizers_summary_and_offers_it_to_its_trunk() {
    let ws = Workspace::new(&[]);
    let rules = serde_json::json!([["[Summary]", "They agreed to shard by tenant."]]).to_string();
    let configure = |lifecycle: serde_json::Value| {
        ws.write_config(&serde_json::json!({
            "council": {"members": ["claude"]},
            "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_TEXT", "Shard by tenant."), ("FAKE_RULES", &rules)])},
            "lifecycle": lifecycle,
        }))
    };
    configure(serde_json::json!({"summarizer": "claude"}));
    // No reaper pass for a minute: only reading the thread ages it.
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let (trunk, branch) = sharding_branch(&c, &ws, 1).await;
    let mut trunk_sub = c.thread_subscribe(trunk.clone(), None, None).await.unwrap();
    // Now a second of quiet archives a branch.
    configure(serde_json::json!({"summarizer": "claude", "idle_after": "1s", "archive_after": "1s"}));
    kd_tests::within("the branch archived by a read", async {
        while c.thread_get(branch.clone()).await.unwrap().status != ThreadStatus::Archived {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    let events = collect_until(&mut trunk_sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Message { message } if message.purpose == Some(Purpose::Summary)))
    })
    .await;
    let offered = events.iter().find_map(|e| match e {
        ThreadEvent::Message { message } if message.purpose == Some(Purpose::Summary) => Some(message.body.clone()),
        _ => None,
    });
    assert_eq!(
        offered.as_deref(),
        Some(format!("[Summary of branch {branch} (Sharding), archived]\n\nThey agreed to shard by tenant.").as_str())
    );
    let t = c.thread_get(branch.clone()).await.unwrap();
    assert_eq!(t.summary.as_deref(), Some("They agreed to shard by tenant."));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_summarizer_writes_the_summary_at_archive_and_the_trunk_is_given_it() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let rules = serde_json::json!([["[Summary]", "They agreed to shard by tenant."]]).to_string();
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {
            "claude": kd_tests::fake("claude", "claude", &[("FAKE_RECORD", &record), ("FAKE_TEXT", "Shard by tenant."), ("FAKE_RULES", &rules)]),
            "codex": kd_tests::fake("codex", "codex", &[("FAKE_TEXT", "Agreed.")])
        },
        "lifecycle": {"summarizer": "claude"},
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let (trunk, branch) = sharding_branch(&c, &ws, 2).await;
    let mut trunk_sub = c.thread_subscribe(trunk.clone(), None, None).await.unwrap();

    let mut k = kdd.kd();
    k.args(["archive", &branch]);
    assert!(run(k).await.status.success());
    // The trunk is offered the summarizer's summary.
    let events = collect_until(&mut trunk_sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Message { message } if message.purpose == Some(Purpose::Summary)))
    })
    .await;
    let offered = events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::Message { message } if message.purpose == Some(Purpose::Summary) => Some(message.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        offered.body,
        format!("[Summary of branch {branch} (Sharding), archived]\n\nThey agreed to shard by tenant.")
    );
    let t = c.thread_get(branch.clone()).await.unwrap();
    assert_eq!(t.summary.as_deref(), Some("They agreed to shard by tenant."));
    let summary_prompt = kd_tests::records(&record).iter().map(kd_tests::prompt_of).find(|p| p.contains("[Summary]"));
    let summary_prompt = summary_prompt.expect("the summarizer was asked");
    assert!(summary_prompt.contains("How do we scale orders?") && summary_prompt.contains("codex: Agreed."));
    // The trunk's members are given it with the history.
    let mut trunk_sub = c.thread_subscribe(trunk.clone(), None, None).await.unwrap();
    ask(&c, &trunk, "What did the branch find?").await.unwrap();
    collect_until(&mut trunk_sub, |e| kd_tests::ended(e) == 2).await;
    let last = kd_tests::records(&record).iter().map(kd_tests::prompt_of).next_back().unwrap();
    assert!(last.contains("They agreed to shard by tenant.") && last.contains("What did the branch find?"), "{last}");

    // kd summarize without a summarizer: the extractive summary.
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {
            "claude": kd_tests::fake("claude", "claude", &[("FAKE_TEXT", "Shard by tenant.")]),
            "codex": kd_tests::fake("codex", "codex", &[("FAKE_TEXT", "Agreed.")])
        },
    }));
    let mut k = kdd.kd();
    k.args(["summarize", &trunk]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.starts_with("The King asked:\n- What did the branch find?"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_current_branch_is_archived_the_trunk_is_current_again() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = reaping();
    let c = kdd.client().await;
    let trunk = kd_tests::new_thread(&c, &ws.path()).await;
    let branch = c.thread_fork(trunk.clone(), None, None, None).await.unwrap().id;
    assert_eq!(c.thread_current(ws.path(), None).await.unwrap().unwrap().id, branch);
    let mut sub = c.thread_subscribe(branch.clone(), None, None).await.unwrap();
    config(&ws, serde_json::json!({"idle_after": "1s", "archive_after": "2s"}));
    until_status(&mut sub, ThreadStatus::Archived).await;
    // `kd ask` in the workspace asks in the trunk, not an archived thread.
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["ask", "--async", "Where now?"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), trunk);
    assert_eq!(c.thread_current(ws.path(), None).await.unwrap().unwrap().id, trunk);
    // Named explicitly, the archived branch still refuses.
    assert_eq!(ask(&c, &branch, "Hello?").await.unwrap_err().code(), Some(ErrorCode::ThreadArchived));
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_delete_asks_on_a_terminal_and_keeps_the_thread_unless_told_yes() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    c.thread_set_title(t.clone(), "Keep me".into()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tmux = kd_tests::tmux::Tmux::start(dir.path(), dir.path());
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    let delete =
        format!("KD_NO_AUTOSTART=1 {} --socket {} delete {t}", kd_tests::bin("kd").display(), kdd.socket.display());
    tmux.type_line(&delete);
    tmux.wait_for("the question", |s| s.contains(&format!("Delete thread {t} (Keep me) and its 0 messages? [y/N]")))
        .await;
    tmux.type_line("n");
    tmux.wait_for("the answer", |s| s.contains(&format!("kept thread {t}"))).await;
    assert!(c.thread_get(t.clone()).await.is_ok(), "kept");
    tmux.type_line(&delete);
    tmux.wait_for("the question again", |s| s.matches("[y/N]").count() == 2).await;
    tmux.type_line("y");
    tmux.wait_for("the deletion", |s| s.contains(&format!("deleted thread {t} (0 messages)"))).await;
    assert!(c.thread_get(t).await.is_err(), "deleted");
}
