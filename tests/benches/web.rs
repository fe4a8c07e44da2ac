//! kd web in a real headless Chromium (`kd_tests::bench::web`): a token
//! delta from the agent to the page, the first paint of a 1,000-message
//! thread, kdd's memory with ten pages open. Needs chromium and
//! chromium-driver.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench --profile release -p kd-tests --bench web`

fn main() {
    kd_tests::bench::block_on(async {
        kd_tests::bench::header("kd web in a browser");
        kd_tests::bench::web::delta_to_page(2_000, 500).await;
        kd_tests::bench::web::first_paint().await;
        kd_tests::bench::web::ten_pages().await;
    });
}
