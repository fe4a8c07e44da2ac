//! Spawning agent processes and signalling them. What is spawned is an
//! [`Invocation`] (built by [`super::argv`] for an agent's CLI).
//!
//! Each agent runs in a session of its own, which it leads, and so in its
//! own process group (a signal reaches whatever it started) with the
//! workspace as cwd, and dies with the daemon: the kernel sends it SIGKILL
//! when the daemon's thread that is its parent exits (`PR_SET_PDEATHSIG`).
//! It runs with the umask kdd was started with, and an environment that
//! says `KD_NO_AUTOSTART=1` (a `kd` it runs never starts a daemon). How it
//! is started and set up is [`super::launch`]'s; what the caller holds is a
//! [`Child`]. Spawns happen on tokio worker threads, which live as long as
//! the daemon's runtime, or (a run's agent, [`spawn_off`]) on kdd's
//! spawning threads, which live as long as kdd. The pid and the process's
//! start time are recorded, so that after a crash a pid is only killed if
//! it still names the same process.

use std::path::Path;

use rustix::process::{Pid, Signal};

pub use super::child::Child;
use crate::identity::children::{self, Origin};

/// What to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: String,
    pub args: Vec<String>,
    /// Written to the agent's stdin, then closed; `None`: stdin is /dev/null.
    pub stdin: Option<String>,
    pub env: Vec<(String, String)>,
}

/// Spawns `inv` in `cwd`. stdout and stderr are piped; stdin is piped when
/// the invocation has input, otherwise /dev/null. It is recorded as what
/// its markers say it is (see [`crate::identity`]).
pub fn spawn(inv: &Invocation, cwd: &Path) -> std::io::Result<Child> {
    spawn_for(inv, cwd, cwd)
}

/// [`spawn`] on a spawning thread of kdd's ([`children::spawn_off`]): a
/// run's agent, started without holding a runtime worker.
/// The program is found and the command made there too: a `PATH` entry on
/// a hung file system holds a spawning thread, not a runtime worker.
pub async fn spawn_off(inv: &Invocation, cwd: &Path) -> std::io::Result<Child> {
    let (inv, cwd) = (inv.clone(), cwd.to_path_buf());
    children::spawn_off(move || spawn(&inv, &cwd)).await
}

/// [`spawn`] in `cwd` of a long-lived agent serving `workspace` (an ACP
/// agent working in a member's worktree serves the King's workspace).
pub fn spawn_for(inv: &Invocation, cwd: &Path, workspace: &Path) -> std::io::Result<Child> {
    super::launch::start(inv, cwd, origin(inv, workspace), None)
}

/// [`spawn`], with `confine` run in the child before exec, after its own
/// set-up (a session of its own, the death signal): what confines it (a
/// check in a member's worktree: [`crate::work::check`]). `confine` runs
/// in the child before exec: it may only make system calls, never allocate
/// or lock.
pub fn spawn_confined(
    inv: &Invocation,
    cwd: &Path,
    confine: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) -> std::io::Result<Child> {
    super::launch::start(inv, cwd, origin(inv, cwd), Some(Box::new(confine)))
}

/// What an agent is, by the markers of its invocation (the last value of a
/// variable is the one it gets), serving `workspace`.
fn origin(inv: &Invocation, workspace: &Path) -> Origin {
    let var = |key: &str| inv.env.iter().rfind(|(k, _)| k == key).map(|(_, v)| v.clone());
    let member = var(crate::identity::MEMBER_VAR);
    if let Some(run) = var(RUN_MARKER) {
        return Origin::Run { run, member };
    }
    match var(PEER_MARKER) {
        Some(marker) => Origin::Peer { marker, member, workspace: workspace.display().to_string() },
        None => Origin::Tool,
    }
}

/// Sends `signal` to the process group led by `pid`. A child kdd spawned
/// that leads no group (one started by a fork elsewhere than through
/// [`spawn`]) gets the signal alone — only while it is still the process
/// kdd spawned: a pid reused after it was reaped is left alone.
pub fn signal_group(pid: u32, signal: Signal) {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else { return };
    if rustix::process::kill_process_group(p, signal) == Err(rustix::io::Errno::SRCH)
        && children::origin_of(pid).is_some()
    {
        let _ = rustix::process::kill_process(p, signal);
    }
}

pub use crate::identity::{PEER_MARKER, RUN_MARKER};

