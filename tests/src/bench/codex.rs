//! codex through `codex app-server` against the other paths (fake agents):
//! delta latency beside the claude path, and the time to the first delta
//! beside `codex exec --json`, which delivers an answer only whole.

use std::time::{Duration, Instant};

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;

use super::{percentile as pct, row};
use crate::{Kdd, Workspace};

/// A one-member workspace: `backend`, through `transport` when given.
fn member(backend: &str, transport: Option<&str>, env: &[(&str, &str)]) -> Workspace {
    let ws = Workspace::new(&[(backend, backend, env)]);
    if let Some(t) = transport {
        ws.set_agent(backend, "transport", t.into());
    }
    ws
}

/// The latency of 3,000 stamped deltas at 1,000/s from one member: p50, p99 in ms.
async fn stream_latency(backend: &str) -> (f64, f64) {
    let env: &[(&str, &str)] = &[("FAKE_STAMP", "1"), ("FAKE_RATE", "1000"), ("FAKE_DELTAS", "3000")];
    let samples = super::runs::stamped_latencies(&member(backend, None, env), 1).await;
    row(&format!("  {backend}: deltas received"), samples.len().to_string(), "3000");
    (pct(&samples, 0.5), pct(&samples, 0.99))
}

/// Delta latency, codex app-server beside claude (agent write → client).
pub async fn latency() {
    let (c50, c99) = stream_latency("claude").await;
    let (x50, x99) = stream_latency("codex").await;
    row("delta latency, claude path, p50 / p99", format!("{c50:.3} / {c99:.3} ms"), "");
    row("delta latency, codex app-server path, p50 / p99", format!("{x50:.3} / {x99:.3} ms"), "");
    row("  app-server ÷ claude, p50 / p99", format!("{:.2} / {:.2}", x50 / c50, x99 / c99), "");
}

/// Send → first delta of codex, `n` times after two to warm up; the p50 in ms.
async fn first_delta(transport: &str, env: &[(&str, &str)], n: usize) -> f64 {
    let ws = member("codex", Some(transport), env);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let mut times = Vec::new();
    for i in 0..n + 2 {
        let t = crate::new_thread(&c, &ws.path()).await;
        let mut sub = c.thread_subscribe(t.clone(), None, None).await.expect("subscribe");
        let start = Instant::now();
        c.council_send(t, "go".into(), None, None, None, None, None, Some(0), None, None).await.expect("send");
        let mut first = None;
        loop {
            match sub.next().await {
                Some(Ok(ThreadEvent::Delta { .. })) if first.is_none() => first = Some(start.elapsed()),
                Some(Ok(
                    ThreadEvent::RunFinished { .. } | ThreadEvent::RunError { .. } | ThreadEvent::RunCancelled { .. },
                )) => break,
                Some(Ok(_)) => {}
                _ => break,
            }
        }
        if i >= 2 {
            times.push(first.unwrap_or(Duration::MAX).as_secs_f64() * 1000.0);
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    pct(&times, 0.5)
}

/// First-delta time, app-server against exec: an instant answer, and an
/// answer of 20 pieces 25 ms apart (a model writing for half a second).
pub async fn first_delta_times() {
    for (what, env) in [
        ("instant answer", &[][..]),
        ("20 pieces, 25 ms apart", &[("FAKE_DELTAS", "20"), ("FAKE_INTERVAL_MS", "25")][..]),
    ] {
        let app = first_delta("app-server", env, 20).await;
        let exec = first_delta("exec", env, 20).await;
        row(&format!("codex first delta, {what}: app-server / exec, p50"), format!("{app:.1} / {exec:.1} ms"), "");
    }
}
