//! The start time kd's MCP server adds to a run, per backend, with fake
//! agents that start it as their CLI does (`kd_tests::bench::mcp_start`).
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench mcp_start`
//! (`KD_BENCH_MCP=stand-in` serves it with the fake's stand-in instead of `kd mcp`).

fn main() {
    kd_tests::bench::block_on(async {
        kd_tests::bench::header("kd's MCP server: added start time per run");
        kd_tests::bench::mcp_start::start_times(20).await;
    });
}