/// The environment variable that gives a run's agent its capability (see
/// [`super::grants`]): `KD_RUN_TOKEN=kdcap_…`.
pub const TOKEN_VAR: &str = "KD_RUN_TOKEN";

/// `KEY=value`, as a marker is found in a process's environment.
pub fn marker(key: &str, value: &str) -> Vec<u8> {
    format!("{key}={value}").into_bytes()
}

/// The socket a `KD_PEER` value names.
fn peer_socket(value: &[u8]) -> Option<&[u8]> {
    let at = value.iter().position(|b| *b == b'@')?;
    Some(&value[at + 1..])
}

use crate::identity::ancestry::{Stat, stat};

/// When the process started, in clock ticks after boot (`/proc/PID/stat`
/// field 22); with the pid it names one process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    children::start_time(pid)
}

/// What a scan makes of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Kill,
    Spare,
    /// Its environment reads empty: a process in the middle of `execve`
    /// (between the switch to its new memory and the setting of its
    /// environment — a tool's `setsid` exec'ing `sleep`, say: the marker is
    /// there a moment later) or one started with no environment at all.
    /// Looked at again.
    Unsure,
}

/// Whether process `pid` has an environment entry (`KEY=value`) for which
/// `wanted` holds. Only our own processes can be read, which is all we kill.
fn carries_any(pid: u32, wanted: impl Fn(&[u8]) -> bool) -> Verdict {
    match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(env) if env.is_empty() => Verdict::Unsure,
        Ok(env) if env.split(|b| *b == 0).any(wanted) => Verdict::Kill,
        _ => Verdict::Spare,
    }
}

/// Whether process `pid` carries `marker` (`KD_RUN=<id>`) in its environment.
fn carries(pid: u32, marker: &[u8]) -> Verdict {
    carries_any(pid, |kv| kv == marker)
}

/// Where a kill looks for what a run left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// kdd's descendants: what an agent this daemon started, as their child
    /// subreaper, left — however it moved (to a group or a session of its
    /// own, a double fork: an orphan is reparented to kdd) — is below it.
    /// Read from `/proc/PID/task/TID/children`, a few files, where a scan of
    /// every process reads one per process (issue 31: it was a tenth of
    /// kdd's time at the end of each run).
    Descendants,
    /// Of kdd's descendants, what its main thread took in (and all below):
    /// what an agent kdd started, which exited and was reaped, left — its
    /// orphans went to kdd's main thread ([`crate::identity::ancestry::orphans`]).
    /// One children file for kdd where the threads of [`Scope::Descendants`]
    /// are a dozen, read twice a scan and two scans at least (issue 31, item
    /// 17: the end of every run).
    Orphans,
    /// Every process: an agent a previous daemon started (after a crash),
    /// or kdd is no subreaper.
    Everything,
}

/// Where to look for what the agent started at `started` left: below kdd
/// when this daemon started it as their subreaper.
fn scope(started: u64) -> Scope {
    scope_of(started, crate::identity::ancestry::own_start(), crate::identity::reaper::is_subreaper())
}

/// [`scope`] of an agent started at `started` by a kdd started at `own`.
/// Strictly after: start times are clock ticks (10 ms), and a run the
/// previous daemon started in the tick this one started in is not below
/// this one (e2e process_tree: recovery left what such a run started, 1
/// run in 100 with three suites side by side).
fn scope_of(started: u64, own: Option<u64>, subreaper: bool) -> Scope {
    if subreaper && own.is_some_and(|own| started > own) { Scope::Descendants } else { Scope::Everything }
}

/// The live processes (zombies are already dead) but this one, in `scope`
/// (every process when kdd's descendants cannot be read). Another process
/// kdd spawned itself than `leader` — another run's agent, a long-lived
/// agent, a tool — is left out with all below it: nothing a run left is
/// there (issue 31: each run's end read every other agent's threads,
/// children and environment).
fn live_processes(scope: Scope, leader: Option<u32>) -> Vec<(u32, Stat)> {
    let me = std::process::id();
    let spawned_else = |pid: u32| Some(pid) != leader && children::origin_of(pid).is_some();
    // The walk of descendants leaves them out as it goes; a scan of every
    // process (or where the walk cannot be made), here.
    let walked = match scope {
        Scope::Descendants => crate::identity::ancestry::descendants(me, spawned_else),
        Scope::Orphans => crate::identity::ancestry::orphans(me, spawned_else)
            .or_else(|| crate::identity::ancestry::descendants(me, spawned_else)),
        Scope::Everything => None,
    };
    let pids = walked.unwrap_or_else(|| every_pid().into_iter().filter(|pid| !spawned_else(*pid)).collect());
    pids.into_iter()
        .filter(|pid| *pid != me)
        .filter_map(|pid| stat(pid).filter(|s| !s.is_zombie()).map(|s| (pid, s)))
        .collect()
}

