//! What a cost costs at scale (issue 21): a registry of N messages in N/100
//! threads of 25 exchanges (the King and three members' answers, each a
//! run), written as kd wrote it before the cost ledger (schema 9), then
//! migrated by kdd's start. `cost.report` over the socket, p50 and p99: one
//! thread's (the `kd show` footer, the chat's status bar), every thread's
//! by member (`kd cost`), by thread (`kd threads --cost`), by day, and
//! since a week; beside the scan of every message the report was before the
//! ledger, run on the same file, and the ratio.
//!
//! `KD_BENCH_COST_MESSAGES` sets N (default 100,000; the SPEC row is at
//! 1,000,000: 731 MB when the issue measured it).

use std::path::Path;
use std::time::{Duration, Instant};

use kd_client::prelude::*;
use kd_proto::types::CostBy;
use rusqlite::{Connection, params};

use super::{check, ms, percentile, row};
use crate::Kdd;

/// Schema 9, the last before the ledger: the first nine migrations.
const SCHEMA_9: usize = 9;

/// The migrations up to schema 9, read from `migrations/` in order.
fn schema_9() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(&dir).expect("migrations/").filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    files.iter().take(SCHEMA_9).map(|f| std::fs::read_to_string(f).expect("a migration")).collect()
}

const PER_THREAD: usize = 100;
const WORKSPACES: usize = 10;
const MEMBERS: [&str; 3] = ["claude", "codex", "gemini"];

fn thread_id(i: usize) -> String {
    format!("b{i:06}")
}

/// An answer of about 700 characters.
fn answer(n: usize) -> String {
    format!(
        "Answer {n}: the migration adds a nullable column first, backfills it in batches of a thousand rows, then \
         makes it NOT NULL once every writer sends it. Rolling back drops the column; readers never see a \
         half-written row because each batch commits on its own. Tests cover the empty table, the table with one \
         row and the table under concurrent writes. The index is built after the backfill, concurrently, so \
         writers are not blocked; its name follows the table's convention. Two call sites still read the old \
         column and are changed in the same commit; the ORM's model gains the field with a default."
    )
}

/// What the run of `member` reported, as kd stored it in `messages.run`.
fn run_meta(member: &str, run: &str, ordinal: usize, x: usize) -> String {
    match member {
        "claude" => format!(
            r#"{{"backend_session_id":"8f1c2a9e-{ordinal}","duration_ms":2145,"cost_usd":0.0123,"usage":{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":300}},"exit_status":0,"run_id":"{run}","backend":"claude","ordinal":{ordinal}}}"#,
            1200 + x
        ),
        "codex" => format!(
            r#"{{"backend_session_id":"0199-{ordinal}","duration_ms":3120,"usage":{{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}},"exit_status":0,"run_id":"{run}","backend":"codex","ordinal":{ordinal}}}"#
        ),
        _ => format!(
            r#"{{"duration_ms":2870,"usage":{{"input_tokens":900,"output_tokens":30}},"exit_status":0,"run_id":"{run}","backend":"gemini","ordinal":{ordinal}}}"#
        ),
    }
}

