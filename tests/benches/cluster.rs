//! Several kdd nodes on one PostgreSQL registry (issue 25). Needs a cluster:
//!
//! ```sh
//! eval "$(.ci/pg start)"
//! cargo build --release --workspace --bins
//! KD_TEST_DB=postgres cargo bench -p kd-tests --bench cluster
//! ```

use kd_tests::bench::{self, cluster, selected};

fn main() {
    if kd_tests::engine() != kd_tests::Engine::Postgres {
        eprintln!("the cluster bench needs KD_TEST_DB=postgres and KD_TEST_PG (see its header)");
        return;
    }
    kd_tests::bench::block_on(async {
        bench::header("kd nodes on one PostgreSQL registry");
        if selected("append") {
            for n in [1, 2, 4] {
                cluster::append_over_nodes(n, 32, 500).await;
            }
        }
        if selected("ask") {
            for n in [1, 2, 4] {
                cluster::ask_over_nodes(n, 23).await;
            }
        }
        if selected("latency") {
            cluster::cross_node_latency(2_000, 1).await;
        }
    });
}
