//! kdd's own files are the user's alone.
//!
//! The daemon runs with umask 077, so whatever it creates — the data
//! directory, the database and its `-wal`/`-shm`, the log, the socket's
//! lock — is 0700/0600 whatever the umask of whoever started it. Agents get
//! back the umask kdd was started with: what they write in a workspace is
//! made as the user would make it. Files an older kd (or a chmod) left open
//! to other users are tightened at start, with a log line.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::fs::Mode;

/// The umask kdd was started with (the usual 022 until [`restrict_umask`]).
static INHERITED: AtomicU32 = AtomicU32::new(0o022);

/// Sets the daemon's umask to 077, remembering the one it had for agents.
/// Call first thing, before any file is created.
pub fn restrict_umask() {
    let old = rustix::process::umask(Mode::from_raw_mode(0o077));
    INHERITED.store(old.bits(), Ordering::Relaxed);
}

/// The umask kdd was started with, which agents run with.
pub fn inherited_umask() -> Mode {
    Mode::from_raw_mode(INHERITED.load(Ordering::Relaxed))
}

/// Removes group and other access from `path` if it is ours and has any,
/// saying so in the log. A symlink or a file of another user is left
/// alone (the first is never followed, the second is not ours to change).
pub fn tighten(path: &Path) {
    let uid = rustix::process::getuid().as_raw();
    let Ok(meta) = std::fs::symlink_metadata(path) else { return };
    if meta.file_type().is_symlink() || meta.uid() != uid || meta.mode() & 0o077 == 0 {
        return;
    }
    let (was, now) = (meta.mode() & 0o7777, meta.mode() & 0o7700);
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(now)) {
        Ok(()) => tracing::warn!("{} was open to other users (mode {was:03o}); now {now:03o}", path.display()),
        Err(e) => {
            tracing::warn!("{} is open to other users (mode {was:03o}) and cannot be tightened: {e}", path.display())
        }
    }
}

/// Tightens the database and the files SQLite keeps beside it, and its
/// directory when kd chose that place (a directory the user named is theirs
/// to arrange).
pub fn tighten_database(db: &Path, dir_is_kds: bool) {
    if dir_is_kds && let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        tighten(dir);
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        tighten(Path::new(&name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).map(|m| m.mode() & 0o7777).unwrap_or(0)
    }

    #[test]
    fn only_own_real_files_open_to_others_are_tightened() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let db = tmp.path().join("kd.sqlite3");
        let wal = tmp.path().join("kd.sqlite3-wal");
        for (f, m) in [(&db, 0o644), (&wal, 0o660)] {
            std::fs::write(f, b"")?;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(m))?;
        }
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"")?;
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644))?;
        std::os::unix::fs::symlink(&outside, tmp.path().join("kd.sqlite3-shm"))?;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
        tighten_database(&db, false);
        assert_eq!((mode(&db), mode(&wal)), (0o600, 0o600));
        assert_eq!(mode(&outside), 0o644, "a symlink is not followed");
        assert_eq!(mode(tmp.path()), 0o755, "a directory the user chose is theirs");
        tighten_database(&db, true);
        assert_eq!(mode(tmp.path()), 0o700);
        Ok(())
    }
}
