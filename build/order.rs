// Included by the build scripts of the packages that ship binaries (kdd,
// kd-client): links a binary with its script of `build/order/`, which
// places the functions its start runs side by side at the head of its code
// (`kd_tests::order` says how the scripts are made and why).
//
// Scattered over 19 MB of code, the ~2 MB a start of kdd runs made ~12 MB
// of it resident, the kernel mapping the page-cache folio around each page
// touched; side by side, ~5 MB (issue 31, item 16). The scripts are asked
// for in optimised builds only (what users run; a debug build's functions
// are other ones), with the linker Rust uses by default for
// x86_64-unknown-linux-gnu from 1.90 on (its own lld), and not when the
// build names a linker of its own (mold, for one, reads no SECTIONS).
// `KD_NO_START_ORDER=1` leaves them out.

/// Links binary `bin` with `build/order/BIN.ld` where that applies.
fn link_start_order(bin: &str) {
    println!("cargo:rerun-if-env-changed=KD_NO_START_ORDER");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/order").join(format!("{bin}.ld"));
    println!("cargo:rerun-if-changed={}", script.display());
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let own_linker = std::env::var_os("RUSTC_LINKER").is_some()
        || var("CARGO_ENCODED_RUSTFLAGS").split('\x1f').any(|f| f.contains("linker") || f.contains("fuse-ld"));
    if std::env::var_os("KD_NO_START_ORDER").is_some()
        || var("OPT_LEVEL") == "0"
        || var("TARGET") != "x86_64-unknown-linux-gnu"
        || own_linker
        || !rustc_links_with_lld()
        || !script.is_file()
    {
        return;
    }
    println!("cargo:rustc-link-arg-bin={bin}=-Wl,-T,{}", script.display());
}

/// Whether rustc is 1.90 or newer, which links x86_64 Linux binaries with
/// its own lld by default.
// A build script's own child, not kdd's: identity::children does not apply.
#[allow(clippy::disallowed_methods)]
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = std::process::Command::new(rustc).arg("--version").output() else { return false };
    let text = String::from_utf8_lossy(&out.stdout);
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = text.split_whitespace().nth(1).unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (1, 90)
}
