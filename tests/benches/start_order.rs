//! Writes `build/order/kdd.ld` and `build/order/kd.ld`, the linker scripts
//! that place what a start runs side by side (`kd_tests::order`): profiles
//! kdd and kd with callgrind as the §9 bench uses them — kdd started
//! fresh and again on its registry, answering `daemon.status` over
//! WebSocket and HTTP (the first phase), then an ask of three instant
//! members (the second); `kd ask` (the first) and `kd daemon status` (the
//! second) likewise — and merges what ran into the scripts (`--fresh`:
//! replaces them; `--only=kd` or `--only=kdd`: that script alone).
//!
//! kd's script names each function exactly first (`order::exact_pattern`):
//! what an ask runs, not every instance of the generic functions it runs,
//! which spread it over 3.1 MB (issue 31, item 17). An exact name holds
//! for the build it was read from (the dependencies' versions and
//! features), so the same functions follow as `order::pattern` has them:
//! a build whose names differ still finds them side by side, as before.
//! Its exact names are this build's alone: those of an earlier run, which
//! a code change leaves naming nothing, are replaced, not merged — so the
//! last run for kd is on the build the §9 bench measures (the README's
//! `--workspace` one); `cargo install --path kd-client` finds its
//! functions by the patterns that follow.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p kd-tests --bench start_order`
//! (needs valgrind, nm and readelf). Rerun it when the release build's
//! start changes much, on both builds a user makes (`--workspace` and
//! `cargo install --path kdd`, whose features differ): each adds what the
//! other inlined differently.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use kd_client::prelude::*;
use kd_tests::order::{self, Pattern};
use kd_tests::{Kdd, Workspace, bin, bin_dir};

fn main() {
    let fresh = std::env::args().any(|a| a == "--fresh");
    let only = std::env::args().find_map(|a| a.strip_prefix("--only=").map(str::to_string));
    assert!(only.as_deref().is_none_or(|o| o == "kd" || o == "kdd"), "--only=kd or --only=kdd, not {only:?}");
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let work = tempfile::Builder::new().prefix("kd-order-").tempdir().expect("tempdir");
    let profiles = work.path();
    kd_tests::bench::block_on(async {
        let cold = cold_sections();
        if wanted("kdd") {
            let phases = [kdd_start(profiles).await, kdd_ask(profiles).await];
            write("kdd", &phases, &cold, fresh, &[order::pattern]);
        }
        if wanted("kd") {
            write("kd", &kd_runs(profiles).await, &cold, fresh, &[order::exact_pattern, order::pattern]);
        }
    });
}

/// A script that runs `program` under callgrind, each process's profile in
/// `dir` as `NAME.PID.out`.
fn under_callgrind(dir: &Path, name: &str, program: &Path) -> PathBuf {
    let script = dir.join(format!("{name}-under-callgrind"));
    let body = format!(
        "#!/bin/sh\nexec valgrind -q --tool=callgrind --demangle=no --callgrind-out-file='{}/{name}.%p.out' '{}' \"$@\"\n",
        dir.display(),
        program.display()
    );
    std::fs::write(&script, body).expect("write the wrapper");
    let mut perms = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o700);
    std::fs::set_permissions(&script, perms).expect("chmod");
    script
}

/// What kdd ran in profiles `NAME.*.out` of `dir` (then removed).
fn ran(dir: &Path, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("profiles")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{name}.")) && n.ends_with(".out"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no callgrind profile of {name} in {}", dir.display());
    for f in files {
        out.extend(order::callgrind_functions(&std::fs::read_to_string(&f).expect("profile")));
        std::fs::remove_file(&f).expect("remove profile");
    }
    out
}

/// kdd started fresh, then again on its registry, each answering
/// `daemon.status` over WebSocket and over HTTP (`kd daemon status`).
async fn kdd_start(dir: &Path) -> Vec<String> {
    let mut kdd = Kdd::start_as(under_callgrind(dir, "kdd", &bin("kdd")));
    for restart in [false, true] {
        if restart {
            kdd.restart();
        }
        kdd.client().await.daemon_status().await.expect("daemon.status");
        let out = kd_tests::run({
            let mut kd = kdd.kd();
            kd.args(["daemon", "status"]);
            kd
        })
        .await;
        assert!(out.status.success(), "kd daemon status: {}", out.stderr);
    }
    assert!(kdd.stop().success());
    ran(dir, "kdd")
}

/// A workspace of three instant members, as the §9 bench asks them.
fn council() -> Workspace {
    let ws = Workspace::new(&[]);
    let exec = serde_json::json!({"transport": "exec"});
    ws.configure(
        &[("claude", &[], serde_json::json!({})), ("codex", &[], exec), ("gemini", &[], serde_json::json!({}))],
        serde_json::json!({}),
    );
    ws
}

