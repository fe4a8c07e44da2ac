//! Records the git commit the binaries are built from, for `--version`.

use std::path::Path;
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = root.join(".git");
    // Rebuilt when HEAD moves (a checkout, a commit on the branch). Only
    // files that exist are watched: cargo reruns the script on every build
    // for one that is missing (a clone without packed-refs, no .git at all).
    let mut watched = vec![git.join("HEAD"), git.join("packed-refs")];
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(r) = head.trim().strip_prefix("ref: ")
    {
        watched.push(git.join(r));
    }
    println!("cargo:rerun-if-changed=build.rs");
    for f in watched.iter().filter(|f| f.exists()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let commit = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown commit".to_string());
    println!("cargo:rustc-env=KD_GIT_COMMIT={commit}");
}