/// Every process's pid, from `/proc`.
fn every_pid() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether process `pid` is this user's (its `/proc` entry's owner).
fn is_own(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == rustix::process::getuid().as_raw())
}

/// Kills everything a run, or a long-lived agent, left behind, and returns
/// how many processes were signalled. `leader` is the agent kd spawned,
/// which led its own session and process group, and `started` its start
/// time; without a start time nothing can be told apart and nothing is
/// killed. `marker` (`KD_RUN=<run>`, `KD_PEER=<…>`, see [`marker`]) is
/// what the agent and all it started carry in their environment.
///
/// - The session and the group: every member that started after the
///   leader, when the leader is still the process that started then (the
///   group is then also signalled as a whole) or gone. An id is only reused
///   once the old session or group is empty, so a process `leader` with
///   another start time means the id was reused and they are not ours.
///   The session also holds what moved to a group of its own.
/// - Every process of ours carrying `marker` that started after the
///   leader, which catches what moved to a session of its own (unless it
///   cleared its environment).
///
/// Looked for among kdd's descendants when this daemon started the leader
/// as their child subreaper (a process an agent had another program start
/// for it — a terminal multiplexer's server, the service manager — is then
/// beyond reach, as it is beyond confinement: [`crate::identity`]); among
/// every process otherwise (what a previous daemon's agents left).
pub fn kill_tree(leader: u32, started: Option<u64>, marker: &[u8]) -> usize {
    let Some(started) = started else { return 0 };
    kill_below(leader, started, marker, scope(started))
}

/// [`kill_tree`] for a leader that exited and was reaped by kdd (its
/// waiter took its status): what it left is only where its orphans went,
/// below kdd's main thread ([`Scope::Orphans`]), when it is looked for
/// below kdd at all.
pub fn kill_left(leader: u32, started: Option<u64>, marker: &[u8]) -> usize {
    let Some(started) = started else { return 0 };
    let scope = match scope(started) {
        Scope::Descendants => Scope::Orphans,
        other => other,
    };
    kill_below(leader, started, marker, scope)
}

/// Whether a leader kdd reaped left nothing at all: kdd's main thread took
/// in no orphan, in two reads in a row as [`kill_while`] makes them (the
/// leader started after this daemon, which is its subreaper). Reads only
/// kdd's own children file — quick, and never held up by another process
/// as a read of its environment may be — so it is made on the caller's
/// thread, and [`kill_left`] goes to the blocking pool only when something
/// is there.
pub fn left_nothing(leader: u32, started: Option<u64>) -> bool {
    let Some(started) = started else { return true };
    scope(started) == Scope::Descendants && (0..2).all(|_| live_processes(Scope::Orphans, Some(leader)).is_empty())
}

fn kill_below(leader: u32, started: u64, marker: &[u8], scope: Scope) -> usize {
    let leader_is_ours = start_time(leader) == Some(started);
    let group_is_ours = leader_is_ours || start_time(leader).is_none();
    let killed = kill_while(scope, Some(leader), |pid, s| {
        if s.start < started {
            Verdict::Spare
        } else if group_is_ours && (s.pgrp == leader || s.session == leader) {
            Verdict::Kill
        } else {
            carries(pid, marker)
        }
    });
    if leader_is_ours {
        // What forked between the scans is in the group still.
        signal_group(leader, Signal::KILL);
    }
    killed
}

/// At start, before any agent runs: kills every process of ours that
/// carries a `KD_PEER` or `KD_CHECK` marker naming `socket` — what the
/// long-lived agents and the checks of a daemon that was killed on this
/// socket started (the agents and the checks' first processes died with
/// it, `PR_SET_PDEATHSIG`; what they started did not). Only what started
/// no later than `before` (this daemon's start time); returns how many.
pub fn kill_left_by_peers(socket: &str, before: u64) -> usize {
    let prefixes = [PEER_MARKER, crate::identity::CHECK_MARKER].map(|m| format!("{m}=").into_bytes());
    let ours = |kv: &[u8]| {
        prefixes.iter().any(|p| kv.strip_prefix(p.as_slice()).and_then(peer_socket) == Some(socket.as_bytes()))
    };
    kill_left_before(before, ours)
}

