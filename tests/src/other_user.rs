//! Playing a second local user: run as root, `setpriv` starts a program
//! as uid 65534 (nobody). Tests that need one say they are skipped where
//! that is not possible.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// The other user.
pub const NOBODY: u32 = 65534;

/// Whether another user can be played here (root with `setpriv`); says
/// that `test` is skipped when not.
pub fn available(test: &str) -> bool {
    let root = rustix::process::getuid().is_root();
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success());
    if !(root && setpriv) {
        crate::skip(test, &format!("needs root and setpriv to act as a second user (uid {NOBODY})"));
    }
    root && setpriv
}

/// `program` to be run as [`NOBODY`].
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups"]).arg(program);
    cmd
}

/// This workspace's binary `name` where another user can run it (the
/// build may be under root's home, which they cannot enter): a link or a
/// copy in /tmp, removed when dropped.
pub fn runnable(name: &str) -> Runnable {
    let path = unique(&format!("kd-{name}"));
    if std::fs::hard_link(crate::bin(name), &path).is_err() {
        std::fs::copy(crate::bin(name), &path).expect("copy the binary");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    Runnable(path)
}

/// See [`runnable`].
pub struct Runnable(PathBuf);

impl AsRef<OsStr> for Runnable {
    fn as_ref(&self) -> &OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Runnable {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A path under /tmp no one has used: not made, so whoever makes it owns it.
pub fn unique(prefix: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    PathBuf::from(format!("/tmp/{prefix}-{}-{nanos}-{n}", std::process::id()))
}
