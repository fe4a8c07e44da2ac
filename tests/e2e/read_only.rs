//! A database kdd cannot write is refused at start, with the reason, rather
//! than failing every write later (issue 9 item 13). Root writes whatever
//! the modes say, so kdd runs as a second user (uid 65534) here; the test
//! says it is skipped where that is not possible.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use kd_tests::kdd_outcome;
use kd_tests::other_user::{self, unique};

/// Whether `kdd` as the other user on `base`'s socket and database
/// started, and what it said.
fn kdd_as_other_user(base: &Path) -> (bool, String) {
    let kdd = other_user::runnable("kdd");
    let mut cmd = other_user::command(&kdd);
    cmd.arg("--socket").arg(base.join("run/kdd.sock")).arg("--db").arg(db(base));
    kdd_outcome(cmd)
}

fn db(base: &Path) -> PathBuf {
    base.join("data/kd.sqlite3")
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory of the other user's with a database made by kdd in it.
fn made_by_kdd(prefix: &str) -> PathBuf {
    let base = unique(prefix);
    assert!(other_user::command("mkdir").arg(&base).status().unwrap().success());
    let (started, err) = kdd_as_other_user(&base);
    assert!(started, "kdd could not make its database: {err}");
    base
}

#[test]
fn a_read_only_database_file_is_refused_at_start() {
    kd_tests::sqlite_only!("a SQLite file kdd may not write");
    if !other_user::available("a_read_only_database_file_is_refused_at_start") {
        return;
    }
    let base = made_by_kdd("kd-ro-file");
    chmod(&db(&base), 0o400);
    let (started, err) = kdd_as_other_user(&base);
    assert!(!started, "kdd started on a database it cannot write");
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("kdd: ")).collect();
    assert_eq!(said.len(), 1, "one line: {err}");
    assert!(said[0].contains("read-only") && said[0].contains(&db(&base).display().to_string()), "{err}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_database_whose_directory_cannot_be_written_is_refused_at_start() {
    kd_tests::sqlite_only!("a SQLite file whose directory kdd may not write (no room for its WAL)");
    if !other_user::available("a_database_whose_directory_cannot_be_written_is_refused_at_start") {
        return;
    }
    let base = made_by_kdd("kd-ro-dir");
    // No journal beside it, and none can be made.
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db(&base).display()));
    }
    chmod(&base.join("data"), 0o500);
    let (started, err) = kdd_as_other_user(&base);
    assert!(!started, "kdd started on a database it cannot write");
    assert!(err.contains("read-only") || err.contains("cannot write"), "{err}");
    assert!(err.contains(&db(&base).display().to_string()), "{err}");
    chmod(&base.join("data"), 0o700);
    let _ = std::fs::remove_dir_all(&base);
}
