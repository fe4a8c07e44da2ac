//! The §9 rows about size: reading a 10,000-message thread, the daemon's
//! resident memory (idle, with 1,000 threads, after serving a long
//! history, beside a subscriber that never reads), and 500 agents
//! streaming at once.

use std::time::Instant;

use jsonrpsee::core::client::ClientT;
use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;

use super::{check, ms, peak_rss_mib, percentile, row, rss_mib};
use crate::{Kdd, Workspace, workspace};

/// A body like an agent's answer: a few hundred characters of prose.
fn body(i: u64) -> String {
    format!(
        "Answer {i}: the migration adds a nullable column first, backfills it in batches of a thousand rows, \
         then makes it NOT NULL once every writer sends it. Rolling back drops the column; readers never see \
         a half-written row because each batch commits on its own. Tests cover the empty table, the table \
         with one row and the table under concurrent writes."
    )
}

/// Fills a thread with `n` messages from eight writers; its id.
async fn long_thread(kdd: &Kdd, n: u64) -> String {
    let setup = kdd.client().await;
    let thread = crate::new_thread(&setup, &workspace("history")).await;
    crate::fill(kdd, &thread, n, 8, body).await;
    thread
}

/// `thread.messages` of a 10,000-message thread, whole and a page at a
/// time; then the daemon's memory after it.
///
/// The row is the call over the socket to the answer's last byte, as any
/// client on the socket gets it (plain HTTP, as `curl` would). What kd's
/// own client adds, on a persistent WebSocket connection, is printed
/// beneath: its reading of the envelope, then its decoding of 10,000
/// `Message` values.
pub async fn history() {
    const N: usize = 10_000;
    let kdd = Kdd::start();
    let thread = long_thread(&kdd, N as u64).await;
    let c = kdd.client().await;
    let before = rss_mib(kdd.pid);
    let text: usize = {
        let msgs = c.thread_messages(thread.clone(), None, None, None, None).await.expect("messages");
        assert_eq!(msgs.len(), N, "a whole thread");
        msgs.iter().map(|m| m.body.len()).sum()
    };
    let call = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.messages","params":{{"thread":"{thread}"}}}}"#);
    let mut raw = Vec::new();
    let mut answer_bytes = 0;
    for i in 0..45 {
        let t = Instant::now();
        let answer = crate::http_post_bytes(&kdd.socket, &call).expect("http");
        let took = t.elapsed();
        assert!(answer.starts_with(b"HTTP/1.1 200") && answer.len() > text, "a whole answer");
        answer_bytes = answer.len();
        if i >= 5 {
            raw.push(took);
        }
    }
    raw.sort_unstable();
    let p50 = ms(percentile(&raw, 0.5));
    check(
        &format!("thread.messages, {N} messages ({:.1} MB answer), to its last byte, p50", answer_bytes as f64 / 1e6),
        format!("{p50:.1} ms"),
        "< 20 ms",
        p50 < 20.0,
    );
    row("  p99", format!("{:.1} ms", ms(percentile(&raw, 0.99))), "");
    if kdd.db.engine() == crate::registry::Engine::Sqlite {
        beside_sqlite3(&kdd, &thread, &call);
    }
    // Through kd's WebSocket client, the answer left as JSON: the
    // transport and the envelope, without building the messages.
    let mut untyped = Vec::new();
    for _ in 0..20 {
        let mut params = jsonrpsee::core::params::ObjectParams::new();
        params.insert("thread", &thread).expect("params");
        let t = Instant::now();
        let answer: Box<serde_json::value::RawValue> = c.request("thread.messages", params).await.expect("messages");
        untyped.push(t.elapsed());
        assert!(answer.get().len() > text, "a whole answer");
    }
    untyped.sort_unstable();
    row("  through kd's client, left as JSON, p50", format!("{:.1} ms", ms(percentile(&untyped, 0.5))), "");
    let mut typed = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let msgs = c.thread_messages(thread.clone(), None, None, None, None).await.expect("messages");
        typed.push(t.elapsed());
        assert_eq!(msgs.len(), N, "a whole thread");
    }
    typed.sort_unstable();
    row(
        &format!("  through kd's client, decoded into {N} messages, p50 / p99"),
        format!("{:.1} / {:.1} ms", ms(percentile(&typed, 0.5)), ms(percentile(&typed, 0.99))),
        "",
    );
    let mut pages = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let page = c.thread_messages(thread.clone(), None, Some(200), Some(N as u64 + 1), None).await.expect("page");
        pages.push(t.elapsed());
        assert_eq!(page.len(), 200);
    }
    pages.sort_unstable();
    row("  the last 200 (limit + before_seq), p50", format!("{:.2} ms", ms(percentile(&pages, 0.5))), "");
    let after = rss_mib(kdd.pid);
    row("  kdd RSS before → right after the whole reads", format!("{before:.1} → {after:.1} MiB"), "");
    // What stays: glibc keeps the freed buffers, the readers their page cache.
    std::thread::sleep(std::time::Duration::from_secs(1));
    row("  kdd RSS 1 s later, idle", format!("{:.1} MiB", rss_mib(kdd.pid)), "");
    row("  kdd peak RSS", format!("{:.1} MiB", peak_rss_mib(kdd.pid)), "");
}

