//! kd web in a real headless Chromium (`kd_tests::bench::web`): a token
//! delta from the agent to the page, the first paint of a 1,000-message
//! thread, kdd's memory with ten pages open. Needs chromium and
//! chromium-driver.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench --profile release -p kd-tests --bench web`
//! (or one row: `-- delta | paint | pages`).

fn main() {
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |row: &str| only.is_empty() || only.iter().any(|o| o == row);
    kd_tests::bench::block_on(async {
        kd_tests::bench::header("kd web in a browser");
        if wanted("delta") {
            kd_tests::bench::web::delta_to_page(2_000, 500).await;
        }
        if wanted("paint") {
            kd_tests::bench::web::first_paint().await;
        }
        if wanted("pages") {
            kd_tests::bench::web::ten_pages().await;
        }
    });
}
