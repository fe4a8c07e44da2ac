//! Starting a program as `posix_spawn` does — `clone(CLONE_VM |
//! CLONE_VFORK)` — with the set-up `posix_spawn` cannot do (issue 31, item
//! 17). The child runs on a stack of its own in kdd's memory, and the
//! thread that clones waits until the child has exec'd (or failed): no
//! copy of kdd's page tables, no copy-on-write faults, no second program
//! to set things up (`kdd-exec`, which cost ~1.3 ms of CPU per agent).
//!
//! In the child, before exec: every signal's action back to its default
//! (kdd's handlers are kdd's; SIGPIPE, which Rust ignores, too) and none
//! blocked; a session of its own, which it leads; the user's umask; the
//! parent-death signal (SIGKILL), and a check that kdd did not die before
//! it was set; standard input, output and error; the working directory;
//! then whatever confines it (Landlock for a check). Only system calls
//! run there — no allocation, no lock: the memory is kdd's, shared with
//! its other threads. Every signal is blocked in the cloning thread from
//! before the clone until it returns, so that no handler of kdd's runs in
//! the child.
//!
//! The clone gives a pidfd for the child ([`super::super::child`] waits on
//! it), made with the process: no pid to be reused in between.

use std::ffi::{CString, OsStr, OsString, c_char, c_int, c_void};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use super::ConfineFn;

/// The child's stack. It runs a few system calls and, for a check, the
/// closure that confines it: a few hundred bytes; 64 KiB is far more.
const STACK_BYTES: usize = 64 * 1024;

/// The highest signal number (Linux's `_NSIG - 1`).
const LAST_SIGNAL: c_int = 64;

/// What the child is to run, made into C strings before the clone (the
/// child cannot allocate).
pub struct Program {
    path: CString,
    /// Owns what `argv` points at.
    _args: Vec<CString>,
    argv: Vec<*const c_char>,
    /// Owns what `envp` points at.
    _env: Vec<CString>,
    envp: Vec<*const c_char>,
    cwd: CString,
    umask: libc::mode_t,
}

impl Program {
    /// `path` run as `argv0 args…` in `cwd`, with exactly `env`, under
    /// `umask`. A string with a NUL byte cannot be given: an error, as the
    /// standard library's spawn says.
    pub fn new(
        path: &Path,
        argv0: &str,
        args: &[String],
        env: &[(OsString, OsString)],
        cwd: &Path,
        umask: u32,
    ) -> io::Result<Program> {
        let c = |bytes: &[u8]| {
            CString::new(bytes)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "nul byte found in provided data"))
        };
        let args: Vec<CString> = std::iter::once(argv0.as_bytes())
            .chain(args.iter().map(|a| a.as_bytes()))
            .map(c)
            .collect::<io::Result<_>>()?;
        let env: Vec<CString> = env.iter().map(|(k, v)| c(&entry(k, v))).collect::<io::Result<_>>()?;
        let argv = args.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let envp = env.iter().map(|e| e.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        Ok(Program {
            path: c(path.as_os_str().as_bytes())?,
            _args: args,
            argv,
            _env: env,
            envp,
            cwd: c(cwd.as_os_str().as_bytes())?,
            umask: (umask & 0o777) as libc::mode_t,
        })
    }
}

/// `KEY=value`.
fn entry(key: &OsStr, value: &OsStr) -> Vec<u8> {
    let mut e = Vec::with_capacity(key.len() + 1 + value.len());
    e.extend_from_slice(key.as_bytes());
    e.push(b'=');
    e.extend_from_slice(value.as_bytes());
    e
}

/// What the child reads, and where it says why it could not run the
/// program.
struct Shared<'a> {
    program: &'a Program,
    /// kdd's pid: the child's parent, unless kdd died.
    parent: libc::pid_t,
    /// Descriptors to become the child's 0, 1 and 2 (each above 2).
    stdio: [RawFd; 3],
    confine: Option<&'a mut ConfineFn>,
    /// The error number of what failed in the child; 0 if it exec'd.
    errno: AtomicI32,
    /// Which step failed ([`Step`] as a number).
    step: AtomicI32,
}

/// A step of the child's set-up that can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum Step {
    Signals = 1,
    Session,
    DeathSignal,
    ParentGone,
    Stdio,
    Cwd,
    Confine,
    Exec,
}

impl Step {
    const ALL: [Step; 8] = [
        Step::Signals,
        Step::Session,
        Step::DeathSignal,
        Step::ParentGone,
        Step::Stdio,
        Step::Cwd,
        Step::Confine,
        Step::Exec,
    ];

    /// The error a failure of this step is: the exec's as the system said
    /// it (a program not found, not executable), the others saying what
    /// could not be done.
    fn error(self, errno: c_int, program: &Program) -> io::Error {
        let os = io::Error::from_raw_os_error(errno);
        let what = match self {
            Step::Exec => return os,
            Step::Signals => "cannot reset its signals".to_string(),
            Step::Session => "cannot make it a session of its own".to_string(),
            Step::DeathSignal => "cannot set its parent-death signal".to_string(),
            Step::ParentGone => "kdd is exiting".to_string(),
            Step::Stdio => "cannot give it its standard input and output".to_string(),
            Step::Cwd => format!("cannot enter {}", program.cwd.to_string_lossy()),
            Step::Confine => "cannot confine it".to_string(),
        };
        io::Error::other(format!("{what}: {os}"))
    }
}

