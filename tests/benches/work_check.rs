//! What the check in a worktree adds to a work run: from the work's commit
//! to the check's result with a trivial check (`kd_tests::bench::work_check`).
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench work_check`

fn main() {
    kd_tests::bench::block_on(async {
        kd_tests::bench::header("kd work: the check's cost on a run");
        kd_tests::bench::work_check::check_cost(20).await;
    });
}
