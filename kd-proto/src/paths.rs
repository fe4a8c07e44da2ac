//! Where the daemon's socket and database live (F-D1).
//!
//! Socket: `--socket` > `KD_SOCKET` > `$XDG_RUNTIME_DIR/kd/kdd.sock` >
//! `/tmp/kd-$UID/kdd.sock`. Database: `--db` > `KD_DB` >
//! `$XDG_DATA_HOME/kd/kd.sqlite3` (the platform data directory when
//! `XDG_DATA_HOME` is unset, e.g. `~/.local/share/kd/kd.sqlite3`); a
//! `postgres://` (or `postgresql://`) URL there names a PostgreSQL database
//! instead, shared by several daemons.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Environment variable that overrides the socket path.
pub const ENV_SOCKET: &str = "KD_SOCKET";
/// Environment variable that overrides the database path.
pub const ENV_DB: &str = "KD_DB";
/// Set to `1` to stop clients from starting `kdd` on their own.
pub const ENV_NO_AUTOSTART: &str = "KD_NO_AUTOSTART";

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("cannot find a data directory: set KD_DB or XDG_DATA_HOME, or pass --db")]
    NoDataDir,
}

/// The socket path, from an explicit flag, the environment, or the default.
pub fn socket_path(explicit: Option<&Path>) -> PathBuf {
    socket_path_with(explicit, |k| std::env::var_os(k), rustix::process::getuid().as_raw())
}

/// [`socket_path`] with the environment and uid given, for tests.
pub fn socket_path_with(explicit: Option<&Path>, env: impl Fn(&str) -> Option<OsString>, uid: u32) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(p) = env(ENV_SOCKET).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    match env("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| p.is_absolute()) {
        Some(dir) => dir.join("kd").join("kdd.sock"),
        None => PathBuf::from(format!("/tmp/kd-{uid}")).join("kdd.sock"),
    }
}

/// Where the registry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbLocation {
    /// A SQLite file on this machine.
    File(PathBuf),
    /// A PostgreSQL database (`postgres://…`), perhaps with a password.
    Url(String),
}

impl DbLocation {
    /// The file, for a SQLite database.
    pub fn file(&self) -> Option<&Path> {
        match self {
            DbLocation::File(p) => Some(p),
            DbLocation::Url(_) => None,
        }
    }
}

/// Whether `--db`/`KD_DB` names a PostgreSQL database rather than a file:
/// a `postgres://`/`postgresql://` URL, or a libpq `key=value` conninfo
/// (its first key one libpq knows, with a value: `host=/run/postgresql
/// dbname=kd`).
pub fn is_db_url(s: &str) -> bool {
    const KEYS: &[&str] = &[
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "service",
        "sslmode",
        "sslrootcert",
        "connect_timeout",
        "application_name",
        "options",
        "target_session_attrs",
    ];
    let url =
        ["postgres://", "postgresql://"].iter().any(|p| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p)));
    let conninfo = s
        .trim_start()
        .split_once('=')
        .is_some_and(|(key, value)| KEYS.contains(&key) && !value.is_empty() && !value.starts_with(' '));
    url || conninfo
}

/// The registry's place, from an explicit flag, the environment, or the
/// default file.
pub fn db_location(explicit: Option<&Path>) -> Result<DbLocation, PathError> {
    let path = db_path(explicit)?;
    Ok(match path.to_str().filter(|s| is_db_url(s)) {
        Some(url) => DbLocation::Url(url.to_string()),
        None => DbLocation::File(path),
    })
}

/// kd's data directory on this machine (`$XDG_DATA_HOME/kd`): the default
/// database's, and what a daemon on a PostgreSQL database keeps here
/// (members' worktrees, its log).
pub fn data_dir() -> Result<PathBuf, PathError> {
    data_dir_with(|k| std::env::var_os(k), || directories::BaseDirs::new().map(|d| d.data_dir().to_path_buf()))
}

