//! Records the git commit the binaries are built from, for `--version`.

use std::path::Path;
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    // Rebuilt when HEAD moves (a checkout, a commit on the branch). The
    // files are git's own answer (in a worktree `.git` is a file and HEAD
    // lives elsewhere). Only files that exist are watched: cargo reruns the
    // script on every build for one that is missing (a clone without
    // packed-refs, no .git at all).
    let mut watched: Vec<std::path::PathBuf> = Vec::new();
    let mut watch = |file: &str| {
        if let Some(p) = git(&["rev-parse", "--git-path", file]) {
            watched.push(root.join(p));
        }
    };
    watch("HEAD");
    watch("packed-refs");
    if let Some(r) = git(&["rev-parse", "--symbolic-full-name", "HEAD"]).filter(|r| r.starts_with("refs/")) {
        watch(&r);
    }
    println!("cargo:rerun-if-changed=build.rs");
    for f in watched.iter().filter(|f| f.exists()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown commit".to_string());
    println!("cargo:rustc-env=KD_GIT_COMMIT={commit}");
}
