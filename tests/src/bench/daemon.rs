//! Daemon figures: `daemon.status` round trip, append throughput under
//! concurrent writers, and message fan-out to 50 subscribers.

use std::sync::Arc;
use std::time::Instant;

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;

use super::{check, cpu_time, micros, percentile, row};
use crate::{Kdd, workspace};

pub async fn status_round_trip() {
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
    let p50 = micros(percentile(&samples, 0.50));
    check("daemon.status round trip p50", format!("{p50:.1} µs"), "< 100 µs", p50 < 100.0);
    row("daemon.status round trip p99", format!("{:.1} µs", micros(percentile(&samples, 0.99))), "");
}

pub async fn append_throughput(writers: usize, each: usize) {
    let kdd = Kdd::start();
    let setup = kdd.client().await;
    let thread = crate::new_thread(&setup, &workspace("bench")).await;
    let mut clients = Vec::new();
    for _ in 0..writers {
        clients.push(kdd.client().await);
    }
    let cpu_before = cpu_time(kdd.pid);
    let start = Instant::now();
    super::append_from(clients, &thread, each).await;
    let elapsed = start.elapsed();
    let cpu = cpu_time(kdd.pid) - cpu_before;
    let total = writers * each;
    let msgs = setup.thread_messages(thread, None, None, None, None).await.expect("messages");
    let dense = msgs.iter().enumerate().all(|(i, m)| m.seq == i as u64 + 1) && msgs.len() == total;
    let rate = total as f64 / elapsed.as_secs_f64();
    let what = format!("message.append, {writers} writer(s) × {each}");
    if writers >= 32 {
        check(&what, format!("{rate:.0} msg/s"), ">= 20,000 msg/s", rate >= 20_000.0);
        check(&format!("  seq dense 1..={total}"), dense.to_string(), "true", dense);
    } else {
        row(&what, format!("{rate:.0} msg/s"), "");
        row(&format!("  seq dense 1..={total}"), dense.to_string(), "true");
    }
    row("  kdd CPU per message", format!("{:.1} µs", micros(cpu) / total as f64), "");
}

pub async fn fan_out(subscribers: usize, messages: usize) {
    let kdd = Kdd::start();
    let writer = kdd.client().await;
    let thread = crate::new_thread(&writer, &workspace("fanout")).await;
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
                crate::append(&c, &thread, "king", format!("{w}-{i}"), &[]).await;
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
