//! The crash loop (SPEC §10, issue 12): kdd is killed with SIGKILL at a
//! random moment, again and again, while three agents stream and several
//! clients append; after each restart nothing acknowledged is lost.
//!
//! Each round: three fake members start streaming long answers; three
//! clients append to a shared log thread as fast as they can, recording
//! every append the daemon acknowledged; after a random 10–2,500 ms kdd gets
//! `kill -9`. Before the restart the database is read directly (which runs
//! were in flight, their agents' pids, their saved text); after it:
//!
//! - every acknowledged append is there, with its body, at its seq;
//! - seq is dense (1..=n) in every thread;
//! - every run in flight is `interrupted`, its message the saved text;
//! - no agent process of the dead daemon is alive;
//! - no session is left active, no lock held by the dead daemon's pid;
//! - `PRAGMA integrity_check` is `ok`.
//!
//! Beside them, every round starts a council exchange (issue 24: three
//! members of short answers, a broadcast and two auto-rounds) in a second
//! workspace that resumes what a kill cut. After each restart no step has
//! been answered twice (counted from the messages themselves, and by the
//! journal's step of each answer); after the last round, with no more
//! kills, every exchange completes with its nine answers, each once. A vote
//! with a synthesis (`completion.agents`) runs beside each, its call cut by
//! the kill: in the end each has three answers, three ballots, one tally
//! and one synthesis.
//!
//! It prints the figures and exits non-zero if any check failed. Not part
//! of `cargo test` (it takes a few minutes):
//!
//! `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench crash_loop`
//! (`KD_CRASH_ROUNDS=N` for another number of rounds than 100).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use kd_tests::{Kdd, TestDb, Workspace, collect_until};

/// What a round found wrong, if anything.
#[derive(Default)]
struct Tally {
    kills: usize,
    acknowledged: usize,
    found: usize,
    in_flight: usize,
    interrupted_with_text: usize,
    /// Of those, how many had said something (not the placeholder).
    saved_nonempty: usize,
    orphans: usize,
    /// Council exchanges started, and completed in the end.
    exchanges: usize,
    completed: usize,
    /// Steps whose run was cut and asked again.
    rerun: usize,
    /// Cut answers replaced by a new one.
    replaced: usize,
    /// Steps answered twice (must be 0).
    duplicates: usize,
    /// Steps given up after council.resume_attempts.
    given_up: usize,
    failures: Vec<String>,
}

/// A run in flight when kdd died, as the database had it.
struct InFlight {
    id: String,
    pid: Option<i64>,
    saved: String,
}

