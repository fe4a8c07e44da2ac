//! How a process kdd spawns for an agent or a check is started: its
//! environment, its pipes, and its set-up before it runs — a session of its
//! own, the user's umask, death with kdd (see [`super::process`]).
//!
//! On Linux kdd clones the child itself ([`vfork`]), as `posix_spawn` does
//! but with that set-up done in the child (issue 31, item 17: a fork of
//! kdd cost it a copy of its page tables and copy-on-write faults, and the
//! `kdd-exec` program that did the set-up after a `posix_spawn` cost ~1.3
//! ms of CPU an agent). Elsewhere, or on a kernel without pollable pidfds
//! (before 5.3), tokio forks and the same set-up runs in the fork.
//!
//! The program is found on the `PATH` of the environment it is given, as
//! `execvp` would find it, so that one that is not there is an error of the
//! spawn (`NotFound`, or `PermissionDenied` for one that is not
//! executable), not an agent that exits 127.
//!
//! The environment is kdd's, without kd's markers and capability (those of
//! the invocation are the only ones), the service manager's variables and
//! the registry's credentials, with the invocation's variables and
//! `KD_NO_AUTOSTART=1`: a `kd` the agent runs never starts a daemon.

#[cfg(target_os = "linux")]
mod vfork;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::child::Child;
use super::process::{Invocation, PEER_MARKER, RUN_MARKER, TOKEN_VAR};
use crate::identity::children::{self, Origin};

/// What confines a child, run in it last before exec: only system calls,
/// no allocation, no lock (a check's Landlock ruleset).
pub type ConfineFn = dyn FnMut() -> io::Result<()> + Send + Sync;

/// A [`ConfineFn`] given to [`start`].
pub type Confine = Box<ConfineFn>;

/// Starts `inv` in `cwd`, confined by `confine`, and records it as
/// `origin`. stdout and stderr are piped; stdin is piped when the
/// invocation has input, otherwise /dev/null.
pub fn start(inv: &Invocation, cwd: &Path, origin: Origin, confine: Option<Confine>) -> io::Result<Child> {
    // A child is waited for, and its pipes read, by the runtime (which
    // panics to be asked without one).
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other("a child is started only within kdd's runtime"));
    }
    let env = environment(inv);
    #[cfg(target_os = "linux")]
    let confine = match cloned(inv, cwd, &env, &origin, confine)? {
        Ok(child) => return Ok(child),
        Err(cannot) => cannot,
    };
    forked(inv, cwd, env, origin, confine)
}

/// Whether kdd's own clone works here: until a clone says it does not.
#[cfg(target_os = "linux")]
static CLONE_WORKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Starts `inv` by kdd's own clone ([`vfork`]); `Ok(Err(confine))` when
/// this kernel cannot (the confinement back, for a fork).
#[cfg(target_os = "linux")]
fn cloned(
    inv: &Invocation,
    cwd: &Path,
    env: &[(OsString, OsString)],
    origin: &Origin,
    mut confine: Option<Confine>,
) -> io::Result<Result<Child, Option<Confine>>> {
    use std::sync::atomic::Ordering;
    if !CLONE_WORKS.load(Ordering::Relaxed) {
        return Ok(Err(confine));
    }
    let path = found(&inv.program, env, cwd)?;
    let umask = crate::private::inherited_umask().bits();
    let program = vfork::Program::new(&path, &inv.program, &inv.args, env, cwd, umask)?;
    let pipes = Pipes::new(inv.stdin.is_some())?;
    let stdio = pipes.for_child();
    let started = children::record(
        origin.clone(),
        || vfork::spawn(&program, stdio, confine.as_deref_mut()).transpose(),
        |started| started.as_ref().map(|(pid, _)| *pid),
    )?;
    let Some((pid, pidfd)) = started else {
        CLONE_WORKS.store(false, Ordering::Relaxed);
        tracing::warn!("this kernel has no pollable pidfds (Linux 5.3 or newer has): agents are started by fork");
        return Ok(Err(confine));
    };
    let (stdin, stdout, stderr) = pipes.for_kdd();
    Child::cloned(pid, pidfd, stdin, stdout, stderr).map(Ok)
}

/// The pipes of a child kdd clones: the ends it is given (each above 2,
/// close-on-exec in kdd) and the ends kdd keeps.
#[cfg(target_os = "linux")]
struct Pipes {
    /// Its standard input, output and error.
    child: [std::os::fd::OwnedFd; 3],
    stdin: Option<std::os::fd::OwnedFd>,
    stdout: std::os::fd::OwnedFd,
    stderr: std::os::fd::OwnedFd,
}

#[cfg(target_os = "linux")]
impl Pipes {
    /// Pipes for stdout and stderr, and for stdin when it `has_input`
    /// (/dev/null otherwise).
    fn new(has_input: bool) -> io::Result<Pipes> {
        use rustix::pipe::{PipeFlags, pipe_with};
        let (stdin_child, stdin) = if has_input {
            let (read, write) = pipe_with(PipeFlags::CLOEXEC)?;
            (read, Some(write))
        } else {
            (rustix::fs::open("/dev/null", rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC, 0.into())?, None)
        };
        let (stdout, stdout_child) = pipe_with(PipeFlags::CLOEXEC)?;
        let (stderr, stderr_child) = pipe_with(PipeFlags::CLOEXEC)?;
        let child = [above_stdio(stdin_child)?, above_stdio(stdout_child)?, above_stdio(stderr_child)?];
        Ok(Pipes { child, stdin, stdout, stderr })
    }

    fn for_child(&self) -> [std::os::fd::RawFd; 3] {
        use std::os::fd::AsRawFd;
        [self.child[0].as_raw_fd(), self.child[1].as_raw_fd(), self.child[2].as_raw_fd()]
    }

