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
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::net::UnixListener;

/// How long a socket-activated kdd waits for the lock's holder to let go.
const LOCK_PATIENCE: Duration = Duration::from_secs(3);

/// The claimed socket path: holds the lock file for the daemon's lifetime
/// and removes the socket file when dropped.
pub struct SocketClaim {
    socket: PathBuf,
    _lock: File,
    /// Whether the socket file is ours to remove: not when the service
    /// manager made it and listens on it between daemons.
    owns_socket: bool,
}

impl SocketClaim {
    /// Makes the socket directory (0700, ours), takes the daemon lock, and
    /// removes a stale socket file. Fails if another daemon holds the lock.
    pub fn claim(socket: &Path) -> anyhow::Result<SocketClaim> {
        secure_dir(kd_proto::paths::socket_dir(socket))?;
        let lock = Self::lock(socket, false)?;
        // Someone listens there without holding the lock: a service
        // manager's socket (kdd.socket, launchd) waiting to start kdd. Its
        // path is not ours to take over.
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            bail!(
                "something already listens on {} (a kdd.socket unit or launchd job?); kd uses it — see `kd daemon status`",
                socket.display()
            );
        }
        match std::fs::remove_file(socket) {
            Ok(()) => tracing::info!("removed stale socket {}", socket.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove stale socket {}", socket.display())),
        }
        Ok(SocketClaim { socket: socket.to_path_buf(), _lock: lock, owns_socket: true })
    }

    /// Claims a socket the service manager made and passed to us: the same
    /// lock, but the socket file is left alone, now and at exit.
    pub fn inherited(socket: &Path) -> anyhow::Result<SocketClaim> {
        secure_dir(kd_proto::paths::socket_dir(socket))
            .context("the service manager's socket directory must be private (DirectoryMode=0700)")?;
        let lock = Self::lock(socket, true)?;
        Ok(SocketClaim { socket: socket.to_path_buf(), _lock: lock, owns_socket: false })
    }

    /// Takes the daemon lock beside `socket` and writes our pid in it.
    /// `patient`: wait a moment for a holder that is about to let go (a kdd
    /// started by hand probing the manager's socket, one stopping).
    fn lock(socket: &Path, patient: bool) -> anyhow::Result<File> {
        let lock_path = kd_proto::paths::lock_path(socket);
        let mut lock = kd_proto::paths::open_lock_file(&lock_path)
            .with_context(|| format!("cannot open {} (a symlink is not followed)", lock_path.display()))?;
        let deadline = std::time::Instant::now() + if patient { LOCK_PATIENCE } else { Duration::ZERO };
        while lock.try_lock().is_err() {
            if std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
            let holder = holder.trim();
            let pid = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            bail!("kdd is already running on {}{pid}; stop it with `kd daemon stop`", socket.display());
        }
        lock.set_len(0).context("cannot write the lock file")?;
        write!(lock, "{}", std::process::id()).context("cannot write the lock file")?;
        Ok(lock)
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
        if self.owns_socket {
            let _ = std::fs::remove_file(&self.socket);
        }
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

    #[test]
    fn a_socket_someone_listens_on_is_not_taken_over() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("run");
        secure_dir(&dir)?;
        let socket = dir.join("kdd.sock");
        let _manager = std::os::unix::net::UnixListener::bind(&socket)?;
        let err = SocketClaim::claim(&socket).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("already listens"), "{err}");
        assert!(socket.exists(), "the listening socket was removed");
        // Passed to us, the same socket is claimed and left in place.
        drop(SocketClaim::inherited(&socket)?);
        assert!(socket.exists(), "an inherited socket was removed at exit");
        Ok(())
    }
}
