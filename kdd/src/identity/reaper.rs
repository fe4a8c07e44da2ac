//! kdd as the child subreaper of its agents (`PR_SET_CHILD_SUBREAPER`): a
//! process an agent double-forks, whose parent then exits, is reparented to
//! kdd instead of init, so it cannot shed where it comes from. Such
//! orphans become kdd's children, and their zombies are reaped here — on
//! every SIGCHLD, each zombie child of kdd that kdd did not spawn itself
//! ([`super::children`]), by its pid. Never `waitpid(-1)`: tokio reaps the
//! children it spawned by their pids, and one taken from it would lose a
//! run's exit status.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

use super::ancestry;
use super::children::{self, Spawned};

/// Whether this process became its children's subreaper.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Whether kdd is the subreaper of what it starts ([`become_subreaper`]
/// said yes): then every process its agents started is below it.
pub fn is_subreaper() -> bool {
    SUBREAPER.load(Ordering::Relaxed)
}

/// Makes kdd the subreaper of what it starts; false (with a warning) when
/// the system refuses, or is not Linux — then an orphan escapes its agent's
/// confinement.
pub fn become_subreaper() -> bool {
    #[cfg(target_os = "linux")]
    {
        let me = rustix::process::getpid();
        match rustix::process::set_child_subreaper(Some(me)) {
            Ok(()) => {
                SUBREAPER.store(true, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::warn!("cannot become the agents' child subreaper: {e}; their orphans escape confinement");
                false
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        tracing::warn!("no child subreaper on this system: an agent's orphans escape confinement");
        false
    }
}

/// How long the reaper lets a burst of SIGCHLDs settle before it looks:
/// the children kdd waits for itself (a run's agent, through its pidfd)
/// are reaped by their waiters meanwhile, so that a look usually finds no
/// zombie at all and reads nothing of `/proc` (issue 31: every agent's end
/// cost a look, on the blocking pool, while its waiter reaped it). An
/// orphan's zombie waits that long more.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// Reaps the orphans that become kdd's children, on every SIGCHLD (once
/// the burst has settled), until `stop`.
pub fn spawn(stop: CancellationToken) {
    let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch SIGCHLD: orphans are not reaped: {e}");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                got = sigchld.recv() => if got.is_none() { return },
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => {}
            }
            // The SIGCHLDs of the burst are one look.
            while futures_util::FutureExt::now_or_never(sigchld.recv()).flatten().is_some() {}
            // One system call: most looks end here.
            if !any_zombie_child() {
                children::forget_gone(&mut children::spawned());
                continue;
            }
            let reaped = tokio::task::spawn_blocking(reap).await.unwrap_or_default();
            if !reaped.is_empty() {
                tracing::debug!(?reaped, "reaped {} orphan(s)", reaped.len());
            }
        }
    });
}

/// Reaps every zombie child of kdd it did not spawn; their pids. (The
/// reaper asks [`any_zombie_child`] first: without one, /proc is not
/// scanned.)
pub fn reap() -> Vec<u32> {
    let zombies = zombie_children(std::process::id());
    if zombies.is_empty() {
        children::forget_gone(&mut children::spawned());
        return Vec::new();
    }
    // Held until the reaping is done: a spawn registers its child before
    // anyone can see it here unregistered.
    let _no_spawn = children::no_spawn_under_way();
    let mut spawned = children::spawned();
    children::forget_gone(&mut spawned);
    let mut reaped = Vec::new();
    for pid in reapable(&zombies, &spawned) {
        let Some(p) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { continue };
        // A zombie child is reaped at once; anything else (it was reaped
        // meanwhile and its pid reused) is left as it is.
        if let Ok(Some(_)) = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG) {
            reaped.push(pid);
        }
    }
    reaped
}

/// Of `zombies` (kdd's zombie children), those kdd did not spawn: tokio
/// reaps the others.
fn reapable(zombies: &[u32], spawned: &BTreeMap<u32, Spawned>) -> Vec<u32> {
    zombies.iter().copied().filter(|pid| !spawned.contains_key(pid)).collect()
}

/// Whether kdd has a zombie child — any, one tokio waits for or an
/// orphan's — asked without reaping it (`waitid(P_ALL, WNOHANG | WNOWAIT)`).
/// A zombie that comes later comes with its own SIGCHLD.
fn any_zombie_child() -> bool {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    match waitid(WaitId::All, WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT) {
        Ok(found) => found.is_some(),
        // No children at all.
        Err(rustix::io::Errno::CHILD) => false,
        // Not known: look.
        Err(_) => true,
    }
}

/// The zombies whose parent is `parent`: of its children
/// (`/proc/PID/task/TID/children`, which keep a zombie until it is
/// reaped), or, where those cannot be read, of every process.
fn zombie_children(parent: u32) -> Vec<u32> {
    let pids = ancestry::children_of(parent).unwrap_or_else(|| {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).collect()
    });
    pids.into_iter().filter(|pid| ancestry::stat(*pid).is_some_and(|s| s.ppid == parent && s.is_zombie())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::children::Origin;

    #[test]
    fn only_the_zombies_kdd_did_not_spawn_are_reaped() {
        let spawned: BTreeMap<u32, Spawned> =
            [(20, Spawned { start: Some(5), origin: Origin::Tool })].into_iter().collect();
        assert_eq!(reapable(&[20, 30, 40], &spawned), [30, 40], "tokio waits for 20");
        assert!(reapable(&[], &spawned).is_empty());
    }

    #[test]
    // No reaper runs in unit tests: a child spawned directly is safe here.
    #[allow(clippy::disallowed_methods)]
    fn a_zombie_child_is_found_by_its_parent() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !zombie_children(std::process::id()).contains(&pid) {
            assert!(std::time::Instant::now() < deadline, "true never became a zombie");
            std::thread::yield_now();
        }
        assert!(any_zombie_child(), "its zombie is seen without being reaped");
        assert!(zombie_children(std::process::id()).contains(&pid), "still there");
        child.wait().unwrap();
        assert!(!zombie_children(std::process::id()).contains(&pid), "reaped by its own wait");
    }
}
