// Included by the build scripts of the packages that ship binaries (kdd,
// kd-client): packs the binaries' relative relocations (`-z
// pack-relative-relocs`, DT_RELR) where the C library applies them.
//
// A position-independent binary carries one relocation per pointer in its
// read-only data; as RELA entries they are 1.4 MB of kdd's file, all read by
// the loader at each start. Packed, they are 18 KB: kdd's resident memory
// at idle is ~3 MB smaller and each start shorter (issue 31). glibc applies
// packed relocations from 2.36 on; a binary linked with them for an older
// glibc would not start, so they are asked for only when building for the
// machine's own glibc (not a cross build) and that glibc is 2.36 or newer.
// The linker must know the option (lld ≥ 15, the default for Rust on
// x86_64 Linux; GNU ld ≥ 2.38). `KD_NO_RELR=1` leaves it out.

/// Asks for packed relocations when the target's glibc applies them.
fn pack_relative_relocations() {
    println!("cargo:rerun-if-env-changed=KD_NO_RELR");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let native = var("HOST") == var("TARGET");
    if std::env::var_os("KD_NO_RELR").is_some()
        || !native
        || var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
    {
        return;
    }
    if glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The machine's glibc, from `getconf GNU_LIBC_VERSION` ("glibc 2.36").
// A build script's own child, not kdd's: identity::children does not apply.
#[allow(clippy::disallowed_methods)]
fn glibc_version() -> Option<(u32, u32)> {
    let out = std::process::Command::new("getconf").arg("GNU_LIBC_VERSION").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}
