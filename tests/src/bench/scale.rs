//! A registry at scale (issue 25, §9): N messages (default 1,000,000,
//! `KD_BENCH_SCALE_MESSAGES`) in N/100 threads over ten workspaces, on the
//! engine `KD_TEST_DB` selects. The registry is one kdd made (migrated),
//! filled by the database itself (`generate_series`, SQLite's recursive
//! CTE) rather than by a million appends; then kdd starts on it: its start
//! time, `kd threads` (every thread, the real command) and `search.query`
//! p50, and its RSS.

use std::time::{Duration, Instant};

use kd_client::prelude::*;

use super::{ms, percentile, row, rss_mib};
use crate::{Engine, Kdd, TestDb, bin};

/// Messages per thread.
const PER_THREAD: usize = 100;

/// Terms the bodies hold, one of each per message: what the searches ask.
const TERMS: usize = 5_000;

/// Fills `db` (migrated, no thread yet) with `messages` messages in
/// `messages / PER_THREAD` threads: a trunk per workspace, the rest its
/// branches.
fn fill(db: &TestDb, messages: usize) {
    let threads = messages / PER_THREAD;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let series = |n: usize| match db.engine() {
        Engine::Sqlite => (
            format!("WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {}) ", n - 1),
            "FROM s".to_string(),
        ),
        Engine::Postgres => (String::new(), format!("FROM generate_series(0, {}) AS s(i)", n - 1)),
    };
    let (with, from) = series(threads);
    db.execute_at_length(
        &format!(
            "{with}INSERT INTO threads (id, workspace, title, created_at, last_activity_at, last_seq, members, \
             lineage, parent_id) \
             SELECT 'b' || i, '/bench/workspace-' || (i % 10), 'Thread ' || i || ' of the bench', \
             {now} - i * 1000, {now} - i * 1000, {PER_THREAD}, '[\"claude\",\"codex\",\"gemini\"]', \
             CASE WHEN i < 10 THEN 'trunk' ELSE 'branch' END, CASE WHEN i >= 10 THEN 'b' || (i % 10) END {from}"
        ),
        &[],
    );
    let (with, from) = series(messages);
    db.execute_at_length(
        &format!(
            "{with}INSERT INTO messages (thread_id, seq, sender, recipients, kind, body, created_at) \
             SELECT 'b' || (i / {PER_THREAD}), i % {PER_THREAD} + 1, \
             CASE i % 4 WHEN 0 THEN 'king' WHEN 1 THEN 'claude' WHEN 2 THEN 'codex' ELSE 'gemini' END, \
             CASE i % 4 WHEN 0 THEN '[\"all\"]' ELSE '[\"king\"]' END, \
             CASE i % 4 WHEN 0 THEN 'king' ELSE 'agent' END, \
             'Answer ' || i || ': the migration adds a nullable column term' || (i % {TERMS}) || ' first, backfills \
             it in batches of a thousand rows, then makes it NOT NULL once every writer sends it; rolling back drops \
             the column and readers never see a half-written row.', \
             {now} - (i / {PER_THREAD}) * 1000 + i % {PER_THREAD} {from}"
        ),
        &[],
    );
}

/// SQLite indexes messages for search after they are written
/// (`search_indexed`): waits until it has caught up; how long it took.
fn indexed(db: &TestDb) -> Option<Duration> {
    if db.engine() != Engine::Sqlite {
        return None;
    }
    let start = Instant::now();
    let last = db.one("SELECT max(id) FROM messages", &[]).int();
    while db.one("SELECT value FROM counters WHERE name = 'search_indexed'", &[]).int() < last {
        std::thread::sleep(Duration::from_millis(200));
    }
    Some(start.elapsed())
}

pub async fn report(messages: usize) {
    let engine = crate::engine();
    let mut kdd = Kdd::start();
    assert!(kdd.stop().success());
    let filling = Instant::now();
    fill(&kdd.db, messages);
    let threads = messages / PER_THREAD;
    row(
        &format!("{engine:?}: registry of {messages} messages in {threads} threads, written in"),
        format!("{:.1} s", filling.elapsed().as_secs_f64()),
        "",
    );
    let start = Instant::now();
    kdd.launch().expect("kdd starts on the registry");
    row(&format!("{engine:?}: kdd start, until it serves"), format!("{:.0} ms", ms(start.elapsed())), "");
    if let Some(took) = indexed(&kdd.db) {
        row(
            &format!("{engine:?}: search index caught up after the start in"),
            format!("{:.1} s", took.as_secs_f64()),
            "",
        );
    }
    let mut times = Vec::new();
    for _ in 0..15 {
        let start = Instant::now();
        let out = std::process::Command::new(bin("kd"))
            .arg("--socket")
            .arg(&kdd.socket)
            .args(["threads"])
            .env("KD_NO_AUTOSTART", "1")
            .output()
            .expect("kd threads");
        times.push(start.elapsed());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.len() > threads * 20, "every thread listed");
    }
    times.sort();
    row(
        &format!("{engine:?}: kd threads ({threads} threads), p50"),
        format!("{:.1} ms", ms(percentile(&times, 0.5))),
        "",
    );
    let c = kdd.client().await;
    let mut times = Vec::new();
    for n in 0..40 {
        let term = format!("term{}", (n * 997) % TERMS);
        let start = Instant::now();
        let hits = c.search_query(term, None, None, None, Some(20)).await.expect("search.query");
        times.push(start.elapsed());
        assert_eq!(hits.len(), 20.min(messages / TERMS), "each term is in {} messages", messages / TERMS);
    }
    times.sort();
    let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
    row(&format!("{engine:?}: search.query, 20 hits, p50 / p99"), format!("{:.1} / {:.1} ms", ms(p50), ms(p99)), "");
    row(&format!("{engine:?}: kdd RSS after"), format!("{:.1} MiB", rss_mib(kdd.pid)), "");
}
