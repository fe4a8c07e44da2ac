//! What kdd keeps on disk is the user's alone (issue 9 item 4): the data
//! directory 0700, the database, its `-wal`/`-shm` and the log 0600,
//! whatever the umask of whoever started it — while agents still create
//! files with the user's own umask.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use kd_client::prelude::*;
use kd_tests::{Kdd, Workspace, collect_until, ended};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).mode() & 0o7777
}

/// The database, its journal files and the log beside it.
fn files(db: &Path) -> Vec<PathBuf> {
    let with = |suffix: &str| PathBuf::from(format!("{}{suffix}", db.display()));
    vec![db.to_path_buf(), with("-wal"), with("-shm"), kd_proto::paths::log_path(db)]
}

/// Starts kdd as `kd` would (default data directory, log beside the
/// database) from a shell whose umask is `umask`, and has one agent answer
/// with its umask.
async fn used_daemon(umask: &str) -> (Kdd, Workspace, String) {
    let kdd = Kdd::start_in_data_home(umask);
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_TEXT", "my umask is {umask}")])]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Private?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let answer = c.thread_messages(t, None, None, None, None).await.unwrap().pop().unwrap().body;
    (kdd, ws, answer)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_data_directory_and_files_are_private_and_agents_keep_the_users_umask() {
    kd_tests::sqlite_only!("the modes of the SQLite file, its WAL and the data directory");
    // The usual umask, and one that would leave files open to everyone.
    for umask in ["0022", "0000"] {
        let (kdd, _ws, answer) = used_daemon(umask).await;
        let dir = kdd.db.path().parent().unwrap();
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
        for f in files(kdd.db.path()) {
            assert_eq!(mode(&f), 0o600, "umask {umask}: {}", f.display());
        }
        assert_eq!(answer, format!("my umask is {umask}"), "agents create files as the user would");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn data_made_readable_before_is_tightened_at_start_and_said_so() {
    kd_tests::sqlite_only!("the modes of the SQLite file, its WAL and the data directory");
    let (mut kdd, _ws, _) = used_daemon("0022").await;
    kdd.stop();
    let dir = kdd.db.path().parent().unwrap().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in files(kdd.db.path()) {
        if f.exists() {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    kdd.launch().unwrap();
    assert_eq!(mode(&dir), 0o700);
    for f in files(kdd.db.path()).into_iter().filter(|f| f.exists()) {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
    // The log is written by a thread of its own: its lines may come just
    // after kdd said it is ready; the stop writes what is queued.
    kdd.stop();
    let log = std::fs::read_to_string(kd_proto::paths::log_path(kdd.db.path())).unwrap();
    assert!(log.contains(&format!("{} was open to other users (mode 755); now 700", dir.display())), "{log}");
    assert!(log.contains(&format!("{} was open to other users (mode 644); now 600", kdd.db)), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directory_the_user_chose_is_left_as_it_is_but_the_files_are_private() {
    kd_tests::sqlite_only!("the modes of the SQLite file and its directory");
    let mut kdd = Kdd::start();
    kdd.stop();
    let dir = kdd.db.path().parent().unwrap().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(kdd.db.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    kdd.launch().unwrap();
    assert_eq!(mode(&dir), 0o755, "an explicit --db is the user's choice of place");
    assert_eq!(mode(kdd.db.path()), 0o600);
}

/// A scratch special file in `dir`, open to everyone as such files are:
/// a FIFO, and — only root may make one — a character device like
/// /dev/null (1, 3). Never the real /dev/null.
fn scratch_nodes(dir: &Path) -> Vec<(PathBuf, u32)> {
    use rustix::fs::{FileType, Mode, mknodat};
    let mut nodes = Vec::new();
    let fifo = dir.join("fifo");
    mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o644), 0).unwrap();
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o644)).unwrap();
    nodes.push((fifo, 0o644));
    if rustix::process::getuid().is_root() {
        let null = dir.join("null");
        let dev = rustix::fs::makedev(1, 3);
        mknodat(rustix::fs::CWD, &null, FileType::CharacterDevice, Mode::from_raw_mode(0o666), dev).unwrap();
        std::fs::set_permissions(&null, std::fs::Permissions::from_mode(0o666)).unwrap();
        nodes.push((null, 0o666));
    } else {
        kd_tests::skip("the device node part", "making one needs root; the FIFO part ran");
    }
    nodes
}

/// A `kdd` on a private socket in `dir` with these arguments.
fn kdd_in(dir: &Path, args: &[&std::ffi::OsStr]) -> std::process::Command {
    let run = dir.join("run");
    let _ = std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&run);
    let mut kdd = std::process::Command::new(kd_tests::bin("kdd"));
    kdd.arg("--socket").arg(run.join("kdd.sock")).args(args);
    kdd
}

#[test]
fn a_device_or_fifo_given_as_the_database_or_log_is_never_tightened() {
    kd_tests::sqlite_only!("a device or FIFO given as the SQLite file");
    let dir = tempfile::tempdir().unwrap();
    for (node, was) in scratch_nodes(dir.path()) {
        // As the database: refused, saying why, and left as it was.
        let (started, stderr) = kd_tests::kdd_outcome(kdd_in(dir.path(), &["--db".as_ref(), node.as_os_str()]));
        assert!(!started, "{}", node.display());
        assert!(stderr.contains("is not a regular file"), "{}: {stderr}", node.display());
        assert_eq!(mode(&node), was, "{} was not chmodded: {stderr}", node.display());
    }
    // As the log (a device only: a FIFO nobody reads cannot be opened for
    // writing without waiting): kdd writes to it and leaves its mode alone.
    let again = dir.path().join("again");
    std::fs::create_dir(&again).unwrap();
    if let Some((null, was)) = scratch_nodes(&again).into_iter().find(|(p, _)| p.ends_with("null")) {
        let db = dir.path().join("kd.sqlite3");
        let (started, stderr) = kd_tests::kdd_outcome(kdd_in(
            dir.path(),
            &["--db".as_ref(), db.as_os_str(), "--log-file".as_ref(), null.as_os_str()],
        ));
        assert!(started, "{stderr}");
        assert_eq!(mode(&null), was, "{}", null.display());
    }
}