/// Writes a schema-9 registry of `threads` threads at `path`, spread over
/// the last year (each thread's exchanges a minute apart).
fn build(path: &Path, threads: usize) -> rusqlite::Result<()> {
    let mut conn = Connection::open(path)?;
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")?;
    for sql in schema_9() {
        conn.execute_batch(&sql)?;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let year = 365 * 86_400_000_i64;
    let tx = conn.transaction()?;
    {
        let mut thread = tx.prepare(
            "INSERT INTO threads (id, workspace, title, lineage, parent_id, members, created_at, last_activity_at, last_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, '[\"claude\",\"codex\",\"gemini\"]', ?6, ?7, ?8)",
        )?;
        let mut message = tx.prepare(
            "INSERT INTO messages (thread_id, seq, sender, recipients, reply_to, kind, body, round, created_at, run)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?;
        let mut run = tx.prepare(
            "INSERT INTO runs (id, thread_id, member, backend, status, reply_to, round, started_at, ended_at,
                               message_seq, exchange, ordinal)
             VALUES (?1, ?2, ?3, ?3, 'done', ?4, 1, ?5, ?6, ?7, ?4, ?8)",
        )?;
        let mut ordinal = 0;
        for i in 0..threads {
            let id = thread_id(i);
            let ws = format!("/bench/w{}", i % WORKSPACES);
            let start = now - year + (i as i64) * (year / threads as i64);
            let (lineage, parent) =
                if i < WORKSPACES { ("trunk", None) } else { ("branch", Some(thread_id(i % WORKSPACES))) };
            // Active now, so the reaper leaves them be.
            thread.execute(params![
                id,
                ws,
                format!("bench thread {i}"),
                lineage,
                parent,
                start,
                now,
                PER_THREAD as i64
            ])?;
            for x in 0..PER_THREAD / 4 {
                let king = (4 * x + 1) as i64;
                let at = start + (4 * x) as i64 * 60_000;
                let question = format!("Question {x} of thread {i}: how should the schema change be rolled out?");
                message.execute(params![
                    id,
                    king,
                    "king",
                    "[\"all\"]",
                    None::<i64>,
                    "king",
                    question,
                    None::<i64>,
                    at,
                    None::<String>
                ])?;
                for (m, member) in MEMBERS.iter().enumerate() {
                    ordinal += 1;
                    let seq = king + 1 + m as i64;
                    let run_id = format!("r{i}-{seq}");
                    let meta = run_meta(member, &run_id, ordinal, x);
                    let done = at + 1_000 * (m as i64 + 1);
                    let body = answer(ordinal);
                    message.execute(params![id, seq, member, "[\"king\"]", king, "agent", body, 1, done, meta])?;
                    run.execute(params![run_id, id, member, king, at, done, seq, ordinal as i64])?;
                }
            }
        }
        // Search would index every message at kdd's start: not measured here.
        tx.execute("UPDATE counters SET value = (SELECT max(id) FROM messages) WHERE name = 'search_indexed'", [])?;
    }
    tx.commit()?;
    conn.pragma_update(None, "user_version", SCHEMA_9 as i64)?;
    conn.execute_batch("PRAGMA journal_mode = WAL;")?;
    Ok(())
}

/// What `cost.report` was before the ledger: a scan of every message, one
/// thread's as everything's; its sums and the time it took.
fn scanned(conn: &Connection, thread: Option<&str>) -> (f64, Duration) {
    let t = Instant::now();
    let cost = conn
        .query_row(
            "SELECT total(json_extract(m.run, '$.cost_usd')) FROM messages m JOIN threads t ON t.id = m.thread_id
             WHERE json_extract(m.run, '$.run_id') IS NOT NULL AND (?1 IS NULL OR m.thread_id = ?1)",
            [thread],
            |r| r.get(0),
        )
        .expect("scan");
    (cost, t.elapsed())
}

/// `samples` timings of `call`, sorted; and its last answer.
async fn timed<T, F: std::future::Future<Output = T>>(
    samples: usize,
    mut call: impl FnMut() -> F,
) -> (Vec<Duration>, T) {
    let mut last = call().await;
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        last = call().await;
        times.push(t.elapsed());
    }
    times.sort_unstable();
    (times, last)
}

