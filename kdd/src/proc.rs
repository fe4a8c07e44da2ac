//! Process facts the registry needs.

/// Whether a process with this pid exists (a pid owned by another user
/// counts as alive). Pid 0 and out-of-range pids are never alive.
pub fn pid_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else {
        return false;
    };
    let exists = match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    };
    exists && !zombie(pid.as_raw_nonzero().get())
}

/// Whether `pid` has exited and only waits to be reaped (Linux: state `Z`
/// in `/proc/PID/stat`): it holds nothing any more.
fn zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // `PID (COMM) STATE …`: the command may hold spaces and parentheses.
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // No reaper runs in unit tests: a child spawned directly is safe here.
    #[allow(clippy::disallowed_methods)]
    fn own_pid_is_alive_and_reaped_child_is_not() -> std::io::Result<()> {
        assert!(pid_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn()?;
        let pid = child.id();
        child.wait()?;
        assert!(!pid_alive(pid));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
        Ok(())
    }

    #[test]
    #[allow(clippy::disallowed_methods)]
    fn a_killed_process_its_parent_has_not_reaped_yet_is_not_alive() -> std::io::Result<()> {
        // Found trying it: a kdd killed with -9 and restarted at once was
        // refused its node name while the dead one waited to be reaped.
        let mut child = std::process::Command::new("sleep").arg("60").spawn()?;
        let pid = child.id();
        child.kill()?;
        // Dead, but a zombie until waited for: its state turns Z.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z ")) {
            assert!(std::time::Instant::now() < deadline, "the child never died");
            std::thread::yield_now();
        }
        assert!(!pid_alive(pid), "a zombie is dead");
        child.wait()?;
        Ok(())
    }
}