/// The same rows read by `sqlite3 -json` from kdd's own database file (the
/// columns `thread.messages` answers with, in seq order), to a pipe read to
/// its end, process start to exit — beside the call over the socket, timed
/// in turns so that both see the machine as it is.
fn beside_sqlite3(kdd: &Kdd, thread: &str, call: &str) {
    let sql = format!(
        "SELECT thread_id, seq, sender, recipients, cc, reply_to, kind, body, round, created_at, run, replaces, \
         refs, route, purpose FROM messages WHERE thread_id = '{thread}' ORDER BY seq"
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut rows_bytes = 0;
    for i in 0..25 {
        let t = Instant::now();
        let out = std::process::Command::new("sqlite3")
            .arg("-json")
            .arg(kdd.db.path())
            .arg(&sql)
            .stdin(std::process::Stdio::null())
            .output();
        let took = t.elapsed();
        let Ok(out) = out.inspect_err(|e| row("  sqlite3 -json (not run)", e.to_string(), "")) else { return };
        assert!(out.status.success(), "sqlite3: {}", String::from_utf8_lossy(&out.stderr));
        rows_bytes = out.stdout.len();
        let t = Instant::now();
        crate::http_post_bytes(&kdd.socket, call).expect("http");
        let call_took = t.elapsed();
        if i >= 5 {
            theirs.push(took);
            ours.push(call_took);
        }
    }
    theirs.sort_unstable();
    ours.sort_unstable();
    let (sq, kd) = (ms(percentile(&theirs, 0.5)), ms(percentile(&ours, 0.5)));
    row(
        &format!("  sqlite3 -json, the same rows ({:.1} MB), start → exit, p50", rows_bytes as f64 / 1e6),
        format!("{sq:.1} ms"),
        "",
    );
    row("  thread.messages in turn with it, p50", format!("{kd:.1} ms"), "");
    check("  thread.messages ÷ sqlite3 -json", format!("{:.2}×", kd / sq), "<= 0.5×", kd / sq <= 0.5);
}

/// The daemon's resident memory when idle, and with 1,000 threads.
pub async fn resident() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    c.daemon_status().await.expect("status");
    let idle = rss_mib(kdd.pid);
    check("kdd idle RSS", format!("{idle:.1} MiB"), "< 15 MB", idle * 1.048_576 < 15.0);
    let (file, anon) = super::rss_split_mib(kdd.pid);
    row("  of it mapped from files (kdd's code first) / anonymous", format!("{file:.1} / {anon:.1} MiB"), "");
    let ws = workspace("many");
    for _ in 0..1_000 {
        crate::new_thread(&c, &ws).await;
    }
    let list = c.thread_list(None, None, Some(1_000)).await.expect("list");
    let with = rss_mib(kdd.pid);
    check(
        &format!("kdd RSS with 1,000 threads, no runs ({} listed)", list.len()),
        format!("{with:.1} MiB"),
        "< 30 MB",
        with * 1.048_576 < 30.0,
    );
}