fn main() {
    let rounds: usize = std::env::var("KD_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let tally = kd_tests::bench::block_on(crash_loop(rounds));
    println!("\ncrash loop: {rounds} rounds");
    println!("  kills (SIGKILL)                       {}", tally.kills);
    println!("  appends acknowledged before the kill  {}", tally.acknowledged);
    println!("  found after the restart               {}", tally.found);
    println!("  runs in flight at the kill            {}", tally.in_flight);
    println!("    recorded interrupted, saved text    {}", tally.interrupted_with_text);
    println!("      of which had said something       {}", tally.saved_nonempty);
    println!("  agent processes left alive            {}", tally.orphans);
    println!("  council exchanges started             {}", tally.exchanges);
    println!("    completed                           {}   (must equal started)", tally.completed);
    println!("    steps asked again after a kill      {}", tally.rerun);
    println!("    cut answers replaced                {}", tally.replaced);
    println!("    steps answered twice                {}   (must be 0)", tally.duplicates);
    println!("    steps left failed                   {}", tally.given_up);
    println!("  failed checks                         {}", tally.failures.len());
    for f in tally.failures.iter().take(20) {
        println!("    {f}");
    }
    if !tally.failures.is_empty() {
        std::process::exit(1);
    }
}

async fn crash_loop(rounds: usize) -> Tally {
    // Long answers at 200 words a second: in flight whenever the kill comes.
    let env: &[(&str, &str)] = &[("FAKE_PIECE", "word "), ("FAKE_DELTAS", "100000"), ("FAKE_RATE", "200")];
    let ws = Workspace::new(&[("claude", "claude", env), ("codex", "gemini", env), ("cursor", "cursor", env)]);
    // Answers of 500 s are recorded interrupted, not resumed (SPEC §10's checks).
    ws.without_resume();
    // The councils: short answers, resumed whatever the number of kills.
    let short: &[(&str, &str)] = &[("FAKE_DELTAS", "5"), ("FAKE_INTERVAL_MS", "40")];
    let councils =
        Workspace::new(&[("claude", "claude", short), ("codex", "gemini", short), ("cursor", "cursor", short)]);
    councils.set_council("resume_attempts", serde_json::json!(1000));
    let mut council_threads: Vec<String> = Vec::new();
    let mut vote_threads: Vec<String> = Vec::new();
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let log = kd_tests::new_thread(&c, &ws.path()).await;
    drop(c);
    let acked: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    let mut tally = Tally::default();
    let started = Instant::now();
    for round in 0..rounds {
        let c = kdd.client().await;
        let t = kd_tests::new_thread(&c, &ws.path()).await;
        let mut sub = c.thread_subscribe(t.clone(), None, None).await.expect("subscribe");
        c.council_send(t.clone(), "Go on at length.".into(), None, None, None, None, None, Some(0), None, None)
            .await
            .expect("send");
        // All three streaming before anything else happens.
        collect_until(&mut sub, |events| {
            let mut members: Vec<&str> = events
                .iter()
                .filter_map(|e| match e {
                    ThreadEvent::Delta { member, .. } => Some(member.as_str()),
                    _ => None,
                })
                .collect();
            members.sort_unstable();
            members.dedup();
            members.len() == 3
        })
        .await;
        // A council exchange: a broadcast and two auto-rounds.
        let ct = kd_tests::new_thread(&c, &councils.path()).await;
        c.council_send(ct.clone(), "Weigh the plan.".into(), None, None, None, None, None, Some(2), None, None)
            .await
            .expect("council send");
        council_threads.push(ct);
        // And a vote with a synthesis, its call left to run (kdd dies under it).
        let vt = kd_tests::new_thread(&c, &councils.path()).await;
        let voter = kdd.client().await;
        let id = format!("c-round{round}");
        let vote_thread = vt.clone();
        tokio::spawn(async move {
            let _ = voter
                .completion_agents(
                    vote_thread,
                    "Which plan?".into(),
                    None,
                    None,
                    None,
                    Some(kd_proto::types::Aggregation::Synthesize),
                    Some(true),
                    Some("claude".into()),
                    Some(id),
                    None,
                )
                .await;
        });
        vote_threads.push(vt);
        let mut writers = Vec::new();
        for w in 0..3 {
            let client = kdd.client().await;
            let (log, acked) = (log.clone(), acked.clone());
            writers.push(tokio::spawn(async move {
                for k in 0.. {
                    let body = format!("round {round} writer {w} append {k}");
                    let sent = kd_tests::try_append(&client, &log, "king", body.clone(), &[]).await;
                    match sent {
                        Ok(m) => acked.lock().expect("acked").push((m.seq, body)),
                        Err(_) => return,
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(fastrand::u64(10..2500))).await;
        let dead_pid = kdd.pid;
        kdd.kill9();
        tally.kills += 1;
        for w in writers {
            let _ = w.await;
        }
        drop((sub, c));
        let in_flight = read_in_flight(&kdd.db);
        kdd.launch().unwrap_or_else(|e| panic!("kdd did not restart after round {round}: {e}"));
        check_round(&kdd, round, &log, &t, dead_pid, &in_flight, &acked, &councils.path(), &mut tally).await;
        let twice = answered_twice(&kdd.db);
        if !twice.is_empty() {
            tally.failures.push(format!("round {round}: answered twice: {twice:?}"));
        }
        if (round + 1) % 10 == 0 {
            println!(
                "{:>4} rounds, {:>6} appends acknowledged, {} failed checks ({:.0} s)",
                round + 1,
                acked.lock().expect("acked").len(),
                tally.failures.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    tally.acknowledged = acked.lock().expect("acked").len();
    finish_councils(&kdd, &council_threads, &vote_threads, &mut tally).await;
    tally
}

/// Steps answered twice: an answer (kind `agent`) given twice by one member
/// in one round of one exchange — read from the messages alone — or two
/// answers of one journal step.
fn answered_twice(db: &TestDb) -> Vec<String> {
    let texts = |sql: &str| -> Vec<String> { db.query(sql, &[]).iter().map(|r| r[0].text().to_string()).collect() };
    let mut twice = texts(
        "SELECT thread_id || ' ' || sender || ' round ' || round || ' ' || coalesce(purpose, 'answer') FROM messages
         WHERE kind = 'agent' AND thread_id IN (SELECT thread_id FROM exchanges)
         GROUP BY thread_id, sender, round, purpose HAVING count(*) > 1",
    );
    twice.extend(texts(
        "SELECT 'step ' || r.step_id FROM runs r JOIN messages m ON m.thread_id = r.thread_id AND m.seq = r.message_seq
         WHERE m.kind = 'agent' AND r.step_id IS NOT NULL GROUP BY r.step_id HAVING count(*) > 1",
    ));
    twice.extend(texts(
        "SELECT thread_id || ' tally' FROM messages WHERE purpose = 'tally' GROUP BY thread_id HAVING count(*) > 1",
    ));
    twice
}

/// No more kills: waits until every council exchange is over, then checks
/// each gave its nine answers once, and each vote its three answers, three
/// ballots, one tally and one synthesis.
async fn finish_councils(kdd: &Kdd, threads: &[String], votes: &[String], tally: &mut Tally) {
    tally.exchanges = threads.len() + votes.len();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let open = kdd.db.one("SELECT count(*) FROM exchanges WHERE state = 'open'", &[]).int();
        if open == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for t in threads {
        let found = kdd.db.query(
            "SELECT x.state, (SELECT count(*) FROM messages m WHERE m.thread_id = x.thread_id AND m.kind = 'agent')
             FROM exchanges x WHERE x.thread_id = $1",
            &[t.into()],
        );
        let (state, answers) =
            found.first().map_or(("missing".to_string(), 0), |r| (r[0].text().to_string(), r[1].int()));
        if state == "done" && answers == 9 {
            tally.completed += 1;
        } else {
            tally.failures.push(format!("exchange of {t}: {state} with {answers} answers of 9"));
        }
    }
    for t in votes {
        let counted = kdd.db.query(
            "SELECT x.state,
                 (SELECT count(*) FROM messages m WHERE m.thread_id = x.thread_id AND m.kind = 'agent' AND m.purpose IS NULL),
                 (SELECT count(*) FROM messages m WHERE m.thread_id = x.thread_id AND m.kind = 'agent' AND m.purpose = 'ballot'),
                 (SELECT count(*) FROM messages m WHERE m.thread_id = x.thread_id AND m.purpose = 'tally'),
                 (SELECT count(*) FROM messages m WHERE m.thread_id = x.thread_id AND m.kind = 'agent' AND m.purpose = 'synthesis')
             FROM exchanges x WHERE x.thread_id = $1",
            &[t.into()],
        );
        let counted =
            counted.first().map(|r| (r[0].text().to_string(), r[1].int(), r[2].int(), r[3].int(), r[4].int()));
        match counted {
            Some((state, 3, 3, 1, 1)) if state == "done" => tally.completed += 1,
            other => tally.failures.push(format!("vote of {t}: {other:?}, expected done with 3, 3, 1, 1")),
        }
    }
    let count = |sql: &str| -> usize { kdd.db.one(sql, &[]).int() as usize };
    tally.rerun = count("SELECT count(*) FROM exchange_steps WHERE attempts > 1");
    tally.replaced = count(
        "SELECT count(*) FROM messages m WHERE m.kind = 'agent' AND m.replaces IS NOT NULL AND EXISTS
         (SELECT 1 FROM messages c WHERE c.thread_id = m.thread_id AND c.seq = m.replaces AND c.kind = 'interrupted')",
    );
    tally.given_up = count("SELECT count(*) FROM exchange_steps WHERE state = 'failed'");
    tally.duplicates = answered_twice(&kdd.db).len();
    if tally.duplicates > 0 {
        tally.failures.push(format!("{} step(s) answered twice", tally.duplicates));
    }
}

/// The runs the dead daemon had in flight, with their agents' pids and the
/// text saved for them.
fn read_in_flight(db: &TestDb) -> Vec<InFlight> {
    let sql = db.pick(
        "SELECT r.id, r.pid, r.partial || coalesce((SELECT group_concat(text, '') FROM
             (SELECT text FROM run_partials p WHERE p.run_id = r.id ORDER BY p.id)), '')
         FROM runs r WHERE r.status IN ('waiting', 'streaming')",
        "SELECT r.id, r.pid, r.partial || coalesce((SELECT string_agg(text, '' ORDER BY p.id)
             FROM run_partials p WHERE p.run_id = r.id), '')
         FROM runs r WHERE r.status IN ('waiting', 'streaming')",
    );
    let rows = db.query(sql, &[]);
    rows.iter()
        .map(|r| InFlight { id: r[0].text().to_string(), pid: r[1].opt_int(), saved: r[2].text().to_string() })
        .collect()
}

#[allow(clippy::too_many_arguments)]
async fn check_round(
    kdd: &Kdd,
    round: usize,
    log: &str,
    thread: &str,
    dead_pid: u32,
    in_flight: &[InFlight],
    acked: &Mutex<Vec<(u64, String)>>,
    councils: &str,
    tally: &mut Tally,
) {
    let mut fail = |what: String| tally.failures.push(format!("round {round}: {what}"));
    let c = kdd.client().await;
    // Page by page: one answer holds at most the daemon's page budget.
    let mut messages = Vec::new();
    loop {
        let after = messages.last().map(|m: &kd_proto::types::Message| m.seq);
        let page = c.thread_messages(log.to_string(), after, None, None, None).await.expect("log");
        if page.is_empty() {
            break;
        }
        messages.extend(page);
    }
    let by_seq: std::collections::HashMap<u64, &str> = messages.iter().map(|m| (m.seq, m.body.as_str())).collect();
    let acked = acked.lock().expect("acked").clone();
    let found = acked.iter().filter(|(seq, body)| by_seq.get(seq) == Some(&body.as_str())).count();
    if found != acked.len() {
        fail(format!("{} of {} acknowledged appends missing", acked.len() - found, acked.len()));
    }
    tally.found = found;
    if !messages.iter().enumerate().all(|(i, m)| m.seq == i as u64 + 1) {
        fail("seq not dense in the log thread".into());
    }
    let ms = c.thread_messages(thread.to_string(), None, None, None, None).await.expect("messages");
    if !ms.iter().enumerate().all(|(i, m)| m.seq == i as u64 + 1) {
        fail("seq not dense in the round's thread".into());
    }
    tally.in_flight += in_flight.len();
    for run in in_flight {
        let found = kdd.db.query("SELECT status, message_seq FROM runs WHERE id = $1", &[(&run.id).into()]);
        let (status, seq) = (found[0][0].text().to_string(), found[0][1].opt_int());
        let body: Option<String> = seq.and_then(|s| {
            kdd.db
                .query(
                    "SELECT body FROM messages m JOIN runs r ON r.thread_id = m.thread_id WHERE r.id = $1 AND m.seq = $2 AND m.kind = 'interrupted'",
                    &[(&run.id).into(), s.into()],
                )
                .first()
                .map(|r| r[0].text().to_string())
        });
        let expected = if run.saved.is_empty() { "(interrupted before it said anything)" } else { run.saved.as_str() };
        match body {
            Some(b) if status == "interrupted" && b == expected => {
                tally.interrupted_with_text += 1;
                tally.saved_nonempty += usize::from(!run.saved.is_empty());
            }
            _ => fail(format!("run {} is {status}, its message not the saved text", run.id)),
        }
        if let Some(pid) = run.pid
            && kd_tests::alive(pid as u32)
        {
            tally.orphans += 1;
            fail(format!("agent pid {pid} of run {} still alive", run.id));
        }
    }
    // Resumed council runs hold their sessions; the streaming ones none.
    let active = kdd
        .db
        .one(
            "SELECT count(*) FROM sessions WHERE status = 'active'
             AND thread_id NOT IN (SELECT id FROM threads WHERE workspace = $1)",
            &[councils.into()],
        )
        .int();
    if active > 0 {
        fail(format!("{active} session(s) left active"));
    }
    let locks = kdd.db.one("SELECT count(*) FROM locks WHERE pid = $1", &[i64::from(dead_pid).into()]).int();
    if locks > 0 {
        fail(format!("{locks} lock(s) held by the dead daemon"));
    }
    let integrity = kdd.db.integrity();
    if integrity != "ok" {
        fail(format!("integrity_check: {integrity}"));
    }
}
