//! Link options of the kd binary (see `build/relr.rs` and `build/order.rs`).

include!("../build/relr.rs");
include!("../build/order.rs");

fn main() {
    println!("cargo:rerun-if-changed=../build/relr.rs");
    println!("cargo:rerun-if-changed=../build/order.rs");
    pack_relative_relocations();
    link_start_order("kd");
}
