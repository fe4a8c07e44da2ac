//! `kd chat` benchmarks in a real terminal (tmux): the client's CPU while
//! three members stream 500 deltas/s each for 10 s, its CPU when idle, and
//! the time to the first full paint of a 10,000-message thread
//! (`kd_tests::bench::chat`). Figures are printed next to the SPEC §9 targets.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench chat`

use kd_tests::bench::{self, chat, selected};

fn main() {
    kd_tests::bench::block_on(async {
        bench::header("kd chat benchmarks");
        if selected("cpu") {
            chat::cpu().await;
        }
        if selected("paint") {
            chat::first_paint().await;
        }
    });
}
