//! `kdd-exec`, the program kdd starts agents through (issue 31, item 17):
//! the agent it execs leads a session of its own, has the umask and the
//! name it was given and dies when the thread that started it exits; a
//! program that cannot run, a parent that is gone or another kd's
//! arguments start nothing.

// The program under test is run directly: there is no kdd here to spawn it.
#![allow(clippy::disallowed_methods)]

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EXEC: &str = env!("CARGO_BIN_EXE_kdd-exec");

fn me() -> String {
    std::process::id().to_string()
}

/// `kdd-exec`'s arguments as kdd gives them: version, parent, umask, the
/// program's path, its name, then `args`.
fn exec_args(parent: &str, umask: &str, path: &str, name: &str, args: &[&str]) -> Vec<String> {
    ["1", parent, umask, path, name].iter().chain(args).map(|s| s.to_string()).collect()
}

#[test]
fn the_program_leads_its_session_with_the_umask_given_and_its_arguments() {
    let out = Command::new(EXEC)
        .args(exec_args(
            &me(),
            "027",
            "/bin/sh",
            "sh",
            &["-c", "umask; ps -o sid= -p $$; echo $$; echo \"$0|$1\"", "zero", "one two"],
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert_eq!(lines[0], "0027");
    assert_eq!(lines[1], lines[2], "its session is its own pid");
    assert_eq!(lines[3], "zero|one two");
}

#[test]
fn the_program_is_given_the_name_kd_was_told() {
    let out = Command::new(EXEC)
        .args(exec_args(&me(), "022", "/bin/sh", "agent-name", &["-c", "cat /proc/$$/cmdline | tr '\\0' ' '"]))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "agent-name -c cat /proc/$$/cmdline | tr '\\0' ' ' ");
}

/// The death signal, once set, follows the thread that started it: the
/// thread stays until the program has replaced kdd-exec (as kdd's
/// spawning threads, which live as long as kdd), then exits.
#[test]
fn the_program_dies_when_the_thread_that_started_it_exits() {
    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
    let starter = std::thread::spawn(move || {
        let child = Command::new(EXEC)
            .args(exec_args(&me(), "022", "/bin/sleep", "sleep", &["60"]))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        pid_tx.send(child).unwrap();
        let _ = exit_rx.recv();
    });
    let mut child = pid_rx.recv().unwrap();
    let comm = format!("/proc/{}/comm", child.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(Instant::now() < deadline, "kdd-exec never became sleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(child.try_wait().unwrap().is_none(), "sleep runs while its starter does");
    exit_tx.send(()).unwrap();
    starter.join().unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "sleep outlived the thread that started it");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.signal(), Some(9), "killed by its parent-death signal: {status:?}");
}

#[test]
fn a_program_that_cannot_run_or_a_parent_that_is_gone_starts_nothing() {
    let out = Command::new(EXEC).args(exec_args(&me(), "022", "/kd-no-such-agent", "agent", &[])).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cannot run /kd-no-such-agent") && said.contains("No such file"), "{said}");
    let marker = tempfile::tempdir().unwrap();
    let touched = marker.path().join("ran");
    let not_parent = (std::process::id() + 1).to_string();
    let touch = exec_args(&not_parent, "022", "/bin/touch", "touch", &[touched.to_str().unwrap()]);
    let out = Command::new(EXEC).args(touch).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(!touched.exists(), "nothing ran for a parent that is not kdd");
    let out = Command::new(EXEC).args(["x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
    // Another kd's arguments: refused, saying so.
    let mut other = exec_args(&me(), "022", "/bin/touch", "touch", &[touched.to_str().unwrap()]);
    other[0] = "2".into();
    let out = Command::new(EXEC).args(other).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("install kdd and kdd-exec together"));
    assert!(!touched.exists());
}