    /// kdd's ends; the child's are closed.
    fn for_kdd(self) -> (Option<std::os::fd::OwnedFd>, std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
        (self.stdin, self.stdout, self.stderr)
    }
}

/// `fd`, or a copy of it above 2 (kdd's own 0, 1 or 2 was closed): the
/// child's `dup2`s onto 0, 1 and 2 never overwrite one another's source.
#[cfg(target_os = "linux")]
fn above_stdio(fd: std::os::fd::OwnedFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    if fd.as_raw_fd() > 2 { Ok(fd) } else { Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?) }
}

/// Starts `inv` by tokio's fork, set up in the fork before exec.
fn forked(
    inv: &Invocation,
    cwd: &Path,
    env: Vec<(OsString, OsString)>,
    origin: Origin,
    confine: Option<Confine>,
) -> io::Result<Child> {
    let mut cmd = tokio::process::Command::new(&inv.program);
    cmd.args(&inv.args)
        .env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(if inv.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    set_up_in_fork(&mut cmd);
    if let Some(confine) = confine {
        // SAFETY: the caller's closure only makes system calls (see `Confine`).
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(confine);
        }
    }
    children::spawn(&mut cmd, origin).map(Child::tokio)
}

/// The variables that may hold the registry's credentials: a PostgreSQL
/// password (in `KD_DB`'s URL, or libpq's own variables) is kdd's, never an
/// agent's.
const REGISTRY_SECRETS: &[&str] = &["PGPASSWORD", "PGPASSFILE", "PGSERVICEFILE", "PGSERVICE"];

/// The environment `inv` runs with (see the module's documentation).
fn environment(inv: &Invocation) -> Vec<(OsString, OsString)> {
    environment_from(std::env::vars_os(), inv)
}

/// [`environment`] over kdd's environment `own`.
fn environment_from(own: impl Iterator<Item = (OsString, OsString)>, inv: &Invocation) -> Vec<(OsString, OsString)> {
    // kd's markers and a capability come from the invocation alone, never
    // from kdd's own environment (a kdd started from an agent's shell
    // carries its marker and its token).
    let mut env: std::collections::BTreeMap<OsString, OsString> =
        own.filter(|(k, _)| ![RUN_MARKER, PEER_MARKER, TOKEN_VAR].iter().any(|m| k == m)).collect();
    for (k, v) in &inv.env {
        env.insert(k.into(), v.into());
    }
    let db_is_url = env
        .get(std::ffi::OsStr::new(kd_proto::paths::ENV_DB))
        .is_some_and(|db| db.to_str().is_some_and(kd_proto::paths::is_db_url));
    if db_is_url {
        env.remove(std::ffi::OsStr::new(kd_proto::paths::ENV_DB));
    }
    for var in crate::service::MANAGER_VARS.iter().chain(REGISTRY_SECRETS) {
        env.remove(std::ffi::OsStr::new(var));
    }
    // A `kd` the agent runs (`kd send` from its shell) never starts a
    // daemon: it knows neither this daemon's registry nor its node, and
    // one of its commands that outlives this daemon would start a kdd of
    // its own that nobody stops.
    env.insert(kd_proto::paths::ENV_NO_AUTOSTART.into(), "1".into());
    env.into_iter().collect()
}

/// Where `program` is, as `execvp` would find it with the `PATH` of `env`;
/// a name with a `/` is where it says (relative to `cwd`, where the program
/// starts). `NotFound` if there is no such file; `PermissionDenied` if
/// there is one but none kdd's user may execute.
fn found(program: &str, env: &[(OsString, OsString)], cwd: &Path) -> io::Result<PathBuf> {
    let not_found = || io::Error::from(io::ErrorKind::NotFound);
    if program.contains('/') {
        return match runnable(&cwd.join(program)) {
            Some(true) => Ok(PathBuf::from(program)),
            Some(false) => Err(io::Error::from(io::ErrorKind::PermissionDenied)),
            None => Err(not_found()),
        };
    }
    if program.is_empty() {
        return Err(not_found());
    }
    // As execvp: without a PATH, the system's default one (not the working
    // directory, where a repository could name the program); an empty
    // entry is the working directory; one where the program cannot be run
    // is passed over.
    let path = env.iter().rfind(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap_or_else(|| DEFAULT_PATH.into());
    let mut denied = false;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let candidate = cwd.join(dir).join(program);
        match runnable(&candidate) {
            Some(true) => return Ok(candidate),
            Some(false) => denied = true,
            None => {}
        }
    }
    Err(if denied { io::Error::from(io::ErrorKind::PermissionDenied) } else { not_found() })
}

/// Where a program is looked for without a `PATH` (glibc's `execvp`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Whether `path` is a file kdd's user may execute; `None` if it is no file.
fn runnable(path: &Path) -> Option<bool> {
    let is_file = std::fs::metadata(path).is_ok_and(|meta| meta.is_file());
    is_file.then(|| rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok())
}

/// In the fork before exec, as [`vfork`] does it: it leads a session of its
/// own (and so its own process group: the session's id and the group's are
/// its pid), it gets the umask kdd was started with (kdd's is 077), and the
/// kernel is to SIGKILL it when its parent goes away. The session is what
/// places an orphan of it ([`crate::identity`]): a process keeps its
/// session when it is reparented or changes group, and cannot join
/// another's.
#[allow(unsafe_code)]
fn set_up_in_fork(cmd: &mut tokio::process::Command) {
    crate::private::with_user_umask(cmd);
    // SAFETY: the closure runs in the forked child before exec and only
    // makes one syscall (setsid): no allocation, no locks.
    unsafe {
        cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(io::Error::from));
    }
    crate::identity::children::dies_with_kdd(cmd);
}

#[cfg(test)]
mod tests;
