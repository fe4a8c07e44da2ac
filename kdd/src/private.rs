//! kdd's own files are the user's alone.
//!
//! The daemon runs with umask 077, so whatever it creates — the data
//! directory, the database and its `-wal`/`-shm`, the log, the socket's
//! lock — is 0700/0600 whatever the umask of whoever started it. Agents get
//! back the umask kdd was started with: what they write in a workspace is
//! made as the user would make it. Files an older kd (or a chmod) left open
//! to other users are tightened at start, with a log line — only regular
//! files of the user's (and the data directory kd chose), never a device, a
//! FIFO or what a symlink points to.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::fs::{Mode, OFlags};

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

/// Gives a child process the umask kdd was started with: what it writes in
/// the user's trees (an agent's files, git's checkout and merge) is as the
/// user's own tools would write it, not kdd's 077.
#[allow(unsafe_code)]
pub fn with_user_umask(cmd: &mut tokio::process::Command) {
    let umask = inherited_umask();
    // SAFETY: the closure runs in the forked child before exec and makes one
    // syscall (umask): no allocation, no locks.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::umask(umask);
            Ok(())
        });
    }
}

/// Removes group and other access from `path` if it is one of our regular
/// files and has any, saying so in the log. Anything else is left alone: a
/// symlink (never followed), a device node, a FIFO or a socket (not a file
/// of kd's: `--db /dev/null` must not take /dev/null from everyone), and a
/// file of another user (not ours to change).
pub fn tighten(path: &Path) {
    tighten_as(path, Kind::File);
}

/// [`tighten`] for a directory kd made (its data directory).
fn tighten_dir(path: &Path) {
    tighten_as(path, Kind::Dir);
}

/// What may be tightened at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
}

impl Kind {
    fn is(self, t: std::fs::FileType) -> bool {
        match self {
            Kind::File => t.is_file(),
            Kind::Dir => t.is_dir(),
        }
    }
}

fn tighten_as(path: &Path, kind: Kind) {
    let uid = rustix::process::getuid().as_raw();
    let ours = |m: &std::fs::Metadata| kind.is(m.file_type()) && m.uid() == uid;
    // Looked at before it is opened: a device or a FIFO is never opened.
    let Ok(seen) = std::fs::symlink_metadata(path) else { return };
    if !ours(&seen) || seen.mode() & 0o077 == 0 {
        return;
    }
    // Opened without following a symlink, and checked to be what was looked
    // at, so that a file swapped in meanwhile is not the one changed.
    let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    if kind == Kind::Dir {
        flags |= OFlags::DIRECTORY;
    }
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
        .and_then(|f| f.metadata().map(|m| (f, m)));
    let (was, now) = (seen.mode() & 0o7777, seen.mode() & 0o7700);
    let changed = match opened {
        Ok((f, m)) if ours(&m) && (m.dev(), m.ino()) == (seen.dev(), seen.ino()) => {
            f.set_permissions(std::fs::Permissions::from_mode(now))
        }
        Ok(_) => return,
        Err(e) => Err(e),
    };
    match changed {
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
        tighten_dir(dir);
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

    #[test]
    fn a_fifo_or_a_directory_is_not_a_file_to_tighten() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let fifo = tmp.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, Mode::from_raw_mode(0o600), 0)?;
        let dir = tmp.path().join("dir");
        std::fs::create_dir(&dir)?;
        for p in [&fifo, &dir] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))?;
            tighten(p);
            assert_eq!(mode(p), 0o755, "{}", p.display());
        }
        tighten_dir(&fifo);
        assert_eq!(mode(&fifo), 0o755);
        tighten_dir(&dir);
        assert_eq!(mode(&dir), 0o700);
        Ok(())
    }
}
