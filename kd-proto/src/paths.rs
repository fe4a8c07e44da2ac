//! Where the daemon's socket and database live (F-D1).
//!
//! Socket: `--socket` > `KD_SOCKET` > `$XDG_RUNTIME_DIR/kd/kdd.sock` >
//! `/tmp/kd-$UID/kdd.sock`. Database: `--db` > `KD_DB` >
//! `$XDG_DATA_HOME/kd/kd.sqlite3` (the platform data directory when
//! `XDG_DATA_HOME` is unset, e.g. `~/.local/share/kd/kd.sqlite3`).

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

/// The database path, from an explicit flag, the environment, or the default.
pub fn db_path(explicit: Option<&Path>) -> Result<PathBuf, PathError> {
    db_path_with(explicit, |k| std::env::var_os(k), || directories::BaseDirs::new().map(|d| d.data_dir().to_path_buf()))
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
    let data = env("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(platform_data_dir)
        .ok_or(PathError::NoDataDir)?;
    Ok(data.join("kd").join("kd.sqlite3"))
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
    fn lock_and_log_paths_sit_beside() {
        assert_eq!(lock_path(Path::new("/r/kd/kdd.sock")), PathBuf::from("/r/kd/kdd.sock.lock"));
        assert_eq!(log_path(Path::new("/d/kd/kd.sqlite3")), PathBuf::from("/d/kd/kdd.log"));
    }
}