fn data_dir_with(
    env: impl Fn(&str) -> Option<OsString>,
    platform_data_dir: impl FnOnce() -> Option<PathBuf>,
) -> Result<PathBuf, PathError> {
    let data = env("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(platform_data_dir)
        .ok_or(PathError::NoDataDir)?;
    Ok(data.join("kd"))
}

/// Where the daemon logs when it runs on its own: beside a database file,
/// or in kd's data directory.
pub fn log_file_of(db: &DbLocation) -> Result<PathBuf, PathError> {
    match db {
        DbLocation::File(f) => Ok(log_path(f)),
        DbLocation::Url(_) => Ok(data_dir()?.join("kdd.log")),
    }
}

/// The database path, from an explicit flag, the environment, or the default.
pub fn db_path(explicit: Option<&Path>) -> Result<PathBuf, PathError> {
    db_path_with(explicit, |k| std::env::var_os(k), || directories::BaseDirs::new().map(|d| d.data_dir().to_path_buf()))
}

/// Whether the user chose the database's place (`--db` or `KD_DB`) rather
/// than kd (the data directory).
pub fn db_place_chosen(explicit: Option<&Path>) -> bool {
    explicit.is_some() || std::env::var_os(ENV_DB).is_some_and(|p| !p.is_empty())
}

/// [`db_path`] with the environment and platform data dir given, for tests.
pub fn db_path_with(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<OsString>,
    platform_data_dir: impl FnOnce() -> Option<PathBuf>,
) -> Result<PathBuf, PathError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = env(ENV_DB).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    Ok(data_dir_with(env, platform_data_dir)?.join("kd.sqlite3"))
}

/// Why a socket directory cannot be trusted: someone else could listen
/// there, or replace what is there.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("{0} is a symlink, not a directory; another user may have planted it")]
    Symlink(PathBuf),
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("{dir} belongs to uid {owner}, not to you (uid {uid}); another user may be impersonating kdd")]
    Foreign { dir: PathBuf, owner: u32, uid: u32 },
    #[error(
        "{dir} can be entered or changed by other users (mode {mode:03o}); chmod 700 it or choose another --socket"
    )]
    NotPrivate { dir: PathBuf, mode: u32 },
    #[error("{0} does not exist")]
    Missing(PathBuf),
    #[error("cannot inspect {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// The directory of the socket, where the lock and start-lock files live too.
