//! One daemon per socket, in a directory only its user can touch.
//!
//! Before touching the socket, the daemon takes an exclusive `flock` on
//! `<socket>.lock` and keeps it for its lifetime. The kernel drops the lock
//! when the process dies, however it dies, so: lock taken by someone else →
//! a live daemon, refuse; lock free and a socket file present → stale,
//! remove it.

use std::fs::{File, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tokio::net::UnixListener;

/// The claimed socket path: holds the lock file for the daemon's lifetime
/// and removes the socket file when dropped.
pub struct SocketClaim {
    socket: PathBuf,
    _lock: File,
}

impl SocketClaim {
    /// Makes the socket directory (0700, ours), takes the daemon lock, and
    /// removes a stale socket file. Fails if another daemon holds the lock.
    pub fn claim(socket: &Path) -> anyhow::Result<SocketClaim> {
        secure_dir(kd_proto::paths::socket_dir(socket))?;
        let lock_path = kd_proto::paths::lock_path(socket);
        let mut lock = kd_proto::paths::open_lock_file(&lock_path)
            .with_context(|| format!("cannot open {} (a symlink is not followed)", lock_path.display()))?;
        if lock.try_lock().is_err() {
            let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
            let holder = holder.trim();
            let pid = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            bail!("kdd is already running on {}{pid}; stop it with `kd daemon stop`", socket.display());
        }
        lock.set_len(0).context("cannot write the lock file")?;
        write!(lock, "{}", std::process::id()).context("cannot write the lock file")?;
        match std::fs::remove_file(socket) {
            Ok(()) => tracing::info!("removed stale socket {}", socket.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove stale socket {}", socket.display())),
        }
        Ok(SocketClaim { socket: socket.to_path_buf(), _lock: lock })
    }

    /// Binds the socket, mode 0600.
    pub fn bind(&self) -> anyhow::Result<UnixListener> {
        let listener =
            UnixListener::bind(&self.socket).with_context(|| format!("cannot listen on {}", self.socket.display()))?;
        std::fs::set_permissions(&self.socket, Permissions::from_mode(0o600))
            .with_context(|| format!("cannot set the mode of {}", self.socket.display()))?;
        Ok(listener)
    }
}

impl Drop for SocketClaim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Creates `dir` (0700, ours) or checks that the existing one is a real
/// directory, ours, that no one else can enter — never a symlink, never a
/// directory shared with other users (a sticky `/tmp` included).
fn secure_dir(dir: &Path) -> anyhow::Result<()> {
    let uid = rustix::process::getuid().as_raw();
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    kd_proto::paths::check_private_dir(dir, uid).map_err(|e| anyhow::anyhow!("refusing to put the socket there: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_dir_is_created_private() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("kd");
        secure_dir(&dir)?;
        assert_eq!(std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&dir)?) & 0o777, 0o700);
        Ok(())
    }

    #[test]
    fn world_writable_socket_dir_is_refused() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("kd");
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, Permissions::from_mode(0o777))?;
        let err = secure_dir(&dir).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("other users"), "{err}");
        Ok(())
    }

    #[test]
    fn second_claim_on_a_socket_is_refused_and_stale_file_removed() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("run");
        secure_dir(&dir)?;
        let socket = dir.join("kdd.sock");
        std::fs::write(&socket, b"stale")?;
        let first = SocketClaim::claim(&socket)?;
        assert!(!socket.exists(), "stale socket file not removed");
        let err = SocketClaim::claim(&socket).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("already running"), "{err}");
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(first);
        SocketClaim::claim(&socket)?;
        Ok(())
    }
}