/// 500 fake agents streaming at once, one per thread, each 1,000 deltas
/// over 20 s (so that the first is still streaming when the last starts;
/// the subscribers count a run as streaming from its first delta to its
/// end, as they happen): every answer arrives whole, nothing dropped.
pub async fn concurrent_runs() {
    const RUNS: usize = 500;
    const DELTAS: usize = 1000;
    const RATE: usize = 50;
    let (deltas, rate) = (DELTAS.to_string(), RATE.to_string());
    let env: &[(&str, &str)] = &[("FAKE_PIECE", "x"), ("FAKE_DELTAS", &deltas), ("FAKE_RATE", &rate)];
    let ws = Workspace::new(&[("claude", "claude", env)]);
    let kdd = Kdd::start_with(&["--max-subscriptions", "2048"]);
    let c = kdd.client().await;
    let mut threads = Vec::new();
    for _ in 0..RUNS {
        threads.push(crate::new_thread(&c, &ws.path()).await);
    }
    let mut subs = Vec::new();
    for t in &threads {
        subs.push(c.thread_subscribe(t.clone(), None, None).await.expect("subscribe"));
    }
    let mut tasks = Vec::new();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for mut sub in subs {
        let (peak, running) = (peak.clone(), running.clone());
        tasks.push(tokio::spawn(async move {
            let (mut chars, mut lagged, mut finished, mut started) = (0u64, 0u64, false, false);
            while let Some(Ok(event)) = sub.next().await {
                match event {
                    ThreadEvent::Delta { chars: c, .. } => {
                        if !started {
                            started = true;
                            let now = running.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                            peak.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                        }
                        chars = c;
                    }
                    ThreadEvent::Lagged { missed } => lagged += missed,
                    ThreadEvent::RunFinished { .. } => {
                        finished = true;
                        break;
                    }
                    ThreadEvent::RunError { .. } | ThreadEvent::RunCancelled { .. } => break,
                    _ => {}
                }
            }
            if started {
                running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
            (chars, lagged, finished)
        }));
    }
    // The subscribers read from before the first send, so that a run counts
    // as streaming from its first delta to its end as they happen.
    let start = Instant::now();
    for t in &threads {
        c.council_send(t.clone(), "go".into(), None, None, None, None, None, Some(0), None, None).await.expect("send");
    }
    let sent = start.elapsed();
    let mut whole = 0;
    let mut lagged = 0;
    for t in tasks {
        let (chars, l, finished) = t.await.expect("subscriber");
        whole += usize::from(finished && chars == DELTAS as u64);
        lagged += l;
    }
    let took = start.elapsed();
    let mut stored = 0;
    for t in &threads {
        let msgs = c.thread_messages(t.clone(), None, None, None, None).await.expect("messages");
        stored += usize::from(msgs.iter().any(|m| m.from == "claude" && m.body.len() == DELTAS));
    }
    let peak = peak.load(std::sync::atomic::Ordering::SeqCst);
    check(
        &format!("{RUNS} fake agents streaming at once, answers whole"),
        format!("{peak} at once; {whole} live, {stored} stored"),
        "all, no loss",
        peak == RUNS && whole == RUNS && stored == RUNS && lagged == 0,
    );
    row("  lagged (items dropped)", lagged.to_string(), "0");
    row("  first send → last send", format!("{:.2} s", sent.as_secs_f64()), &format!("< {} s (a run)", DELTAS / RATE));
    row("  wall time, first send → last end", format!("{:.2} s", took.as_secs_f64()), "");
    row("  kdd peak RSS", format!("{:.1} MiB", peak_rss_mib(kdd.pid)), "");
}

/// A subscriber that never reads while an agent streams 200,000 deltas:
/// kdd's memory stays bounded, and a reading subscriber gets everything.
pub async fn stalled_subscriber() {
    let env: &[(&str, &str)] = &[("FAKE_PIECE", "x"), ("FAKE_DELTAS", "200000")];
    let ws = Workspace::new(&[("claude", "claude", env)]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = crate::new_thread(&c, &ws.path()).await;
    let before = rss_mib(kdd.pid);
    let call = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{{"thread":"{t}"}}}}"#);
    let stalled = crate::stalled_websocket(&kdd.socket, &[&call]);
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.expect("subscribe");
    c.council_send(t, "go".into(), None, None, None, None, None, Some(0), None, None).await.expect("send");
    let mut chars = 0;
    while let Some(Ok(event)) = sub.next().await {
        match event {
            ThreadEvent::Delta { chars: n, .. } => chars = n,
            ThreadEvent::RunFinished { .. } | ThreadEvent::RunError { .. } => break,
            _ => {}
        }
    }
    let peak = peak_rss_mib(kdd.pid);
    let grew = peak - before;
    check(
        "a subscriber that never reads, 200,000 deltas: kdd peak RSS growth",
        format!("+{grew:.1} MiB"),
        "bounded (< 64 MiB)",
        grew < 64.0,
    );
    check("  the reading subscriber got every character", format!("{chars}/200000"), "all", chars == 200_000);
    drop(stalled);
}
