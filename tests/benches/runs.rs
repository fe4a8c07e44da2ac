//! Agent-run benchmarks: delta latency, delta throughput against a raw
//! pipe, delta fan-out to 50 subscribers, `kd ask` wall time (and beside
//! the same agents run directly by a shell, `-- ask-direct`), and codex
//! through app-server against claude and `codex exec` (`-- codex`), `kd mcp`'s
//! start to its `initialize` and `tools/list` answers (`-- mcp`), an
//! approval's round trip agent → King's client → agent (`-- approval`), with
//! fake agents. Figures are printed next to the SPEC §9 targets
//! (`kd_tests::bench::runs`).
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench runs`

use kd_tests::bench::{self, approval, codex, kd_mcp, runs, selected};

fn main() {
    kd_tests::bench::block_on(async {
        bench::header("kd agent-run benchmarks");
        if selected("latency") {
            runs::latency().await;
        }
        if selected("throughput") {
            runs::throughput().await;
        }
        if selected("fanout") {
            runs::fanout().await;
        }
        if selected("ask") {
            runs::ask_wall_time().await;
        }
        if selected("ask-direct") {
            runs::ask_direct().await;
        }
        if selected("codex") {
            codex::latency().await;
            codex::first_delta_times().await;
        }
        if selected("mcp") {
            kd_mcp::startup();
        }
        if selected("approval") {
            approval::round_trip(50).await;
        }
    });
}
