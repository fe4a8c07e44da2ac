//! How a process kdd spawns is set up before it runs: a session of its
//! own, the user's umask, death with kdd (see [`super::process`]).
//!
//! Done in a child of `fork`, that costs kdd a copy of its page tables,
//! copy-on-write faults after each spawn and the copy's teardown at the
//! child's exec — the largest part of kdd's own CPU in an ask (issue 31,
//! item 17). So where it can, kdd starts the program through `kdd-exec`
//! (`kdd/src/bin/kdd-exec.rs`, installed beside kdd): the standard library
//! `posix_spawn`s it (nothing runs between its fork and exec, so the child
//! shares kdd's memory until the exec), and it sets the three up and execs
//! the program in its place — the same pid, and the session it leads.
//! Until `kdd-exec` has made that session (a moment after the spawn
//! returns), the child leads no process group:
//! [`super::process::signal_group`] then signals it alone. std uses
//! `posix_spawn` with a working directory only where glibc has
//! `posix_spawn_file_actions_addchdir_np` (2.29 and newer); on an older
//! glibc it forks anyway, and `kdd-exec` only adds an exec.
//!
//! The program is found on the `PATH` it is given, as the standard library
//! would find it, so that one that is not there is still an error of the
//! spawn (`NotFound`), not an agent that exits 127. Where `kdd-exec` is not
//! beside kdd (a `cargo test` of kdd's library) or the program is not
//! found, the set-up runs in a fork, as before.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::process::Signal;
use tokio::process::Command;

use super::process::Invocation;

/// The trampoline's name, beside kdd's executable.
pub const TRAMPOLINE: &str = "kdd-exec";

/// What `kdd-exec` is asked to speak: its first argument. A `kdd-exec`
/// of another kd refuses, saying so.
pub const TRAMPOLINE_VERSION: &str = "1";

/// `kdd-exec` beside kdd's executable, if it is there and executable
/// (Linux: elsewhere kdd has no parent-death signal to set).
fn trampoline() -> Option<&'static Path> {
    static AT: OnceLock<Option<PathBuf>> = OnceLock::new();
    AT.get_or_init(|| {
        if !cfg!(target_os = "linux") {
            return None;
        }
        let exe = std::env::current_exe().ok()?;
        beside(&exe)
    })
    .as_deref()
}

/// Whether `kdd-exec` is still there to run (it may be removed while kdd
/// runs).
pub fn trampoline_runs() -> bool {
    trampoline().is_some_and(executable)
}

/// `kdd-exec` in the directory of `exe`, if it is an executable file.
fn beside(exe: &Path) -> Option<PathBuf> {
    let path = exe.with_file_name(TRAMPOLINE);
    executable(&path).then_some(path)
}

/// The command that runs `inv` in `cwd` through `kdd-exec` — `kdd-exec
/// VERSION PARENT UMASK PATH ARGV0 ARG…` — or `None` where it cannot
/// (no `kdd-exec`, or the program is not found: the fork says so as an
/// error of the spawn).
pub fn trampolined(inv: &Invocation, cwd: &Path) -> Option<Command> {
    let trampoline = trampoline()?;
    let program = found(inv, cwd)?;
    let mut cmd = Command::new(trampoline);
    cmd.arg(TRAMPOLINE_VERSION)
        .arg(rustix::process::getpid().as_raw_nonzero().to_string())
        .arg(format!("{:o}", crate::private::inherited_umask().bits()))
        .arg(program)
        .arg(&inv.program)
        .args(&inv.args);
    Some(cmd)
}

/// The command that runs `inv`, set up in its fork before exec: for a
/// spawn that must run more there ([`super::process::spawn_confined`]).
pub fn forked(inv: &Invocation) -> Command {
    let mut cmd = Command::new(&inv.program);
    cmd.args(&inv.args);
    set_up_in_fork(&mut cmd);
    cmd
}

/// Where `inv`'s program is, as exec would find it with the `PATH` of its
/// environment (the last `PATH` it sets, else kdd's own); a name with a `/`
/// is where it says (relative to `cwd`, where the program starts). `None`
/// if it is not an executable file there.
fn found(inv: &Invocation, cwd: &Path) -> Option<PathBuf> {
    if inv.program.contains('/') {
        return executable(&cwd.join(&inv.program)).then(|| PathBuf::from(&inv.program));
    }
    if inv.program.is_empty() {
        return None;
    }
    let path: OsString = match inv.env.iter().rfind(|(k, _)| k == "PATH") {
        Some((_, v)) => v.into(),
        None => std::env::var_os("PATH")?,
    };
    // As execvp: an empty entry is the working directory; an entry where
    // the program cannot be run is passed over.
    std::env::split_paths(&path)
        .map(|dir| if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir })
        .map(|dir| cwd.join(dir).join(&inv.program))
        .find(|candidate| executable(candidate))
}

/// Whether `path` is a file kdd's user may execute.
fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file())
        && rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok()
}

/// In the child before exec: it leads a session of its own (and so its
/// own process group: the session's id and the group's are its pid), it
/// gets the umask kdd was started with (kdd's is 077), and the kernel is
/// to SIGKILL it when its parent goes away. The session is what places an
/// orphan of it ([`crate::identity`]): a process keeps its session when it
/// is reparented or changes group, and cannot join another's. `kdd-exec`
/// does the same.
#[allow(unsafe_code)]
fn set_up_in_fork(cmd: &mut Command) {
    crate::private::with_user_umask(cmd);
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and only
    // makes three syscalls (setsid, prctl, getppid): no allocation, no locks.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died between fork and prctl.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other("parent exited"));
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(program: &str, path: Option<&str>) -> Invocation {
        Invocation {
            program: program.into(),
            args: vec![],
            stdin: None,
            env: path.map(|p| vec![("PATH".to_string(), p.to_string())]).unwrap_or_default(),
        }
    }

    fn make_executable(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_program_is_found_on_the_path_it_is_given_not_kdds() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        make_executable(&b.join("agent"));
        std::fs::write(a.join("agent"), "not executable").unwrap();
        let path = format!("{}:{}", a.display(), b.display());
        // An empty entry is the working directory, as for execvp.
        make_executable(&tmp.path().join("here"));
        assert_eq!(found(&inv("here", Some(":/nonexistent")), tmp.path()), Some(tmp.path().join("./here")));
        assert_eq!(found(&inv("agent", Some(&path)), tmp.path()), Some(b.join("agent")));
        assert_eq!(found(&inv("agent", Some(&a.display().to_string())), tmp.path()), None, "not executable");
        assert_eq!(found(&inv("kd-no-such-agent", None), tmp.path()), None);
        make_executable(&tmp.path().join("x"));
        assert_eq!(found(&inv("./x", Some("")), tmp.path()), Some(PathBuf::from("./x")), "a path as it is");
        assert_eq!(found(&inv("/opt/none/agent", None), tmp.path()), None, "a path to nothing");
        // A relative directory of PATH is where the program starts.
        assert_eq!(found(&inv("agent", Some("b")), tmp.path()), Some(tmp.path().join("b/agent")));
    }

    #[test]
    fn the_trampoline_is_used_only_beside_kdd_and_executable() {
        let tmp = tempfile::tempdir().unwrap();
        let kdd = tmp.path().join("kdd");
        assert_eq!(beside(&kdd), None);
        std::fs::write(tmp.path().join(TRAMPOLINE), "").unwrap();
        assert_eq!(beside(&kdd), None, "not executable");
        make_executable(&tmp.path().join(TRAMPOLINE));
        assert_eq!(beside(&kdd), Some(tmp.path().join(TRAMPOLINE)));
    }
}
