//! Daemon benchmarks (issue: foundation). A bench binary, not criterion: it
//! starts a real release `kdd`, drives it over the socket and prints figures
//! next to the SPEC §9 targets (`kd_tests::bench::daemon`).
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench daemon`

use kd_tests::bench::{self, daemon, selected};

fn main() {
    kd_tests::bench::block_on(async {
        bench::header("kd daemon benchmarks");
        if selected("status") {
            daemon::status_round_trip().await;
        }
        if selected("append") {
            daemon::append_throughput(1, 10_000).await;
            daemon::append_throughput(32, 2_000).await;
        }
        if selected("fanout") {
            daemon::fan_out(50, 2_000).await;
        }
    });
}
