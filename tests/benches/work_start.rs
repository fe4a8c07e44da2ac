//! What `kd work` adds per member before it runs: `work.start` on a
//! repository of 10,000 files beside `git worktree add` alone
//! (`kd_tests::bench::work_start`).
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench work_start`

fn main() {
    kd_tests::bench::block_on(async {
        kd_tests::bench::header("kd work: start overhead per member");
        kd_tests::bench::work_start::start_overhead(10_000, 10).await;
    });
}
