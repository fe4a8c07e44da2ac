//! Link options of the kd binary (see `build/relr.rs`, `build/order.rs` and
//! `build/pie.rs`).

include!("../build/relr.rs");
include!("../build/order.rs");
include!("../build/pie.rs");

fn main() {
    println!("cargo:rerun-if-changed=../build/relr.rs");
    println!("cargo:rerun-if-changed=../build/order.rs");
    println!("cargo:rerun-if-changed=../build/pie.rs");
    pack_relative_relocations();
    link_start_order("kd");
    link_without_pie("kd");
}
