//! Spawning agent processes and signalling them.
//!
//! Each agent runs in its own process group (so a signal reaches whatever
//! it started) with the workspace as cwd, and dies with the daemon: the
//! kernel sends it SIGKILL when the daemon's thread that spawned it exits
//! (`PR_SET_PDEATHSIG`). Spawns happen on tokio worker threads, which live
//! as long as the daemon's runtime. It runs with the umask kdd was started
//! with. The pid and the process's start time
//! are recorded, so that after a crash a pid is only killed if it still
//! names the same process.

use std::path::Path;
use std::process::Stdio;

use rustix::process::{Pid, Signal};
use tokio::process::{Child, Command};

use super::argv::Invocation;

/// Spawns `inv` in `cwd`. stdout and stderr are piped; stdin is piped when
/// the invocation has input, otherwise /dev/null.
pub fn spawn(inv: &Invocation, cwd: &Path) -> std::io::Result<Child> {
    let mut cmd = Command::new(&inv.program);
    cmd.args(&inv.args)
        .envs(inv.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(cwd)
        .stdin(if inv.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    set_up_child(&mut cmd);
    cmd.spawn()
}

/// In the child before exec: the kernel is to SIGKILL it when its parent
/// goes away, and it gets the umask kdd was started with (kdd's is 077).
#[allow(unsafe_code)]
fn set_up_child(cmd: &mut Command) {
    let parent = rustix::process::getpid();
    let umask = crate::private::inherited_umask();
    // SAFETY: the closure runs in the forked child before exec and only
    // makes three syscalls (umask, prctl, getppid): no allocation, no locks.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::umask(umask);
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died between fork and prctl.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("parent exited"));
            }
            Ok(())
        });
    }
}

/// Sends `signal` to the process group led by `pid`.
pub fn signal_group(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// When the process started, in clock ticks after boot (`/proc/PID/stat`
/// field 22); with the pid it names one process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold spaces.
    let after_name = stat.rsplit_once(')')?.1;
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Kills the group of `pid` if `pid` still names the process that started
/// at `started` (it may have been reused since).
pub fn kill_if_same(pid: u32, started: Option<u64>) -> bool {
    match (start_time(pid), started) {
        (Some(now), Some(then)) if now == then => {
            signal_group(pid, Signal::KILL);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn children_get_their_own_group_and_cwd() {
        let tmp = tempfile::tempdir().unwrap();
        let inv = Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), "pwd; ps -o pgid= -p $$".into()],
            stdin: None,
            env: vec![("KD_X".into(), "1".into())],
        };
        let child = spawn(&inv, tmp.path()).unwrap();
        let pid = child.id().unwrap();
        let out = child.wait_with_output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        assert_eq!(lines.next().map(std::path::PathBuf::from), Some(tmp.path().canonicalize().unwrap()));
        assert_eq!(lines.next().map(str::trim), Some(pid.to_string().as_str()), "its own process group");
    }

    #[tokio::test]
    async fn start_time_identifies_a_live_process_only() {
        let mut child = Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let pid = child.id().unwrap();
        let started = start_time(pid);
        assert!(started.is_some());
        assert!(!kill_if_same(pid, started.map(|s| s + 1)), "another start time is another process");
        assert!(kill_if_same(pid, started));
        child.wait().await.unwrap();
        assert_eq!(start_time(pid), None);
    }

    #[tokio::test]
    async fn a_missing_program_is_not_found() {
        let inv = Invocation { program: "kd-no-such-agent".into(), args: vec![], stdin: None, env: vec![] };
        let e = spawn(&inv, Path::new("/")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