pub async fn report() {
    let messages: usize =
        std::env::var("KD_BENCH_COST_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000).max(1_000);
    let threads = messages / PER_THREAD;
    let n = thousands(threads * PER_THREAD);
    if crate::engine() != crate::Engine::Sqlite {
        row("cost: a registry written at SQLite's schema 9, migrated", "SQLite only".into(), "KD_TEST_DB=postgres");
        return;
    }
    let mut kdd = Kdd::start();
    kdd.stop();
    let db = kdd.db.path().to_path_buf();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let t = Instant::now();
    build(&db, threads).expect("build the registry");
    let size = std::fs::metadata(&db).map_or(0, |m| m.len());
    row(
        &format!("cost: a registry of {n} messages in {} threads", thousands(threads)),
        format!("{:.0} MB", size as f64 / 1e6),
        &format!("built in {:.1} s", t.elapsed().as_secs_f64()),
    );
    let t = Instant::now();
    kdd.launch().expect("kdd migrates the registry");
    row("  kdd's first start, filling the ledger (migration)", format!("{:.2} s", t.elapsed().as_secs_f64()), "once");
    kdd.stop();
    let t = Instant::now();
    kdd.launch().expect("kdd starts");
    row("  kdd's start after", format!("{:.1} ms", ms(t.elapsed())), "");

    let c = kdd.client().await;
    let one = thread_id(threads / 2);
    let (times, thread_report) =
        timed(500, || c.cost_report(Some(one.clone()), None, None, Some(CostBy::Member))).await;
    let thread_report = thread_report.expect("cost.report of one thread");
    assert_eq!(thread_report.total.answers, (PER_THREAD / 4 * 3) as u64, "every answer of the thread");
    let p50 = ms(percentile(&times, 0.5));
    check(&format!("cost.report of one thread at {n} messages, p50"), format!("{p50:.3} ms"), "< 1 ms", p50 < 1.0);
    row("  p99", format!("{:.3} ms", ms(percentile(&times, 0.99))), "");

    let (times, everything) = timed(40, || c.cost_report(None, None, None, Some(CostBy::Member))).await;
    let everything = everything.expect("cost.report of everything");
    assert_eq!(everything.total.answers, (threads * PER_THREAD / 4 * 3) as u64, "every answer");
    let all_p50 = ms(percentile(&times, 0.5));
    check(
        &format!("kd cost (every thread, by member) at {n} messages, p50"),
        format!("{all_p50:.2} ms"),
        "< 50 ms",
        all_p50 < 50.0,
    );
    row("  p99", format!("{:.2} ms", ms(percentile(&times, 0.99))), "");
    for (what, f) in [
        ("  by thread (kd threads --cost), p50", (None, CostBy::Thread)),
        ("  by day, p50", (None, CostBy::Day)),
        ("  by member since 7 days, p50", (Some(7), CostBy::Member)),
    ] {
        let since = f.0.map(|days: i64| now_ms() - days * 86_400_000);
        let (times, r) = timed(20, || c.cost_report(None, None, since, Some(f.1))).await;
        let r = r.expect("cost.report");
        row(what, format!("{:.2} ms", ms(percentile(&times, 0.5))), &format!("{} rows", r.rows.len()));
    }
    let (times, _) = timed(40, || c.cost_report(None, Some("/bench/w3".into()), None, Some(CostBy::Thread))).await;
    row(
        "  one workspace by thread (kd threads --here --cost), p50",
        format!("{:.2} ms", ms(percentile(&times, 0.5))),
        "",
    );

    // The same sums as a scan of the messages (the report before the ledger).
    let conn = Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open");
    let mut scans: Vec<(f64, Duration)> = (0..5).map(|_| scanned(&conn, Some(&one))).collect();
    scans.sort_by_key(|s| s.1);
    let scan_p50 = ms(scans[2].1);
    assert!((scans[2].0 - thread_report.total.cost_usd).abs() < 1e-6, "the ledger sums what the messages carry");
    row(
        "  one thread as a scan of every message (before)",
        format!("{scan_p50:.1} ms"),
        &format!("{:.0}× the ledger", scan_p50 / p50),
    );
    let mut scans: Vec<(f64, Duration)> = (0..3).map(|_| scanned(&conn, None)).collect();
    scans.sort_by_key(|s| s.1);
    let all_scan = ms(scans[1].1);
    assert!((scans[1].0 - everything.total.cost_usd).abs() < 1e-3, "the ledger sums what the messages carry");
    row(
        "  every thread as a scan of every message (before)",
        format!("{all_scan:.1} ms"),
        &format!("{:.0}× the ledger", all_scan / all_p50),
    );
}

/// `1,000,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
