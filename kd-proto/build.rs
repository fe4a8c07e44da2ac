//! Records the git commit the binaries are built from, for `--version`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (git, common) = git_dirs(&root.join(".git"));
    // Rebuilt when HEAD moves (a checkout, a commit on the branch). Only
    // files that exist are watched: cargo reruns the script on every build
    // for one that is missing (a clone without packed-refs, no .git at all).
    let mut watched = vec![git.join("HEAD"), common.join("packed-refs")];
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(r) = head.trim().strip_prefix("ref: ")
    {
        watched.push(common.join(r));
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

/// The git directory holding HEAD, and the one holding the refs: both
/// `.git` in a clone; in a worktree `.git` is a file naming its own
/// directory (`gitdir: …`), whose `commondir` names the shared one.
fn git_dirs(dot_git: &Path) -> (PathBuf, PathBuf) {
    let git = match std::fs::read_to_string(dot_git) {
        Ok(text) => match text.trim().strip_prefix("gitdir: ") {
            Some(dir) => dot_git.parent().map(|p| p.join(dir)).unwrap_or_else(|| PathBuf::from(dir)),
            None => dot_git.to_path_buf(),
        },
        Err(_) => dot_git.to_path_buf(),
    };
    let common = match std::fs::read_to_string(git.join("commondir")) {
        Ok(dir) => git.join(dir.trim()),
        Err(_) => git.clone(),
    };
    (git, common)
}
