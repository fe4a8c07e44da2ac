//! The processes kdd spawned, as long as they exist: each with its start
//! time (with the pid it names one process for good) and what it is — an
//! agent of a run, a long-lived agent, or a tool such as a CLI's
//! `--version`. Every spawn of kdd goes through [`spawn`] (kdd's
//! `clippy.toml` denies the others), under the lock the reaper takes, so
//! that the reaper ([`super::reaper`]) knows which of its children tokio
//! waits for, and [`super::place`] knows which agent a process descends
//! from.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, RwLock, RwLockWriteGuard};

/// What a process kdd spawned is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The agent of a run (`KD_RUN=<run>`), run as `member`.
    Run { run: String, member: Option<String> },
    /// A long-lived agent (`KD_PEER=<marker>`): a codex app-server or an
    /// ACP agent, one member's in `workspace` (`member`: its `KD_MEMBER`).
    Peer { marker: String, member: Option<String>, workspace: String },
    /// Something else kdd runs (a CLI's `--version` for `kd doctor`).
    Tool,
}

/// A process kdd spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawned {
    /// Its start time (`/proc/PID/stat` field 22), if it could be read.
    pub start: Option<u64>,
    pub origin: Origin,
}

static SPAWNED: Mutex<BTreeMap<u32, Spawned>> = Mutex::new(BTreeMap::new());

/// Held shared by each [`spawn`] from its fork to its record, so that
/// spawns go on side by side (a fork and an exec take a worker thread for
/// a while: three members' agents are not started one after another), and
/// whole by the reaper from its decision to its `waitpid`.
static SPAWNING: RwLock<()> = RwLock::new(());

/// The processes kdd spawned, by pid.
pub(super) fn spawned() -> MutexGuard<'static, BTreeMap<u32, Spawned>> {
    SPAWNED.lock().unwrap_or_else(|e| e.into_inner())
}

/// No spawn is under way while this is held: every child kdd has is
/// recorded.
pub(super) fn no_spawn_under_way() -> RwLockWriteGuard<'static, ()> {
    SPAWNING.write().unwrap_or_else(|e| e.into_inner())
}

/// Spawns `cmd` and records the child as `origin`. The only way kdd starts
/// a process with tokio's `Command` (kdd's own clone goes through
/// [`record`]).
#[allow(clippy::disallowed_methods)]
pub fn spawn(cmd: &mut tokio::process::Command, origin: Origin) -> std::io::Result<tokio::process::Child> {
    record(origin, || cmd.spawn(), tokio::process::Child::id)
}

/// Starts a process by `start` and records it as `origin` by the pid
/// `pid_of` tells, under the lock the reaper takes: it is known before the
/// reaper could see its zombie.
pub fn record<T>(
    origin: Origin,
    start: impl FnOnce() -> std::io::Result<T>,
    pid_of: impl FnOnce(&T) -> Option<u32>,
) -> std::io::Result<T> {
    let _spawning = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    let child = start()?;
    if let Some(pid) = pid_of(&child) {
        // Not waited for yet, so not reaped: the pid is still this child.
        let start = start_time(pid);
        spawned().insert(pid, Spawned { start, origin });
    }
    Ok(child)
}

/// Forgets `pid`, a child no longer waited for: the reaper takes its
/// zombie.
pub fn forget(pid: u32) {
    spawned().remove(&pid);
}

/// What a spawning thread runs: a spawn, which replies itself.
type Job = Box<dyn FnOnce() + Send>;

/// How many spawning threads: a round starts its members at once, and a
/// spawning thread is held until its child has exec'd — with as many as a
/// usual council has members, none waits for another's (issue 31, item
/// 17: with two, the third of three members started ~0.7 ms later). Idle,
/// they cost nothing; they are started at the first spawn.
const SPAWNING_THREADS: usize = 4;

/// The spawning threads' queue; `None` when they could not be started.
fn spawning_threads() -> Option<&'static std::sync::mpsc::Sender<Job>> {
    static QUEUE: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Job>();
            let rx = std::sync::Arc::new(Mutex::new(rx));
            let mut started = 0;
            for n in 0..SPAWNING_THREADS {
                let rx = rx.clone();
                let thread = std::thread::Builder::new().name(format!("kdd-spawn-{n}")).spawn(move || {
                    loop {
                        // Held only while taking one job: the other
                        // thread takes the next meanwhile.
                        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(job) = next else { return };
                        job();
                    }
                });
                match thread {
                    Ok(_) => started += 1,
                    Err(e) => tracing::warn!("cannot start a spawning thread: {e}"),
                }
            }
            (started > 0).then_some(tx)
        })
        .as_ref()
}

