//! Coordination benchmarks: a multicast completion to 10 instant members
//! against the slowest member alone (the ratio says what the fan-out costs),
//! and messages per second through `queue.read`.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench coordination`

use std::time::{Duration, Instant};

use kd_client::prelude::*;
use kd_proto::types::Wait;
use kd_tests::{Kdd, Workspace};

const SAMPLES: usize = 15;

fn main() {
    kd_tests::bench::block_on(async {
        println!(
            "kd coordination benchmarks ({} cores)",
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        );
        multicast().await;
        queue().await;
    });
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn multicast() {
    let names: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let env: &[(&str, &str)] = &[("FAKE_FORMAT", "claude")];
    let members: Vec<kd_tests::Member<'_>> = names.iter().map(|n| (n.as_str(), "claude", env)).collect();
    let ws = Workspace::new(&members);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let time = |agents: Option<Vec<String>>| {
        let (c, t) = (&c, t.clone());
        async move {
            let start = Instant::now();
            let done = c
                .completion_agents(t, "Go.".into(), agents, Some(Wait::All), None, None, None, None, None, None)
                .await
                .expect("completion");
            assert_eq!(done.summary.errors, 0);
            start.elapsed()
        }
    };
    let mut alone = Vec::new();
    let mut all = Vec::new();
    for _ in 0..SAMPLES {
        alone.push(time(Some(vec!["m9".into()])).await);
        all.push(time(None).await);
    }
    let (alone, all) = (p50(alone), p50(all));
    println!("{:<52} {:>12.1} ms", "completion.agents, 1 member (p50)", alone.as_secs_f64() * 1e3);
    println!("{:<52} {:>12.1} ms", "completion.agents, 10 members in parallel (p50)", all.as_secs_f64() * 1e3);
    println!("{:<52} {:>12.2} x", "10 members / the slowest alone", all.as_secs_f64() / alone.as_secs_f64());
}

async fn queue() {
    let env: &[(&str, &str)] = &[];
    let ws = Workspace::new(&[("claude", "claude", env), ("codex", "codex", env)]);
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[]),
                   "codex": {"backend": "codex", "command": kd_tests::bin("fake-agent"),
                             "delivery": {"mode": "queued", "queue_limit": 10000}}}
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    const N: usize = 5000;
    let start = Instant::now();
    for i in 0..N {
        c.message_route(
            t.clone(),
            "claude".into(),
            format!("note {i}"),
            Some(vec!["codex".into()]),
            None,
            None,
            None,
            None,
            None,
        )
        .await
        .expect("route");
    }
    let routed = start.elapsed();
    let start = Instant::now();
    let mut read = 0;
    loop {
        let items =
            c.queue_read("codex".into(), Some(t.clone()), None, None, Some(1000), Some(true)).await.expect("read");
        if items.is_empty() {
            break;
        }
        read += items.len();
    }
    let drained = start.elapsed();
    assert_eq!(read, N);
    println!("{:<52} {:>12.0} msg/s", "message.route to a queued member", N as f64 / routed.as_secs_f64());
    println!("{:<52} {:>12.0} msg/s", "queue.read (pages of 1000, mark_read)", N as f64 / drained.as_secs_f64());
}
