//! `kd mcp`'s start as an agent CLI sees it: from spawning the server to
//! its answer to `initialize`, and to its answer to `tools/list` (claude's
//! lines, as recorded). The CLIs wait only about 2 s (claude) and 1 s
//! (codex) for their servers (shared/captures/mcp), and kd answers both
//! from static data, with no daemon involved.

use std::time::Duration;

use super::{percentile as pct, row};
use crate::kd_mcp::KdMcp;

/// Spawns `kd mcp` `n` times (after three to warm the page cache) and prints
/// the p50 and p99 of each answer's time since the spawn.
pub fn startup() {
    let n = 40;
    let (mut init, mut list) = (Vec::new(), Vec::new());
    for i in 0..n + 3 {
        let mut mcp = KdMcp::spawn(&[]);
        mcp.handshake();
        let answered = mcp.spawned.elapsed();
        mcp.send(r#"{"method":"tools/list","jsonrpc":"2.0","id":1}"#);
        let tools = mcp.answer();
        let listed = mcp.spawned.elapsed();
        assert_eq!(tools["result"]["tools"].as_array().map(Vec::len), Some(6), "{tools}");
        mcp.close_stdin();
        let (status, _) = mcp.wait();
        assert!(status.success(), "kd mcp: {status}");
        if i >= 3 {
            init.push(answered);
            list.push(listed);
        }
    }
    init.sort();
    list.sort();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let bound = "< 500 ms";
    row("kd mcp, spawn → initialize answered, p50", ms(pct(&init, 0.5)), bound);
    row("kd mcp, spawn → initialize answered, p99", ms(pct(&init, 0.99)), bound);
    row("kd mcp, spawn → tools/list answered, p50", ms(pct(&list, 0.5)), bound);
    row("kd mcp, spawn → tools/list answered, p99", ms(pct(&list, 0.99)), bound);
}