/// `spawn` (which spawns through [`spawn`] or [`record`]) on one of kdd's
/// spawning threads, in the runtime of the caller (the child's pipes and
/// its waiting belong to it). They live as long as kdd does (an agent's
/// parent-death signal is sent when the *thread* that is its parent
/// exits), and a spawn there holds no runtime worker while the program is
/// found on a `PATH` that may hang and the child execs. Where no spawning
/// thread could be started, spawns here.
pub async fn spawn_off<T: Send + 'static>(
    spawn: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    let job: Job = Box::new(move || {
        let _runtime = runtime.enter();
        let _ = reply.send(spawn());
    });
    let here = match spawning_threads() {
        Some(queue) => queue.send(job).err().map(|std::sync::mpsc::SendError(job)| job),
        None => Some(job),
    };
    if let Some(job) = here {
        job();
    }
    answer.await.unwrap_or_else(|_| Err(std::io::Error::other("the spawning thread is gone")))
}

/// [`spawn`] of a tool kdd waits on (git in a member's worktree) that
/// dies with kdd: the kernel sends it SIGKILL when its parent thread
/// exits (`PR_SET_PDEATHSIG`, Linux), so one a crashed kdd left never
/// runs on beside the next — a git holding a worktree's `index.lock` took
/// every commit there from the restarted daemon. Spawned on a spawning
/// thread ([`spawn_off`]), which lives as long as kdd (a runtime worker
/// may not). What the tool starts in turn is its own to stop.
pub async fn spawn_tool(mut cmd: tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    dies_with_kdd(&mut cmd);
    spawn_off(move || spawn(&mut cmd, Origin::Tool)).await
}

/// Sets `cmd`'s child to be killed when its parent thread exits (Linux;
/// elsewhere nothing), refusing to start when the parent is already gone
/// (it may die between fork and prctl). Runs after what `cmd` was given
/// to do in the fork before.
#[allow(unsafe_code)]
pub(crate) fn dies_with_kdd(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = rustix::process::getpid();
        // SAFETY: the closure runs in the forked child before exec and only
        // makes two syscalls (prctl, getppid): no allocation, no locks.
        unsafe {
            cmd.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
                if rustix::process::getppid() != Some(parent) {
                    // No allocation here: the error's code alone.
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// What process `pid` is, if kdd spawned it (and it is still that process).
pub fn origin_of(pid: u32) -> Option<Origin> {
    let spawned = spawned().get(&pid).cloned()?;
    (spawned.start.is_some() && start_time(pid) == spawned.start).then_some(spawned.origin)
}

/// Forgets the processes that are gone (reaped, or their pid reused). One
/// whose start time could not be read is kept while its pid exists.
pub(super) fn forget_gone(spawned: &mut BTreeMap<u32, Spawned>) {
    spawned.retain(|pid, s| match (s.start, start_time(*pid)) {
        (Some(then), Some(now)) => then == now,
        (None, now) => now.is_some(),
        (Some(_), None) => false,
    });
}

/// When `pid` started, in clock ticks after boot (`/proc/PID/stat` field
/// 22), also for a zombie.
pub fn start_time(pid: u32) -> Option<u64> {
    super::ancestry::stat(pid).map(|s| s.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_spawned_process_is_known_by_its_pid_and_start_until_it_is_gone() {
        let mut cmd = tokio::process::Command::new("sleep");
        cmd.arg("30").kill_on_drop(true);
        let origin = Origin::Run { run: "r-children-test".into(), member: Some("claude".into()) };
        let mut child = spawn(&mut cmd, origin.clone()).unwrap();
        let pid = child.id().unwrap();
        assert_eq!(origin_of(pid), Some(origin));
        child.kill().await.unwrap();
        assert_eq!(origin_of(pid), None, "reaped: its pid names nothing");
        forget_gone(&mut spawned());
        assert!(!spawned().contains_key(&pid), "forgotten once gone");
    }
}