/// Starts `program` with `stdio` as its standard input, output and error
/// (descriptors above 2, close-on-exec: the child's copies are not), and
/// `confine` run last before exec. Returns its pid and a pidfd for it once
/// it has exec'd; an error (and no process left) if anything before the
/// exec failed. `None` when this kernel cannot (no pollable pidfds, before
/// Linux 5.3): the caller starts it another way.
#[allow(unsafe_code)]
pub fn spawn(
    program: &Program,
    stdio: [RawFd; 3],
    confine: Option<&mut ConfineFn>,
) -> Option<io::Result<(u32, OwnedFd)>> {
    if !pidfds_work() {
        return None;
    }
    let parent = rustix::process::getpid().as_raw_nonzero().get();
    let mut shared = Shared { program, parent, stdio, confine, errno: AtomicI32::new(0), step: AtomicI32::new(0) };
    let mut stack = vec![0u128; STACK_BYTES / 16];
    // The stack grows down (x86-64 and AArch64): the child starts at its
    // end, which is 16-byte aligned.
    let top = stack.as_mut_ptr().wrapping_add(stack.len()).cast::<c_void>();
    let mut pidfd: c_int = -1;
    // SAFETY: `sigfillset`/`pthread_sigmask` on local sets; `clone` runs
    // `child` on `stack` with `shared`, both alive until it returns — with
    // CLONE_VFORK this thread is suspended until the child has exec'd or
    // exited, and the child touches nothing else of this thread's.
    let (pid, clone_errno) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        let pid = libc::clone(
            child,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            (&raw mut shared).cast::<c_void>(),
            &mut pidfd as *mut c_int,
        );
        let clone_errno = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        (pid, clone_errno)
    };
    drop(stack);
    if pid < 0 {
        return Some(Err(clone_errno));
    }
    if pidfd < 0 {
        // No pidfd came (a kernel that ignores the flag): the child, not
        // reaped yet, is killed by its pid and reaped; the caller forks.
        // SAFETY: a signal to, and a wait for, our own unreaped child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        reap(pid);
        return None;
    }
    // SAFETY: with CLONE_PIDFD the kernel wrote a new descriptor, ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let failed = shared.errno.load(Ordering::Acquire);
    if failed != 0 {
        // It exited without running the program: reap it now.
        reap(pid);
        let step = shared.step.load(Ordering::Acquire);
        let step = Step::ALL.into_iter().find(|s| *s as i32 == step).unwrap_or(Step::Exec);
        return Some(Err(step.error(failed, program)));
    }
    Some(Ok((pid as u32, pidfd)))
}

/// Whether this kernel has pidfds that can be polled (Linux 5.3): asked
/// once, by opening one for kdd itself.
fn pidfds_work() -> bool {
    static WORK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORK.get_or_init(|| {
        rustix::process::pidfd_open(rustix::process::getpid(), rustix::process::PidfdFlags::empty()).is_ok()
    })
}

/// Waits for the child `pid` to be gone.
#[allow(unsafe_code)]
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: a wait for our own child, into a local.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
}

/// The child of the clone: sets itself up, execs; on failure records why
/// and exits 127.
#[allow(unsafe_code)]
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Shared` the parent passed, alive while the
    // parent is suspended.
    let shared = unsafe { &mut *arg.cast::<Shared<'_>>() };
    // SAFETY: only system calls, on what `shared` holds.
    let (step, errno) = unsafe { set_up_and_exec(shared) };
    shared.step.store(step as i32, Ordering::Release);
    shared.errno.store(if errno == 0 { libc::EIO } else { errno }, Ordering::Release);
    // SAFETY: ends the child without running anything of kdd's.
    unsafe { libc::_exit(127) }
}

/// The child's set-up, then exec; returns only on failure: the step that
/// failed and the error number.
#[allow(unsafe_code)]
unsafe fn set_up_and_exec(s: &mut Shared<'_>) -> (Step, c_int) {
    let errno = || io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    // SAFETY (the whole function): system calls on local values and on
    // what `s` holds, which the parent keeps alive.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=LAST_SIGNAL {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                // glibc's own signals refuse (EINVAL): they are reset by
                // the exec anyway.
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) < 0 {
            return (Step::Signals, errno());
        }
        if libc::setsid() < 0 {
            return (Step::Session, errno());
        }
        libc::umask(s.program.umask);
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) < 0 {
            return (Step::DeathSignal, errno());
        }
        // kdd may have died before the death signal was set.
        if libc::getppid() != s.parent {
            return (Step::ParentGone, libc::ESRCH);
        }
        for (target, fd) in s.stdio.iter().enumerate() {
            if libc::dup2(*fd, target as c_int) < 0 {
                return (Step::Stdio, errno());
            }
        }
        if libc::chdir(s.program.cwd.as_ptr()) < 0 {
            return (Step::Cwd, errno());
        }
        if let Some(confine) = s.confine.as_mut()
            && let Err(e) = confine()
        {
            return (Step::Confine, e.raw_os_error().unwrap_or(libc::EPERM));
        }
        libc::execve(s.program.path.as_ptr(), s.program.argv.as_ptr(), s.program.envp.as_ptr());
        (Step::Exec, errno())
    }
}
