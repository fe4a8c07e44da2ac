//! What confines a check to its worktree: on Linux, a Landlock ruleset
//! that lets it write beneath the worktree and its temporary directory
//! only (and to `/dev/null`, `/dev/zero`, `/dev/full`), reading and running
//! anything as its user may. The ruleset is made in kdd ([`Sandbox::new`])
//! and put on the child between fork and exec ([`Sandbox::restrict`]:
//! `no_new_privs`, then `landlock_restrict_self`, two system calls), so
//! everything the check starts is held by it too. Where Landlock is not
//! there (another OS, a kernel without it), the check is not run: kd says
//! so rather than run a member's code unconfined.

use std::os::fd::OwnedFd;
use std::path::Path;

/// A ruleset ready to confine a child.
pub struct Sandbox {
    fd: OwnedFd,
}

#[cfg(target_os = "linux")]
impl Sandbox {
    /// A ruleset letting a process write beneath `dirs` only.
    pub fn new(dirs: &[&Path]) -> Result<Sandbox, String> {
        use landlock::{ABI, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr};
        let abi = ABI::V6;
        let write = AccessFs::from_write(abi);
        let failed = |e: &dyn std::fmt::Display| format!("kd cannot confine the check to its worktree: {e}");
        let mut rules =
            Ruleset::default().handle_access(write).map_err(|e| failed(&e))?.create().map_err(|e| failed(&e))?;
        for dir in dirs {
            let fd = PathFd::new(dir).map_err(|e| failed(&format!("{}: {e}", dir.display())))?;
            rules = rules.add_rule(PathBeneath::new(fd, write)).map_err(|e| failed(&e))?;
        }
        let file = AccessFs::from_file(abi) & write;
        for dev in ["/dev/null", "/dev/zero", "/dev/full"] {
            if let Ok(fd) = PathFd::new(dev) {
                rules = rules.add_rule(PathBeneath::new(fd, file)).map_err(|e| failed(&e))?;
            }
        }
        let fd: Option<OwnedFd> = rules.into();
        let fd = fd.ok_or_else(|| {
            "kd cannot confine the check to its worktree: this kernel has no Landlock (Linux 5.13 or later, with \
             landlock among its security modules), so the check was not run"
                .to_string()
        })?;
        Ok(Sandbox { fd })
    }

    /// What the child runs before exec: no new privileges, then the
    /// ruleset on itself — two system calls, no allocation.
    #[allow(unsafe_code)]
    pub fn restrict(&self) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        use std::os::fd::AsRawFd;
        let fd = self.fd.as_raw_fd();
        move || {
            // SAFETY: plain system calls on an open descriptor (the child
            // holds it until exec; it is close-on-exec).
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        }
    }
}

#[cfg(not(target_os = "linux"))]
impl Sandbox {
    pub fn new(_dirs: &[&Path]) -> Result<Sandbox, String> {
        Err("kd cannot confine the check to its worktree on this system (it needs Linux's Landlock), so the check \
             was not run"
            .into())
    }

    pub fn restrict(&self) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        let _ = &self.fd;
        || Err(std::io::Error::other("no sandbox"))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A child confined to `inside` writes there and nowhere else; reading
    /// is untouched.
    #[tokio::test]
    async fn a_confined_child_writes_in_its_dirs_only() {
        let root = tempfile::tempdir().unwrap();
        let inside = root.path().join("inside");
        std::fs::create_dir(&inside).unwrap();
        std::fs::write(root.path().join("readable"), "r").unwrap();
        let sandbox = match Sandbox::new(&[&inside]) {
            Ok(s) => s,
            // No Landlock on this kernel: nothing to test here (the e2e says the check is an error).
            Err(e) if e.contains("no Landlock") => return eprintln!("skipped: {e}"),
            Err(e) => panic!("{e}"),
        };
        let script = "cat ../readable > in.txt && echo x > /dev/null && (echo y > ../out.txt; echo $? > code.txt)";
        let inv = crate::agent::process::Invocation {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            stdin: None,
            env: vec![],
        };
        let child = crate::agent::process::spawn_confined(&inv, &inside, sandbox.restrict()).unwrap();
        let out = child.wait_with_output().await.unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(std::fs::read_to_string(inside.join("in.txt")).unwrap(), "r", "it reads outside and writes inside");
        assert!(!root.path().join("out.txt").exists(), "nothing written outside");
        assert_ne!(std::fs::read_to_string(inside.join("code.txt")).unwrap().trim(), "0", "the write was refused");
        let mine = std::fs::File::create(root.path().join("kdd-still-writes"));
        assert!(mine.is_ok(), "kdd itself is not confined");
    }
}
