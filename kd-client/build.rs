//! Link options of the kd binary (see `build/relr.rs`).

include!("../build/relr.rs");

fn main() {
    println!("cargo:rerun-if-changed=../build/relr.rs");
    pack_relative_relocations();
}