/// At start, before any agent runs: kills every process of ours that
/// carries one of `markers` (`KD_RUN=<run>`) and started no later than
/// `before` (this daemon's start time) — what the agents of runs whose pid
/// a killed daemon never recorded (it died between an agent's start and
/// the record) left running. Returns how many.
pub fn kill_carrying(markers: &[Vec<u8>], before: u64) -> usize {
    if markers.is_empty() {
        return 0;
    }
    kill_left_before(before, |kv| markers.iter().any(|m| kv == m.as_slice()))
}

/// SIGKILLs every process of ours that started no later than `before` and
/// carries an entry `wanted` picks in its environment: what a daemon
/// killed before this one left.
fn kill_left_before(before: u64, wanted: impl Fn(&[u8]) -> bool + Copy) -> usize {
    kill_while(
        Scope::Everything,
        None,
        |pid, s| if s.start <= before { carries_any(pid, wanted) } else { Verdict::Spare },
    )
}

/// SIGKILLs every process of ours in `scope` that `doomed` picks (of what
/// kdd spawned, only `leader`: [`live_processes`]); a process forking
/// meanwhile may leave a child behind, so the scan is repeated until two
/// scans in a row find nothing (at most eight): an orphan the agent's end
/// handed to kdd was, rarely, not yet in kdd's children files at the first
/// scan (e2e process_tree, 2 runs in 144 with three suites side by side).
/// A scan that could not tell a process ([`Verdict::Unsure`]: in the
/// middle of an exec) finds something: the next scan comes after a pause,
/// 1 ms doubling (≤ 127 ms in all) — a child in a session of its own
/// exec'ing past two quick scans outlived its run (e2e process_tree, once
/// in CI under load). How many were signalled.
fn kill_while(scope: Scope, leader: Option<u32>, doomed: impl Fn(u32, &Stat) -> Verdict) -> usize {
    let mut killed = std::collections::HashSet::new();
    let mut empty = 0;
    let mut pause = std::time::Duration::from_millis(1);
    const SCANS: usize = 8;
    for scan in 1..=SCANS {
        let mut unsure = false;
        let left: Vec<u32> = live_processes(scope, leader)
            .into_iter()
            .filter(|(pid, _)| !killed.contains(pid))
            .filter(|(pid, s)| match doomed(*pid, s) {
                Verdict::Kill => is_own(*pid),
                Verdict::Unsure => {
                    unsure |= is_own(*pid);
                    false
                }
                Verdict::Spare => false,
            })
            .map(|(pid, _)| pid)
            .collect();
        for pid in &left {
            if let Some(p) = i32::try_from(*pid).ok().and_then(Pid::from_raw) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
            killed.insert(*pid);
        }
        if unsure || !left.is_empty() {
            empty = 0;
        } else {
            empty += 1;
            if empty == 2 {
                break;
            }
        }
        // What was found is killed first; then the pause, before a scan
        // that follows.
        if unsure && scan < SCANS {
            std::thread::sleep(pause);
            pause *= 2;
        }
    }
    killed.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_agent_started_after_this_daemon_is_looked_for_below_it() {
        assert!(matches!(scope_of(101, Some(100), true), Scope::Descendants));
        assert!(matches!(scope_of(100, Some(100), true), Scope::Everything), "the same tick: maybe the last daemon's");
        assert!(matches!(scope_of(99, Some(100), true), Scope::Everything));
        assert!(matches!(scope_of(101, Some(100), false), Scope::Everything), "no subreaper");
        assert!(matches!(scope_of(101, None, true), Scope::Everything));
    }

    /// A child that leads no group (spawned by tokio without a session)
    /// still gets a stop: alone, as kdd spawned it.
    #[tokio::test]
    async fn a_child_that_leads_no_group_yet_is_signalled_alone() {
        let mut cmd = tokio::process::Command::new("sleep");
        cmd.arg("30").kill_on_drop(true);
        let origin = children::Origin::Run { run: "r-no-group".into(), member: None };
        let mut child = children::spawn(&mut cmd, origin).unwrap();
        let pid = child.id().unwrap();
        signal_group(pid, Signal::KILL);
        let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "killed although it leads no group");
    }

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

    /// A `sleep 30` in a process group of its own, with `env`.
    /// Waits (bounded) until process `pid` shows an environment entry
    /// beginning with `key`: until it has exec'd, a child shows its
    /// parent's environment.
    async fn until_marked(pid: u32, key: &[u8]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|e| e.split(|b| *b == 0).any(|kv| kv.starts_with(key)))
        {
            assert!(std::time::Instant::now() < deadline, "sleep {pid} never started");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    // No reaper runs in unit tests: a child spawned directly is safe here.
    #[allow(clippy::disallowed_methods)]
    fn sleeper(env: &[(&str, &str)]) -> (tokio::process::Child, u32, Option<u64>) {
        let child =
            tokio::process::Command::new("sleep").arg("30").envs(env.iter().copied()).process_group(0).spawn().unwrap();
        let pid = child.id().unwrap();
        (child, pid, start_time(pid))
    }

    #[tokio::test]
    async fn a_group_is_killed_only_while_its_leader_is_the_same_process() {
        let (mut child, pid, started) = sleeper(&[]);
        assert!(started.is_some());
        let run = marker(RUN_MARKER, "run-a");
        assert_eq!(kill_tree(pid, started.map(|s| s + 1), &run), 0, "another start time is another process");
        assert_eq!(kill_tree(pid, None, &run), 0, "nothing is known, nothing is killed");
        assert_eq!(start_time(pid), started);
        assert!(kill_tree(pid, started, &run) >= 1);
        child.wait().await.unwrap();
        assert_eq!(start_time(pid), None);
    }

    #[tokio::test]
    async fn what_carries_the_runs_marker_is_killed_when_the_leader_is_gone() {
        let (mut gone, leader, started) = sleeper(&[]);
        gone.kill().await.unwrap();
        let run = format!("run-{}", std::process::id());
        let (mut marked, marked_pid, _) = sleeper(&[(RUN_MARKER, &run)]);
        let (mut other, other_pid, _) = sleeper(&[(RUN_MARKER, "run-someone-else")]);
        // Until it has exec'd, a child shows its parent's environment
        // (which has no marker here; an agent's children inherit one).
        for pid in [marked_pid, other_pid] {
            until_marked(pid, b"KD_RUN=").await;
        }
        assert_eq!(kill_tree(leader, started, &marker(RUN_MARKER, &run)), 1);
        // Killed, not ended on its own (it sleeps for an hour).
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), marked.wait()).await;
        let status = ended.expect("the marked process ends").unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "the marked process was SIGKILLed: {status}");
        assert!(start_time(other_pid).is_some(), "another run's process is left alone");
        other.kill().await.unwrap();
    }

    /// Looking only among this process's descendants finds a marked child,
    /// and no other process.
    #[tokio::test]
    async fn among_the_descendants_what_carries_the_marker_is_killed() {
        let run = format!("run-desc-{}", std::process::id());
        let (mut marked, pid, started) = sleeper(&[(RUN_MARKER, &run)]);
        until_marked(pid, b"KD_RUN=").await;
        let started = started.unwrap();
        let ours = marker(RUN_MARKER, &run);
        let doomed = |p: u32, s: &Stat| if s.start >= started { carries(p, &ours) } else { Verdict::Spare };
        assert!(live_processes(Scope::Descendants, None).iter().any(|(p, _)| *p == pid), "a child is a descendant");
        assert_eq!(kill_while(Scope::Descendants, None, doomed), 1);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(marked.wait().await.unwrap().signal(), Some(9), "killed");
    }

    /// A process whose environment could not be told yet (in the middle of
    /// an exec: it reads empty) is looked at again, after a pause, and
    /// killed once it shows the marker — not spared by two quick scans. A
    /// process that stays unsure is spared, within a bounded wait.
    // No reaper runs in unit tests: a child spawned directly is safe here.
    #[allow(clippy::disallowed_methods)]
    #[tokio::test]
    async fn a_process_caught_in_the_middle_of_an_exec_is_looked_at_again() {
        use std::os::unix::process::ExitStatusExt;
        let (mut child, pid, _) = sleeper(&[]);
        let looks = std::sync::atomic::AtomicUsize::new(0);
        let doomed = |p: u32, _: &Stat| {
            if p != pid {
                return Verdict::Spare;
            }
            // Unsure at the first three looks, then the marker is there.
            if looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3 { Verdict::Unsure } else { Verdict::Kill }
        };
        assert_eq!(kill_while(Scope::Descendants, None, doomed), 1);
        assert_eq!(child.wait().await.unwrap().signal(), Some(9), "killed once its marker showed");

        let (mut child, pid, _) = sleeper(&[]);
        let began = std::time::Instant::now();
        let never = |p: u32, _: &Stat| if p == pid { Verdict::Unsure } else { Verdict::Spare };
        assert_eq!(kill_while(Scope::Descendants, None, never), 0);
        assert!(began.elapsed() < std::time::Duration::from_secs(2), "the looks are bounded: {:?}", began.elapsed());
        assert!(start_time(pid).is_some(), "a process never told apart is left alone");
        child.kill().await.unwrap();
        // An empty environment reads as unsure; one without the marker as spared.
        let (mut bare, bare_pid, _) = sleeper(&[]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read(format!("/proc/{bare_pid}/environ")).is_ok_and(|e| e.is_empty()) {
            assert!(std::time::Instant::now() < deadline, "sleep {bare_pid} never started");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(carries(bare_pid, b"KD_RUN=r-none"), Verdict::Spare);
        bare.kill().await.unwrap();
        let mut empty = tokio::process::Command::new("sleep").arg("30").env_clear().spawn().unwrap();
        let empty_pid = empty.id().unwrap();
        assert_eq!(carries(empty_pid, b"KD_RUN=r-none"), Verdict::Unsure);
        empty.kill().await.unwrap();
    }

    #[tokio::test]
    async fn what_a_killed_daemons_long_lived_agents_left_on_its_socket_is_killed() {
        use std::os::unix::process::ExitStatusExt;
        let socket = format!("/tmp/kd-test-{}/kdd.sock", std::process::id());
        let (mut left, left_pid, _) = sleeper(&[(PEER_MARKER, &format!("41.1@{socket}"))]);
        let (mut other, other_pid, _) = sleeper(&[(PEER_MARKER, &format!("41.2@{socket}.other"))]);
        for pid in [left_pid, other_pid] {
            until_marked(pid, b"KD_PEER=").await;
        }
        let before = start_time(std::process::id()).unwrap();
        assert_eq!(kill_left_by_peers(&socket, before), 0, "what started after this daemon is not left by another");
        assert_eq!(kill_left_by_peers(&socket, u64::MAX), 1);
        assert_eq!(left.wait().await.unwrap().signal(), Some(9), "killed");
        assert!(start_time(other_pid).is_some(), "another socket's agents are left alone");
        other.kill().await.unwrap();
    }

    #[tokio::test]
    async fn what_a_run_left_is_found_by_its_marker_when_no_pid_was_recorded() {
        use std::os::unix::process::ExitStatusExt;
        let (mut left, left_pid, _) = sleeper(&[(RUN_MARKER, "r-left")]);
        let (mut other, other_pid, _) = sleeper(&[(RUN_MARKER, "r-other")]);
        for pid in [left_pid, other_pid] {
            until_marked(pid, b"KD_RUN=").await;
        }
        let markers = [marker(RUN_MARKER, "r-left")];
        let before = start_time(std::process::id()).unwrap();
        assert_eq!(kill_carrying(&markers, before), 0, "what started after this daemon is not left by another");
        assert_eq!(kill_carrying(&[], u64::MAX), 0, "no run, nothing killed");
        assert_eq!(kill_carrying(&markers, u64::MAX), 1);
        assert_eq!(left.wait().await.unwrap().signal(), Some(9), "killed");
        assert!(start_time(other_pid).is_some(), "another run's processes are left alone");
        other.kill().await.unwrap();
    }

    /// A run's agent, spawned on kdd's spawning threads, leads a session
    /// of its own and is known as its run's, as one spawned in place is.
    #[tokio::test]
    async fn an_agent_spawned_off_the_runtime_leads_its_session_and_is_known_as_its_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let inv = Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), "ps -o sid= -p $$".into()],
            stdin: None,
            env: vec![(RUN_MARKER.into(), "r-off".into())],
        };
        let child = spawn_off(&inv, tmp.path()).await.unwrap();
        let pid = child.id().unwrap();
        let run = children::Origin::Run { run: "r-off".into(), member: None };
        assert_eq!(children::origin_of(pid), Some(run));
        let out = child.wait_with_output().await.unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pid.to_string(), "its own session");
        let missing = Invocation { program: "kd-no-such-agent".into(), args: vec![], stdin: None, env: vec![] };
        assert_eq!(spawn_off(&missing, tmp.path()).await.unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn a_missing_program_is_not_found() {
        let inv = Invocation { program: "kd-no-such-agent".into(), args: vec![], stdin: None, env: vec![] };
        let e = spawn(&inv, Path::new("/")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
