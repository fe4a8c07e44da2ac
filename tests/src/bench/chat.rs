//! `kd chat` figures in a real terminal (tmux): the client's CPU while
//! three members stream 500 deltas/s each for 10 s, its CPU when idle, and
//! the time to the first full paint of a 10,000-message thread.

use std::path::Path;
use std::time::{Duration, Instant};

use kd_client::Client;
use kd_client::prelude::*;
use kd_proto::types::{MessageKind, ThreadEvent};

use super::{check, cpu_time, row};
use crate::tmux::Tmux;
use crate::{Kdd, Workspace, bin, collect_until};

/// Starts `kd chat THREAD` in the terminal and waits for its first paint.
async fn open_chat(tmux: &Tmux, kdd: &Kdd, thread: &str, timings: &Path) -> u32 {
    let _ = std::fs::remove_file(timings);
    tmux.type_line(&format!(
        "KD_NO_AUTOSTART=1 KD_CHAT_TIMINGS={} {} --socket {} chat {thread}",
        timings.display(),
        bin("kd").display(),
        kdd.socket.display()
    ));
    tmux.wait_for("the first paint", |_| timings.exists()).await;
    tmux.foreground_pid().expect("kd chat runs")
}

async fn quit_chat(tmux: &Tmux) {
    tmux.type_line("/quit");
    tmux.wait_for("the shell", |_| tmux.display("#{alternate_on}") == "0").await;
}

/// Three members stream 500 deltas/s each for 10 s into an open chat.
pub async fn cpu() {
    const SECONDS: u64 = 10;
    const RATE: u64 = 500;
    let deltas = (RATE * SECONDS).to_string();
    let env: &[(&str, &str)] = &[("FAKE_RATE", "500"), ("FAKE_DELTAS", &deltas), ("FAKE_PIECE", "word ")];
    let ws = Workspace::new(&[("claude", "claude", env), ("gemini", "gemini", env), ("cursor", "cursor", env)]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let thread =
        c.thread_create(ws.path(), None, None, None, None, None, None, Some(true), None).await.expect("thread");
    let dir = tempfile::tempdir().expect("tempdir");
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 40);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    let kd = open_chat(&tmux, &kdd, &thread.id, &dir.path().join("timings")).await;

    // Idle: nothing happens, nothing should run.
    let before = cpu_time(kd);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = (cpu_time(kd) - before).as_secs_f64() / 3.0;

    let mut sub = c.thread_subscribe(thread.id.clone(), None, None).await.expect("subscribe");
    c.council_send(thread.id.clone(), "Stream.".into(), None, None, None, None, None, Some(0), None, None)
        .await
        .expect("send");
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let (start, kd0, kdd0) = (Instant::now(), cpu_time(kd), cpu_time(kdd.pid));
    let events = collect_until(&mut sub, |e| crate::ended(e) == 3).await;
    let (wall, kd_cpu, kdd_cpu) = (start.elapsed(), cpu_time(kd) - kd0, cpu_time(kdd.pid) - kdd0);
    let got: usize = events.iter().filter(|e| matches!(e, ThreadEvent::Delta { .. })).count();
    let screen = tmux.capture();
    quit_chat(&tmux).await;

    let share = kd_cpu.as_secs_f64() / wall.as_secs_f64() * 100.0;
    check(
        &format!("kd chat CPU, 3 members × {RATE} deltas/s, {:.1} s", wall.as_secs_f64()),
        format!("{share:.1} % of a core"),
        "< 20 %",
        share < 20.0,
    );
    row("kd chat CPU, idle 3 s", format!("{:.1} %", idle * 100.0), "");
    row("kdd CPU in the same window", format!("{:.1} %", kdd_cpu.as_secs_f64() / wall.as_secs_f64() * 100.0), "");
    row("deltas seen by a second subscriber", format!("{got}"), "");
    assert!(screen.contains("(streaming · ") || screen.contains("word word"), "the chat showed the stream:\n{screen}");
}

/// `kd chat` on a thread of 10,000 messages: time from start to the first
/// full paint (the history is loaded, laid out and drawn).
pub async fn first_paint() {
    const MESSAGES: usize = 10_000;
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[]), ("gemini", "gemini", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let thread =
        c.thread_create(ws.path(), None, None, None, None, None, None, Some(true), None).await.expect("thread");
    let filled = Instant::now();
    fill(&kdd, &thread.id, MESSAGES).await;
    row("(10,000 messages appended in)", format!("{:.2} s", filled.elapsed().as_secs_f64()), "");
    let dir = tempfile::tempdir().expect("tempdir");
    let timings = dir.path().join("timings");
    let tmux = Tmux::start_sized(dir.path(), ws.dir.path(), 120, 40);
    tmux.wait_for("the shell prompt", |s| s.contains('$')).await;
    let mut times = Vec::new();
    for _ in 0..7 {
        open_chat(&tmux, &kdd, &thread.id, &timings).await;
        let line = std::fs::read_to_string(&timings).expect("timings");
        let ms: f64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("first_paint_ms");
        times.push(ms);
        quit_chat(&tmux).await;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    row("kd chat first full paint, 10,000 messages, p50 of 7", format!("{:.1} ms", times[times.len() / 2]), "");
    row("kd chat first full paint, 10,000 messages, min", format!("{:.1} ms", times[0]), "");
}

/// Appends `n` messages of varied Markdown from 16 writers.
async fn fill(kdd: &Kdd, thread: &str, n: usize) {
    const WRITERS: usize = 16;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let client = Client::connect(&kdd.socket).await.expect("connect");
        let thread = thread.to_string();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(WRITERS) {
                let (from, body) = match i % 4 {
                    0 => ("king", format!("Question {i}: how should we split the **parser** module?")),
                    1 => (
                        "claude",
                        format!(
                            "## Answer {i}\n\nSplit it by backend:\n\n- `claude.rs`\n- `codex.rs`\n\n```rust\nfn parse_line(line: &str) -> Event {{ todo!() }}\n```"
                        ),
                    ),
                    2 => ("codex", format!("Agreed with claude on {i}. One *small* change: keep the shared types apart.")),
                    _ => ("gemini", format!("{i}. {}", "A longer paragraph that wraps across several lines of the terminal. ".repeat(4))),
                };
                client
                    .message_append(thread.clone(), from.into(), body, None, None, None, Some(kind(from)), None, None, None)
                    .await
                    .expect("append");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
}

fn kind(from: &str) -> MessageKind {
    if from == "king" { MessageKind::King } else { MessageKind::Agent }
}
