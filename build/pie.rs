// Included by kd-client's build script: links the `kd` binary at a fixed
// address (`-no-pie`), not as a position-independent executable.
//
// A position-independent `kd` is relocated at each start: the loader
// writes ~40,000 pointers of its read-only data (vtables, tables of
// strings), each of the ~84 pages they fill copied on its first write, and
// the kernel maps it at a random base. Linked at a fixed address there is
// nothing to relocate: ~95 fewer page faults a `kd ask` (282 → 187), and
// ~1.1 ms less of its wall time on the 2-core machine of issue 31 (item 17:
// 200 asks alternated one by one; docs/performance.md, "Item 17 at stop
// 82"), where a page fault costs 4–12 µs.
//
// What is given up is the randomised address of `kd`'s own code and data
// (its libraries, heap, stack and mappings are still randomised): `kd` is
// safe Rust (`deny(unsafe_code)`), short-lived, runs as the user, and reads
// only what kdd sends it over a socket whose peer uid is checked and what
// the user's own agents (which run as the user) write. kdd — long-lived,
// serving browsers — stays position-independent (ARCHITECTURE.md, "Build
// and binaries"). `KD_PIE=1` links `kd` position-independent again.

/// Links binary `bin` at a fixed address on Linux with the GNU C library.
fn link_without_pie(bin: &str) {
    println!("cargo:rerun-if-env-changed=KD_PIE");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if std::env::var_os("KD_PIE").is_some() || var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu"
    {
        return;
    }
    println!("cargo:rustc-link-arg-bin={bin}=-no-pie");
}
