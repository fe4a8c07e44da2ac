//! Search benchmark (issue 11): `search.query` over 100,000 messages in 50
//! threads, p50 and p99 of queries of one common word, a rare word, a
//! phrase and a prefix, through the socket. Target: p50 < 10 ms.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench search`

use std::time::{Duration, Instant};

use kd_client::prelude::*;
use kd_proto::types::ImportedMessage;
use kd_tests::Kdd;

const THREADS: usize = 50;
const PER_THREAD: usize = 2_000;
const SAMPLES: usize = 200;

const WORDS: &[&str] = &[
    "schema",
    "index",
    "tenant",
    "cache",
    "lock",
    "queue",
    "latency",
    "migration",
    "rollback",
    "replica",
    "shard",
    "review",
    "parser",
    "socket",
    "thread",
    "budget",
    "deploy",
    "config",
    "session",
    "answer",
];

fn main() {
    kd_tests::bench::block_on(async {
        let kdd = Kdd::start();
        let c = kdd.client().await;
        let start = Instant::now();
        for t in 0..THREADS {
            let messages: Vec<ImportedMessage> = (0..PER_THREAD)
                .map(|i| {
                    let n = t * PER_THREAD + i;
                    let w = |k: usize| WORDS[(n * 7 + k * 13) % WORDS.len()];
                    let rare = if n.is_multiple_of(10_000) { " zebrafish" } else { "" };
                    ImportedMessage {
                        from: if i % 3 == 0 { "king".into() } else { "claude".into() },
                        to: vec![],
                        kind: None,
                        body: format!(
                            "We should look at the {} and the {} before the {} change; message {n}{rare}.",
                            w(0),
                            w(1),
                            w(2)
                        ),
                        created_at_ms: 1_700_000_000_000 + n as i64,
                        refs: vec![],
                        backend: None,
                        model: None,
                    }
                })
                .collect();
            c.thread_import("/bench".into(), None, None, None, None, None, messages, None).await.expect("import");
        }
        println!(
            "kd search benchmark ({} cores): {} messages imported in {:.1} s",
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            THREADS * PER_THREAD,
            start.elapsed().as_secs_f64()
        );
        for query in ["schema", "zebrafish", "\"the cache and the lock\"", "migr*", "tenant AND replica"] {
            let mut times = Vec::with_capacity(SAMPLES);
            let mut found = 0;
            for _ in 0..SAMPLES {
                let t = Instant::now();
                found = c.search_query(query.into(), None, None, None, None).await.expect("search").len();
                times.push(t.elapsed());
            }
            times.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "search.query {:<28} p50 {:>7.2} ms   p99 {:>7.2} ms   ({found} hits shown, target p50 < 10 ms)",
                query,
                ms(times[SAMPLES / 2]),
                ms(times[SAMPLES * 99 / 100])
            );
        }
    });
}
