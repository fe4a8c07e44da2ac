//! A registry at scale, on the engine `KD_TEST_DB` selects (issue 25, §9):
//! kdd's start time, `kd threads`, `search.query` p50 and RSS over
//! 1,000,000 messages in 10,000 threads (`KD_BENCH_SCALE_MESSAGES=N` for
//! another size).
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p kd-tests --bench scale                      # SQLite
//! eval "$(.ci/pg start)"
//! KD_TEST_DB=postgres cargo bench -p kd-tests --bench scale  # PostgreSQL
//! ```

fn main() {
    let messages: usize =
        std::env::var("KD_BENCH_SCALE_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000).max(1_000);
    kd_tests::bench::block_on(async {
        kd_tests::bench::header("a registry at scale");
        kd_tests::bench::scale::report(messages).await;
    });
}
