//! Clients must not talk to an impostor, and kdd must not listen where
//! another user can reach in (issue 9 item 3). The tests that need a second
//! user run `setpriv` as uid 65534 when they run as root, and say they are
//! skipped otherwise (the directory check itself is unit-tested in
//! kd-proto's `paths`).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use kd_tests::other_user::{self, NOBODY, unique};
use kd_tests::{Kdd, bin, kdd_outcome, run};

/// The impostor's process, killed when the test ends however it ends.
struct Impostor(Child);

impl Impostor {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A listener run by uid 65534 on `socket` (making its directory when
/// asked); it says `ready`, then `got N` for every connection.
fn impostor(socket: &Path, make_dir: bool) -> (Impostor, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let listener = other_user::runnable("unix-listener");
    let mut cmd = other_user::command(&listener);
    cmd.arg(socket);
    if make_dir {
        cmd.arg("--make-dir");
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("a listener as another user");
    let out = child.stdout.take().unwrap();
    let child = Impostor(child);
    let mut lines = BufReader::new(out).lines();
    assert_eq!(lines.next().map(|l| l.unwrap()), Some("ready".to_string()));
    (child, lines)
}

/// Runs `kdd --socket ARGS…` expecting it to refuse (see [`kdd_outcome`]).
fn refused(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let mut cmd = Command::new(bin("kdd"));
    cmd.arg("--socket").args(args);
    kdd_outcome(cmd)
}

async fn kd_threads(socket: &Path) -> kd_tests::Output {
    let mut k = tokio::process::Command::new(bin("kd"));
    k.arg("--socket").arg(socket).arg("threads").env("KD_NO_AUTOSTART", "1").kill_on_drop(true);
    run(k).await
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_refuses_a_socket_directory_another_user_made() {
    if !other_user::available("kd_refuses_a_socket_directory_another_user_made") {
        return;
    }
    let dir = unique("kd-impostor");
    let socket = dir.join("kdd.sock");
    let (mut listener, mut heard) = impostor(&socket, true);
    let out = kd_threads(&socket).await;
    assert_eq!(out.status.code(), Some(3), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("belongs to uid {NOBODY}")) && out.stderr.contains("impersonating"),
        "{}",
        out.stderr
    );
    // Nothing was said to the impostor: not even a connection.
    listener.stop();
    assert!(heard.next().is_none(), "the impostor heard from kd");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_refuses_a_listener_of_another_user_in_its_own_directory() {
    if !other_user::available("kd_refuses_a_listener_of_another_user_in_its_own_directory") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    // Opened for a moment, as a swapped directory would be: another user
    // binds there, then the directory is ours and private again.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.join("kdd.sock");
    let (mut listener, mut heard) = impostor(&socket, false);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = kd_threads(&socket).await;
    assert_eq!(out.status.code(), Some(3), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("run by uid {NOBODY}")), "{}", out.stderr);
    // It was connected to, and told nothing: kd has closed its end, so the
    // listener reports the connection on its own; wait for that line.
    assert_eq!(heard.next().map(|l| l.unwrap()), Some("got 0".to_string()));
    listener.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_symlink_for_the_socket_directory_is_refused_by_both_ends() {
    let kdd = Kdd::start();
    let link = unique("kd-link");
    std::os::unix::fs::symlink(kdd.socket.parent().unwrap(), &link).unwrap();
    let socket = link.join("kdd.sock");
    let out = kd_threads(&socket).await;
    assert_eq!(out.status.code(), Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("is a symlink"), "{}", out.stderr);
    // kdd does not start there either.
    let tmp = tempfile::tempdir().unwrap();
    let (ok, err) = refused(&[socket.as_os_str(), "--db".as_ref(), tmp.path().join("db").as_os_str()]);
    assert!(!ok && err.contains("is a symlink"), "{err}");
    std::fs::remove_file(&link).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kdd_never_listens_where_others_can_reach_in() {
    let tmp = tempfile::tempdir().unwrap();
    let kdd =
        |socket: &Path| refused(&[socket.as_os_str(), "--db".as_ref(), tmp.path().join("db/kd.sqlite3").as_os_str()]);
    // Straight in /tmp: a sticky, world-writable directory.
    let (ok, err) = kdd(&PathBuf::from(format!("/tmp/kdd-{}.sock", std::process::id())));
    assert!(!ok && err.contains("other users"), "{err}");
    // A lock file planted as a symlink is not followed (nor its target truncated).
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let precious = tmp.path().join("precious");
    std::fs::write(&precious, b"do not truncate").unwrap();
    std::os::unix::fs::symlink(&precious, dir.join("kdd.sock.lock")).unwrap();
    let (ok, err) = kdd(&dir.join("kdd.sock"));
    assert!(!ok, "{err}");
    assert!(err.contains("kdd.sock.lock"), "{err}");
    assert_eq!(std::fs::read(&precious).unwrap(), b"do not truncate");
    // A directory another user owns.
    if other_user::available("kdd_never_listens_where_others_can_reach_in (foreign directory)") {
        let foreign = unique("kd-foreign");
        let made = other_user::command("mkdir").args(["-m", "700"]).arg(&foreign).status().unwrap();
        assert!(made.success());
        let (ok, err) = kdd(&foreign.join("kdd.sock"));
        assert!(!ok && err.contains(&format!("belongs to uid {NOBODY}")), "{err}");
        let _ = std::fs::remove_dir(&foreign);
    }
}
