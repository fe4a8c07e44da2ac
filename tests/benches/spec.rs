//! Every SPEC §9 row in one command, ending with one table: row, target,
//! measured, pass or FAIL.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench spec`
//! (one group: `… --bench spec -- history`).

use kd_tests::bench::{self, chat, cost, daemon, memory, runs, selected};

fn main() {
    kd_tests::bench::block_on(async {
        bench::header("kd: SPEC §9, every row");
        if selected("latency") {
            runs::latency().await;
        }
        if selected("throughput") {
            runs::throughput().await;
        }
        if selected("fanout") {
            runs::fanout().await;
        }
        if selected("status") {
            daemon::status_round_trip().await;
        }
        if selected("ask") {
            runs::ask_wall_time().await;
        }
        if selected("ask-direct") {
            runs::ask_direct().await;
        }
        if selected("append") {
            daemon::append_throughput(32, 2_000).await;
        }
        if selected("history") {
            memory::history().await;
        }
        if selected("rss") {
            memory::resident().await;
        }
        if selected("concurrent") {
            memory::concurrent_runs().await;
        }
        if selected("stalled") {
            memory::stalled_subscriber().await;
        }
        if selected("tui") {
            chat::cpu().await;
        }
        if selected("cost") {
            cost::report().await;
        }
        if selected("approval") {
            bench::approval::round_trip(50).await;
        }
        if selected("notify") {
            bench::notify::cost().await;
        }
    });
    let rows = bench::checked();
    println!("\nSPEC §9");
    println!("| row | target | measured | |");
    println!("|---|---|---|---|");
    for r in &rows {
        let verdict = if r.pass == Some(true) { "pass" } else { "FAIL" };
        println!("| {} | {} | {} | {verdict} |", r.what.trim(), r.target, r.measured);
    }
    let failed = rows.iter().filter(|r| r.pass != Some(true)).count();
    println!("\n{} rows, {} pass, {failed} fail", rows.len(), rows.len() - failed);
}
