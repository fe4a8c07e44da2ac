//! `kdd-exec`, the program kdd starts agents through (issue 31, item 17):
//! the agent it execs leads a session of its own, has the umask it was
//! given and dies when the thread that started it exits; a program that
//! cannot run, or a parent that is gone, starts nothing.

// The program under test is run directly: there is no kdd here to spawn it.
#![allow(clippy::disallowed_methods)]

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EXEC: &str = env!("CARGO_BIN_EXE_kdd-exec");

fn me() -> String {
    std::process::id().to_string()
}

#[test]
fn the_program_leads_its_session_with_the_umask_given_and_its_arguments() {
    let out = Command::new(EXEC)
        .args([&me(), "027", "/bin/sh", "-c", "umask; ps -o sid= -p $$; echo $$; echo \"$0|$1\"", "zero", "one two"])
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
fn the_program_dies_when_the_thread_that_started_it_exits() {
    let child = std::thread::spawn(|| {
        Command::new(EXEC).args([&me(), "022", "/bin/sleep", "60"]).stdin(Stdio::null()).spawn().unwrap()
    })
    .join()
    .unwrap();
    let mut child = child;
    let deadline = Instant::now() + Duration::from_secs(20);
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
    let out = Command::new(EXEC).args([&me(), "022", "/kd-no-such-agent"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("cannot run /kd-no-such-agent") && said.contains("No such file"), "{said}");
    let marker = tempfile::tempdir().unwrap();
    let touched = marker.path().join("ran");
    let not_parent = (std::process::id() + 1).to_string();
    let out = Command::new(EXEC).args([&not_parent, "022", "/bin/touch", touched.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(!touched.exists(), "nothing ran for a parent that is not kdd");
    let out = Command::new(EXEC).args(["x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
}
