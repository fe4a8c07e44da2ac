//! Daemon benchmarks (issue: foundation). A bench binary, not criterion: it
//! starts a real release `kdd`, drives it over the socket and prints figures
//! next to the SPEC §9 targets.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench daemon`

use std::sync::Arc;
use std::time::{Duration, Instant};

use kd_client::KdApiClient;
use kd_proto::types::ThreadEvent;
use kd_tests::{Kdd, workspace};

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        println!("kd daemon benchmarks ({} cores)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        println!("{:<44} {:>14} {:>16}", "measure", "value", "target");
        if selected("status") {
            status_round_trip().await;
        }
        if selected("append") {
            append_throughput(1, 10_000).await;
            append_throughput(32, 2_000).await;
        }
        if selected("fanout") {
            fan_out(50, 2_000).await;
        }
    });
}

/// Whether a group runs: all of them, or those named on the command line
/// (`cargo bench -p kd-tests --bench daemon -- append`).
fn selected(name: &str) -> bool {
    let names: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    names.is_empty() || names.iter().any(|n| name.contains(n.as_str()))
}

fn row(measure: &str, value: String, target: &str) {
    println!("{measure:<44} {value:>14} {target:>16}");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn status_round_trip() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    for _ in 0..2_000 {
        c.daemon_status().await.expect("status");
    }
    let mut samples = Vec::with_capacity(20_000);
    for _ in 0..20_000 {
        let t = Instant::now();
        c.daemon_status().await.expect("status");
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    row("daemon.status round trip p50", format!("{:.1} µs", micros(percentile(&samples, 0.50))), "< 100 µs");
    row("daemon.status round trip p99", format!("{:.1} µs", micros(percentile(&samples, 0.99))), "");
}

async fn append_throughput(writers: usize, each: usize) {
    let kdd = Kdd::start();
    let setup = kdd.client().await;
    let thread = kd_tests::new_thread(&setup, &workspace("bench")).await;
    let mut clients = Vec::new();
    for _ in 0..writers {
        clients.push(kdd.client().await);
    }
    let cpu_before = cpu_ms(kdd.pid);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in clients {
        let thread = thread.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..each {
                kd_tests::append(&c, &thread, "claude", format!("message {i}"), &[]).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let elapsed = start.elapsed();
    let cpu = cpu_ms(kdd.pid) - cpu_before;
    let total = writers * each;
    let msgs = setup.thread_messages(thread, None, None, None, None).await.expect("messages");
    let dense = msgs.iter().enumerate().all(|(i, m)| m.seq == i as u64 + 1) && msgs.len() == total;
    row(
        &format!("message.append, {writers} writer(s) × {each}"),
        format!("{:.0} msg/s", total as f64 / elapsed.as_secs_f64()),
        if writers > 1 { ">= 20,000 msg/s" } else { "" },
    );
    row("  kdd CPU per message", format!("{:.1} µs", cpu * 1000.0 / total as f64), "");
    row(&format!("  seq dense 1..={total}"), dense.to_string(), "true");
}

async fn fan_out(subscribers: usize, messages: usize) {
    let kdd = Kdd::start();
    let writer = kdd.client().await;
    let thread = kd_tests::new_thread(&writer, &workspace("fanout")).await;
    let ready = Arc::new(tokio::sync::Barrier::new(subscribers + 1));
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let c = kdd.client().await;
        let mut sub = c.thread_subscribe(thread.clone(), None, None).await.expect("subscribe");
        let ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            ready.wait().await;
            let mut got = 0usize;
            let mut last = 0u64;
            let mut in_order = true;
            while got < messages {
                match sub.next().await {
                    Some(Ok(ThreadEvent::Message { message })) => {
                        in_order &= message.seq == last + 1;
                        last = message.seq;
                        got += 1;
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            drop(c);
            (got, in_order, Instant::now())
        }));
    }
    ready.wait().await;
    let start = Instant::now();
    // Four writers keep the append pipeline full.
    let mut writers = Vec::new();
    for w in 0..4 {
        let c = kdd.client().await;
        let thread = thread.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..messages / 4 {
                kd_tests::append(&c, &thread, "king", format!("{w}-{i}"), &[]).await;
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    let mut complete = 0;
    let mut ordered = true;
    let mut last_done = start;
    for t in tasks {
        let (got, in_order, done) = t.await.expect("subscriber");
        complete += usize::from(got == messages);
        ordered &= in_order;
        last_done = last_done.max(done);
    }
    let secs = (last_done - start).as_secs_f64();
    row(
        &format!("fan-out: {subscribers} subscribers × {messages} messages"),
        format!("{:.0} msg/s each", messages as f64 / secs),
        "",
    );
    row("  deliveries (all subscribers)", format!("{:.0} /s", (messages * subscribers) as f64 / secs), "");
    row("  subscribers with every message, in order", format!("{complete}/{subscribers} {ordered}"), "all, true");
}

/// CPU time (user + system) the process has used, in ms, from /proc.
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum()).unwrap_or(0.0);
    ticks * 1000.0 / clock_ticks_per_second()
}

fn clock_ticks_per_second() -> f64 {
    // Linux reports /proc times in USER_HZ, which is 100 on every mainstream
    // configuration; rustix does not expose sysconf(_SC_CLK_TCK).
    100.0
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
