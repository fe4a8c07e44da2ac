//! Streaming cost stays proportional (issue 9 item 7): a long answer is
//! written to disk a bounded number of times whatever its length and
//! duration, the WAL is checkpointed by size and does not keep growing, an
//! answer past `council.max_answer_bytes` ends its run with the text up to
//! the cap kept, and message bodies are stored once (the event log refers
//! to them); a large answer's buffers are given back a moment after it.

use kd_client::prelude::*;
use kd_proto::types::{MessageKind, ThreadEvent};
use kd_tests::{Kdd, Workspace, collect_until, ended, fake, within};

const MIB: u64 = 1024 * 1024;

/// A `/proc/PID/io` or `/proc/PID/status` figure.
fn proc_figure(pid: u32, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in {file}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// Bytes kdd's own threads passed to write(2) (`/proc/PID/io` would count
/// the agents it reaped too: their output to kdd).
fn written_by_threads(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| {
            let io = std::fs::read_to_string(t.path().join("io")).unwrap_or_default();
            io.lines().find_map(|l| l.strip_prefix("wchar:")).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0)
        })
        .sum()
}

/// Waits until the answer (message 2) is written, without subscribing (a
/// subscriber's deltas would count as the daemon's writes).
async fn until_idle(c: &kd_client::Client, thread: &str) {
    within("the run to end", async {
        while c.thread_get(thread.to_string()).await.unwrap().last_seq < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_answer_is_written_a_bounded_number_of_times_and_the_wal_stays_small() {
    kd_tests::sqlite_only!("it counts kdd's own writes to its SQLite file and the size of its WAL");
    // 12 MiB over about 12 s: a save each second of the whole text so far
    // would write ~78 MiB for the partial text alone.
    let piece = "x".repeat(1024);
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_DELTAS", "12288"), ("FAKE_PIECE", &piece), ("FAKE_RATE", "1024")],
    )]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let before = written_by_threads(kdd.pid);
    c.council_send(t.clone(), "Write a lot.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    until_idle(&c, &t).await;
    let written = written_by_threads(kdd.pid) - before;
    let answer = c.thread_messages(t.clone(), Some(1), None, None, None).await.unwrap().pop().unwrap();
    assert_eq!(answer.body.len() as u64, 12 * MIB);
    let ratio = written as f64 / (12 * MIB) as f64;
    eprintln!("12 MiB answer: kdd wrote {:.1} MiB ({ratio:.1}x)", written as f64 / MIB as f64);
    // The text in the WAL and in the database, as partial text and as the
    // message: 4x, and a little for pages and the log.
    assert!(ratio < 5.0, "kdd wrote {ratio:.1}x the answer");
    let wal = std::fs::metadata(format!("{}-wal", kdd.db.path().display())).map(|m| m.len()).unwrap_or(0);
    eprintln!("WAL after the run: {:.1} MiB", wal as f64 / MIB as f64);
    assert!(wal < 24 * MIB, "the WAL grew to {wal} bytes");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_past_max_answer_bytes_ends_its_run_with_the_text_up_to_the_cap() {
    let piece = "y".repeat(1000);
    let ws = Workspace::new(&[]);
    let env = [("FAKE_DELTAS", "3000"), ("FAKE_PIECE", piece.as_str())];
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"], "max_answer_bytes": MIB},
        "agents": {"claude": fake("claude", "claude", &env)},
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Too much.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    let error = events.iter().find_map(|e| match e {
        ThreadEvent::RunError { error, .. } => Some(error.clone()),
        _ => None,
    });
    let error = error.expect("the run ends as an error");
    assert!(error.contains("council.max_answer_bytes") && error.contains("1 MiB"), "{error}");
    let answer = c.thread_messages(t, Some(1), None, None, None).await.unwrap().pop().unwrap();
    assert_eq!(answer.kind, MessageKind::Error);
    let kept = answer.body.rsplit("\n---\n").next().unwrap();
    assert_eq!(kept.len() as u64, MIB, "the text up to the cap is kept");
    assert!(kept.bytes().all(|b| b == b'y'));
    let streamed: usize =
        events.iter().map(|e| if let ThreadEvent::Delta { text, .. } = e { text.len() } else { 0 }).sum();
    assert_eq!(streamed as u64, MIB, "nothing past the cap reached subscribers");
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_is_bounded_by_the_default_answer_cap() {
    // 64 MiB from the agent; the default cap is 16 MiB.
    let piece = "z".repeat(64 * 1024);
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_DELTAS", "1024"), ("FAKE_PIECE", &piece)])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    c.council_send(t.clone(), "Even more.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    until_idle(&c, &t).await;
    let peak = proc_figure(kdd.pid, "status", "VmHWM:") * 1024;
    eprintln!("kdd peak RSS with a 64 MiB answer: {:.0} MiB", peak as f64 / MIB as f64);
    let answer = c.thread_messages(t, Some(1), None, None, None).await.unwrap().pop().unwrap();
    assert_eq!(answer.kind, MessageKind::Error, "cut at 16 MiB");
    // On PostgreSQL the driver also encodes the 16 MiB answer into its send
    // buffer; either way far below the 64 MiB the agent said, twice over.
    // Measured (debug build): 142 MiB on SQLite and 186 MiB on PostgreSQL
    // with glibc's pages, 148 and 180–205 MiB since buffers of 2 MiB or
    // more are in huge pages (`kdd::memory::Allocator`: each one's last
    // huge page is resident whole).
    let bound = match kd_tests::engine() {
        kd_tests::Engine::Sqlite => 160 * MIB,
        kd_tests::Engine::Postgres => 224 * MIB,
    };
    assert!(peak < bound, "peak RSS {peak}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_body_is_stored_once_and_the_event_log_still_gives_it() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, "/tmp").await;
    let body = "b".repeat(MIB as usize);
    kd_tests::append(&c, &t, "king", body.clone(), &[]).await;
    let events = c.events_list(Some(t.clone()), None, Some("message".into()), None, None, None).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data["body"].as_str(), Some(body.as_str()), "the event log gives the body");
    let stored = kdd.db.one("SELECT length(data) FROM conversation_events WHERE kind = 'message'", &[]).int();
    assert!(stored < 1024, "the event copies the body: {stored} bytes");
}

/// kdd's mappings of large buffers (made by its allocator, advised for
/// huge pages, `hg` in `/proc/PID/smaps`), live or waiting for the next.
fn huge_mappings(pid: u32) -> usize {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    smaps.lines().filter_map(|l| l.strip_prefix("VmFlags:")).filter(|f| f.split_whitespace().any(|f| f == "hg")).count()
}

/// A large answer's buffers wait a moment for the next answer, and are
/// given back once none came: no mapping of them is left a few seconds
/// after the last read.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_answers_buffers_are_given_back_once_no_answer_needs_them() {
    if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
        return kd_tests::skip(
            "a_large_answers_buffers_are_given_back_once_no_answer_needs_them",
            "no transparent huge pages: kdd's large buffers are not told apart",
        );
    }
    let kdd = Kdd::start();
    let ws = Workspace::new(&[]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    kd_tests::fill(&kdd, &t, 2_000, 4, |i| format!("{i}: {}", "words ".repeat(300))).await;
    let call = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.messages","params":{{"thread":"{t}"}}}}"#);
    let answer = kd_tests::http_post_bytes(&kdd.socket, &call).unwrap();
    assert!(answer.len() > 3_000_000, "a large answer: {} bytes", answer.len());
    assert!(huge_mappings(kdd.pid) > 0, "the answer's buffers are there a moment after it");
    within("the buffers given back", async {
        while huge_mappings(kdd.pid) > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
}