pub fn socket_dir(socket: &Path) -> &Path {
    socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Whether `dir` is a place only `uid` controls: a real directory (not a
/// symlink, which is not followed), owned by `uid`, with no access for
/// group or others (0700). Both the daemon (before it listens) and its
/// clients (before they connect) check this.
pub fn check_private_dir(dir: &Path, uid: u32) -> Result<(), DirError> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(DirError::Missing(dir.to_path_buf())),
        Err(e) => return Err(DirError::Io(dir.to_path_buf(), e)),
    };
    if meta.file_type().is_symlink() {
        return Err(DirError::Symlink(dir.to_path_buf()));
    }
    if !meta.is_dir() {
        return Err(DirError::NotADirectory(dir.to_path_buf()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(DirError::NotPrivate { dir: dir.to_path_buf(), mode: meta.mode() & 0o7777 });
    }
    if meta.uid() != uid {
        return Err(DirError::Foreign { dir: dir.to_path_buf(), owner: meta.uid(), uid });
    }
    Ok(())
}

/// Opens (creating it `0600`) a lock file beside the socket, never through
/// a symlink someone planted there.
pub fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Creates `path` for writing, mode 0600: a new file only — one already
/// there, or a symlink someone planted, is refused rather than followed.
pub fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Where a daemon serving a shared registry says so, beside its socket
/// (`<socket>.node`: one line, its node and the registry's location): kd
/// does not start a daemon of its own on a socket a node stopped serving.
pub fn node_marker(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".node");
    PathBuf::from(name)
}

/// The lock file that makes one daemon per socket: `<socket>.lock`.
pub fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The daemon log written when a client auto-starts `kdd`: next to the database.
pub fn log_path(db: &Path) -> PathBuf {
    db.with_file_name("kdd.log")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_url_is_told_from_a_file() {
        for url in ["postgres://kd@db/kd", "postgresql://db/kd?sslmode=verify-full", "POSTGRES://x"] {
            assert!(is_db_url(url), "{url}");
        }
        for file in ["/data/kd.sqlite3", "postgres.db", "./postgres:/x", "", "postgres:/x"] {
            assert!(!is_db_url(file), "{file}");
        }
    }

    #[test]
    fn a_conninfo_string_is_a_database_too() {
        for conninfo in ["host=/run/postgresql dbname=kd", "dbname=kd", "  user=kd host=db.example", "service=kd"] {
            assert!(is_db_url(conninfo), "{conninfo}");
        }
        for file in ["host=", "./host=x dbname=y", "kd=1.sqlite3", "/tmp/dbname=kd", "host = x", "hosts=x"] {
            assert!(!is_db_url(file), "{file}");
        }
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn socket_flag_beats_env_beats_runtime_dir() {
        let e = env(&[("KD_SOCKET", "/e/s.sock"), ("XDG_RUNTIME_DIR", "/run/user/7")]);
        assert_eq!(socket_path_with(Some(Path::new("/f.sock")), &e, 7), PathBuf::from("/f.sock"));
        assert_eq!(socket_path_with(None, &e, 7), PathBuf::from("/e/s.sock"));
        let e = env(&[("XDG_RUNTIME_DIR", "/run/user/7")]);
        assert_eq!(socket_path_with(None, e, 7), PathBuf::from("/run/user/7/kd/kdd.sock"));
    }

    #[test]
    fn socket_falls_back_to_tmp_per_uid() {
        assert_eq!(socket_path_with(None, env(&[]), 1234), PathBuf::from("/tmp/kd-1234/kdd.sock"));
        // A relative XDG_RUNTIME_DIR is invalid per the XDG spec and ignored.
        let e = env(&[("XDG_RUNTIME_DIR", "rel")]);
        assert_eq!(socket_path_with(None, e, 5), PathBuf::from("/tmp/kd-5/kdd.sock"));
    }

    #[test]
    fn db_resolution_order() {
        let e = env(&[("KD_DB", "/e/kd.db"), ("XDG_DATA_HOME", "/data")]);
        assert_eq!(db_path_with(None, &e, || None).ok(), Some(PathBuf::from("/e/kd.db")));
        let e = env(&[("XDG_DATA_HOME", "/data")]);
        assert_eq!(db_path_with(None, e, || None).ok(), Some(PathBuf::from("/data/kd/kd.sqlite3")));
        let got = db_path_with(None, env(&[]), || Some(PathBuf::from("/home/u/.local/share")));
        assert_eq!(got.ok(), Some(PathBuf::from("/home/u/.local/share/kd/kd.sqlite3")));
        assert!(matches!(db_path_with(None, env(&[]), || None), Err(PathError::NoDataDir)));
    }

    #[test]
    fn only_a_real_private_directory_of_ones_own_is_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let uid = rustix::process::getuid().as_raw();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("kd");
        assert!(matches!(check_private_dir(&dir, uid), Err(DirError::Missing(_))));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(check_private_dir(&dir, uid).is_ok());
        let e = check_private_dir(&dir, uid + 1).unwrap_err().to_string();
        assert!(e.contains(&format!("belongs to uid {uid}")) && e.contains("impersonating"), "{e}");
        for mode in [0o750, 0o705, 0o1777] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(matches!(check_private_dir(&dir, uid), Err(DirError::NotPrivate { .. })), "{mode:o}");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(matches!(check_private_dir(&link, uid), Err(DirError::Symlink(_))), "a symlink is never followed");
        let file = tmp.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(matches!(check_private_dir(&file, uid), Err(DirError::NotADirectory(_))));
        assert_eq!(socket_dir(Path::new("kdd.sock")), Path::new("."));
    }

    #[test]
    fn lock_and_log_paths_sit_beside() {
        assert_eq!(lock_path(Path::new("/r/kd/kdd.sock")), PathBuf::from("/r/kd/kdd.sock.lock"));
        assert_eq!(log_path(Path::new("/d/kd/kd.sqlite3")), PathBuf::from("/d/kd/kdd.log"));
    }
}