/// `kd ask --rounds 0` in `ws`, run by `kd` (the built one, or a wrapper).
fn ask(kd: &Path, kdd: &Kdd, ws: &Workspace) {
    kd_tests::bench::kd_ask_by(kd, &kdd.socket, ws.dir.path(), &[]);
}

/// kdd answering two asks (the first makes the thread and the sessions).
async fn kdd_ask(dir: &Path) -> Vec<String> {
    let ws = council();
    let mut kdd = Kdd::start_as(under_callgrind(dir, "kdd", &bin("kdd")));
    ask(&bin("kd"), &kdd, &ws);
    ask(&bin("kd"), &kdd, &ws);
    assert!(kdd.stop().success());
    ran(dir, "kdd")
}

/// kd: `kd ask` (the first phase), then `kd daemon status` (the second).
async fn kd_runs(dir: &Path) -> [Vec<String>; 2] {
    let ws = council();
    let kdd = Kdd::start();
    let kd = under_callgrind(dir, "kd", &bin("kd"));
    ask(&bin("kd"), &kdd, &ws);
    ask(&kd, &kdd, &ws);
    let first = ran(dir, "kd");
    let status = Command::new(&kd)
        .arg("--socket")
        .arg(&kdd.socket)
        .args(["daemon", "status"])
        .env("KD_NO_AUTOSTART", "1")
        .output()
        .expect("kd daemon status");
    assert!(status.status.success(), "kd daemon status: {}", String::from_utf8_lossy(&status.stderr));
    [first, ran(dir, "kd")]
}

/// The cold functions (`.text.unlikely.*`) of the build's libraries and
/// the standard library's, as patterns.
fn cold_sections() -> HashSet<String> {
    let sysroot = Command::new("rustc").args(["--print", "sysroot"]).output().expect("rustc --print sysroot");
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    let mut libs: Vec<PathBuf> = Vec::new();
    for dir in [bin_dir().join("deps"), sysroot.join("lib/rustlib").join(host()).join("lib")] {
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            if e.path().extension().is_some_and(|x| x == "rlib" || x == "o") {
                libs.push(e.path());
            }
        }
    }
    let mut cold = HashSet::new();
    for lib in libs {
        let out = Command::new("readelf").arg("-SW").arg(&lib).output().expect("readelf");
        cold.extend(order::cold_sections(&String::from_utf8_lossy(&out.stdout)));
    }
    cold
}

/// The host's target triple, from `rustc -vV`.
fn host() -> String {
    let out = Command::new("rustc").arg("-vV").output().expect("rustc -vV");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().find_map(|l| l.strip_prefix("host: ")).expect("host").to_string()
}

/// Merges the functions `name` ran (those of its own code) into
/// `build/order/NAME.ld`: its phases as the first of `patterns` names
/// them, then as the next does, and so on.
fn write(
    name: &str,
    phases: &[Vec<String>],
    cold: &HashSet<String>,
    fresh: bool,
    patterns: &[fn(&str) -> Option<String>],
) {
    let nm = Command::new("nm").arg("--defined-only").arg(bin(name)).output().expect("nm");
    let own: HashSet<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_string)
        .collect();
    let own = &own;
    let new: Vec<Vec<Pattern>> = patterns
        .iter()
        .flat_map(|pattern| {
            phases.iter().map(move |ran| {
                ran.iter()
                    .filter(|f| own.contains(*f))
                    // Cold sections are known by `order::pattern`'s names.
                    .filter_map(|f| Some(Pattern { cold: cold.contains(&order::pattern(f)?), name: pattern(f)? }))
                    .collect()
            })
        })
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../build/order").join(format!("{name}.ld"));
    let mut old = if fresh {
        Vec::new()
    } else {
        std::fs::read_to_string(&path).map(|s| order::phases_of(&s)).unwrap_or_default()
    };
    // Exact names (every list but the last's) are this build's alone.
    for phase in old.iter_mut().take(phases.len() * (patterns.len() - 1)) {
        phase.clear();
    }
    let merged = order::merge(old, new);
    let about = format!(
        "What {name} runs first, side by side: written by `cargo bench -p kd-tests --bench start_order`, see docs/performance.md"
    );
    std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir build/order");
    std::fs::write(&path, order::script(&about, &merged)).expect("write the script");
    let counts: Vec<usize> = merged.iter().map(Vec::len).collect();
    println!("{}: {counts:?} functions by phase", path.display());
}
