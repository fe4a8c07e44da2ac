//! The build itself: a second build with nothing changed rebuilds nothing.
//! (kd-proto's build script once watched `.git/packed-refs`, which a fresh
//! clone does not have, so every build rebuilt kd-proto and all above it.)

#[test]
fn a_build_with_nothing_changed_rebuilds_nothing() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = || {
        std::process::Command::new(&cargo)
            .args(["build", "-p", "kd-proto", "--offline", "-v"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("run cargo")
    };
    let first = build();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let second = build();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{said}");
    assert!(!said.contains("Compiling kd-proto"), "kd-proto was rebuilt with nothing changed:\n{said}");
}
