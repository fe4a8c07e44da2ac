//! Several nodes on one PostgreSQL registry (issue 25): message.append with
//! 32 writers spread over 1, 2 and 4 nodes, and how long an event takes from
//! one node's subscribers to another's (token deltas relayed by NOTIFY, and
//! messages, which cross by reference and are read back).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;

use super::{ms, percentile, row};
use crate::{Kdd, Workspace, workspace};

/// `n` nodes on one fresh registry (`KD_TEST_DB=postgres`).
fn nodes(n: usize) -> Vec<Kdd> {
    let first = Kdd::start_with(&["--node", "n0"]);
    let mut all = vec![];
    for i in 1..n {
        all.push(Kdd::start_node_beside(&first, &["--node", &format!("n{i}")]));
    }
    all.insert(0, first);
    all
}

/// message.append, `writers` writers spread evenly over `n` nodes, `each`
/// messages each, on one thread.
pub async fn append_over_nodes(n: usize, writers: usize, each: usize) {
    let kdds = nodes(n);
    let setup = kdds[0].client().await;
    let thread = crate::new_thread(&setup, &workspace("bench")).await;
    let mut clients = Vec::new();
    for w in 0..writers {
        clients.push(kdds[w % n].client().await);
    }
    let start = Instant::now();
    super::append_from(clients, &thread, each).await;
    let elapsed = start.elapsed();
    let total = writers * each;
    let msgs = setup.thread_messages(thread, None, None, None, None).await.expect("messages").into_vec();
    let dense = msgs.iter().enumerate().all(|(i, m)| m.seq == i as u64 + 1) && msgs.len() == total;
    let rate = total as f64 / elapsed.as_secs_f64();
    row(&format!("message.append, {writers} writers over {n} node(s)"), format!("{rate:.0} msg/s"), "");
    row(&format!("  seq dense 1..={total}"), dense.to_string(), "true");
}

/// A run on node 0 streaming `deltas` token deltas, watched on nodes 0 and
/// 1: how much later each delta reaches node 1's subscriber than node 0's,
/// and the message that ends it.
pub async fn cross_node_latency(deltas: usize, interval_ms: u64) {
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_DELTAS", &deltas.to_string()), ("FAKE_INTERVAL_MS", &interval_ms.to_string())],
    )]);
    let kdds = nodes(2);
    let (ca, cb) = (kdds[0].client().await, kdds[1].client().await);
    let thread = crate::new_thread(&ca, &ws.path()).await;
    let on_a = ca.thread_subscribe(thread.clone(), None, None).await.expect("subscribe a");
    let on_b = cb.thread_subscribe(thread.clone(), None, None).await.expect("subscribe b");
    crate::send_one_round(&ca, &thread, "Stream.").await;
    let watch = |mut sub: jsonrpsee::core::client::Subscription<ThreadEvent>| {
        tokio::spawn(async move {
            let mut seen: HashMap<u64, Instant> = HashMap::new();
            let mut answer = None;
            while answer.is_none() {
                match tokio::time::timeout(Duration::from_secs(60), sub.next()).await {
                    Ok(Some(Ok(ThreadEvent::Delta { chars, .. }))) => {
                        seen.insert(chars, Instant::now());
                    }
                    Ok(Some(Ok(ThreadEvent::Message { message }))) if message.from == "claude" => {
                        answer = Some(Instant::now());
                    }
                    Ok(Some(Ok(_))) => {}
                    _ => break,
                }
            }
            (seen, answer)
        })
    };
    let (a, b) = (watch(on_a), watch(on_b));
    let ((seen_a, answer_a), (seen_b, answer_b)) = (a.await.expect("a"), b.await.expect("b"));
    let mut lags: Vec<Duration> =
        seen_a.iter().filter_map(|(chars, at)| seen_b.get(chars).map(|b| b.saturating_duration_since(*at))).collect();
    lags.sort_unstable();
    let lost = seen_a.len() - lags.len();
    if lags.is_empty() {
        row("cross-node delta latency", "no delta crossed".into(), "p50 < 25 ms");
        return;
    }
    row(
        &format!("cross-node delta latency p50 ({} deltas, {interval_ms} ms apart)", seen_a.len()),
        format!("{:.2} ms", ms(percentile(&lags, 0.50))),
        "< 25 ms",
    );
    row("cross-node delta latency p99", format!("{:.2} ms", ms(percentile(&lags, 0.99))), "");
    row("  deltas lost on the way", lost.to_string(), "0");
    if let (Some(a), Some(b)) = (answer_a, answer_b) {
        row("cross-node message latency (the answer)", format!("{:.2} ms", ms(b.saturating_duration_since(a))), "");
    }
}

/// `kd ask` of three instant members, one round, `asks` times, on a
/// cluster of `n` nodes whose first has the workspace: asked there, and
/// (with more than one node) asked on the last node, which routes it to the
/// first (written for it, woken by `kd_work`, answered there, watched here).
pub async fn ask_over_nodes(n: usize, asks: usize) {
    let kdds = nodes(n);
    let ws = Workspace::new(&[("claude", "claude", &[]), ("codex", "codex", &[]), ("gemini", "gemini", &[])]);
    let ask = |kdd: &Kdd| super::kd_ask(&kdd.socket, ws.dir.path());
    // The workspace's trunk is made on the first node.
    ask(&kdds[0]);
    let mut on: Vec<(&str, &Kdd)> = vec![("on the node that has the workspace", &kdds[0])];
    if n > 1 {
        on.push(("on another node (routed)", &kdds[n - 1]));
    }
    for (label, kdd) in on {
        let mut times: Vec<Duration> = (0..asks).map(|_| ask(kdd)).skip(3).collect();
        times.sort();
        row(
            &format!("kd ask, 3 instant members, one round, {n} node(s), asked {label}, p50"),
            format!("{:.1} ms", ms(percentile(&times, 0.5))),
            "",
        );
    }
}
