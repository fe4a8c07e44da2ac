//! A notification's cost to the exchange (SPEC §9, issue 33): `kd ask` to
//! three instant members, start to exit, with no `notify` sinks and with
//! sinks that take their time — a loopback webhook that answers after
//! [`SLOW`], a command that sleeps as long — timed in turns. Every exchange
//! ends with a `done` notification to both sinks; none is on the
//! exchange's path, so the two p50s should match. The webhook's count
//! says the sinks were called.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{check, percentile as pct, row};
use crate::{Kdd, Workspace};

/// How long each sink takes to answer.
const SLOW: Duration = Duration::from_millis(300);

/// A loopback webhook answering each request after [`SLOW`]; the number
/// of requests it was sent.
async fn slow_hook() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/kd", listener.local_addr().expect("address"));
    let got = Arc::new(AtomicUsize::new(0));
    let count = got.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 8192];
                if s.read(&mut buf).await.unwrap_or(0) > 0 {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(SLOW).await;
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            });
        }
    });
    (url, got)
}

/// Waits (bounded) until the webhook was sent `n` requests.
async fn received(hooked: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + SLOW * 20;
    while hooked.load(Ordering::SeqCst) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `kd ask` p50 without sinks and with slow ones, and their ratio.
pub async fn cost() {
    const N: usize = 30;
    let (url, hooked) = slow_hook().await;
    // Two workspaces, alike but for their sinks (a delivery reads its
    // workspace's configuration when it goes out).
    let config = |notify: bool| {
        let ws = Workspace::new(&[]);
        let mut c = serde_json::json!({
            "council": {"members": ["claude", "codex", "gemini"]},
            "agents": {
                "claude": crate::fake("claude", "claude", &[]),
                "codex": crate::fake("codex", "codex", &[]),
                "gemini": crate::fake("gemini", "gemini", &[]),
            },
        });
        if notify {
            let sleep = format!("cat > /dev/null; sleep {}", SLOW.as_secs_f64());
            c["notify"] = serde_json::json!({"webhook": url, "command": ["sh", "-c", sleep], "kinds": ["done"]});
        }
        ws.write_config(&c);
        ws
    };
    let (quiet, told) = (config(false), config(true));
    let kdd = Kdd::start();
    let ask = |ws: &Workspace| super::kd_ask(&kdd.socket, ws.dir.path()).as_secs_f64() * 1000.0;
    for _ in 0..5 {
        ask(&quiet);
    }
    ask(&told);
    // Its notification in before the count starts.
    let warm = 1;
    received(&hooked, warm).await;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..N {
        without.push(ask(&quiet));
        with.push(ask(&told));
    }
    // The last exchange's notification is on its way.
    received(&hooked, warm + N).await;
    without.sort_by(|a, b| a.total_cmp(b));
    with.sort_by(|a, b| a.total_cmp(b));
    let (a, b) = (pct(&without, 0.5), pct(&with, 0.5));
    row(
        "notify: exchanges with sinks / webhooks received",
        format!("{N} / {}", hooked.load(Ordering::SeqCst) - warm),
        &format!("{N} / {N}"),
    );
    row("kd ask, 3 instant members, no sinks, p50", format!("{a:.1} ms"), "");
    row(
        &format!("kd ask, the same with a webhook and a command each taking {} ms, p50", SLOW.as_millis()),
        format!("{b:.1} ms"),
        "",
    );
    check(
        "notification's cost to the exchange (p50 with sinks ÷ without)",
        format!("{:.2}×", b / a),
        "≤ 1.10 (none on its path)",
        b / a <= 1.10,
    );
}
