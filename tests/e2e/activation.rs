//! What the service manager passes kdd stays kdd's: of the sockets it
//! passes, the ones kd does not take never reach an agent, and neither do
//! `LISTEN_FDS`, `LISTEN_PID` and `LISTEN_FDNAMES` (issue 21, items 21 and 27).

use kd_client::Client;
use kd_client::prelude::*;
use kd_tests::{Workspace, collect_until, ended, within};

/// A private directory (0700) for sockets under `dir`.
fn private_dir(dir: &std::path::Path) -> std::path::PathBuf {
    let private = dir.join("run");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&private).unwrap();
    private
}

/// Whether systemd's `systemd-socket-activate` is here; when not, the
/// test says why it skips (and fails under CI, which installs it).
fn have_socket_activate() -> bool {
    let found = std::process::Command::new("sh").arg("-c").arg("command -v systemd-socket-activate").output();
    let ok = found.is_ok_and(|o| o.status.success());
    if !ok {
        kd_tests::skip("activation", "systemd-socket-activate is not installed (Debian: apt-get install systemd)");
    }
    ok
}

/// The manager (which becomes kdd), killed if the test ends early.
struct Manager(std::process::Child);

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sockets_kd_does_not_take_and_listen_variables_never_reach_an_agent() {
    if !have_socket_activate() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = private_dir(dir.path());
    let socket = run.join("kdd.sock");
    let db = kd_tests::TestDb::fresh(dir.path().join("kd.sqlite3"));
    // The agent's shell says which of its descriptors are sockets (kd gives
    // it none: stdin is /dev/null, stdout and stderr pipes) and what it has
    // of the manager's variables.
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[
            (
                "FAKE_RUN",
                "n=0; for f in /proc/$$/fd/*; do case $(readlink $f) in socket:*) n=$((n+1));; esac; done; \
                 echo sockets=$n listen=${LISTEN_FDS-none},${LISTEN_PID-none},${LISTEN_FDNAMES-none}",
            ),
            ("FAKE_TEXT", "{run}"),
        ],
    )]);
    // Three sockets, fds 3, 4 and 5, named a, kdd and b, as a unit with
    // three ListenStream= and FileDescriptorName= would pass them.
    let mut manager = Manager(
        std::process::Command::new("systemd-socket-activate")
            .arg("-l")
            .arg(run.join("a.sock"))
            .arg("-l")
            .arg(&socket)
            .arg("-l")
            .arg(run.join("b.sock"))
            .arg("--fdname=a:kdd:b")
            .args(db.env().iter().map(|(k, v)| format!("--setenv={k}={}", v.to_string_lossy())))
            .arg(format!("--setenv=XDG_CONFIG_HOME={}", dir.path().join("config").display()))
            .arg(kd_tests::bin("kdd"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Its sockets are made in order, each bound then listening: once the
    // last one's file is there, kdd's listens (found under load in CI: a
    // connection between kdd.sock's bind and its listen is refused).
    let last = run.join("b.sock");
    within("systemd-socket-activate to listen", async {
        while !last.exists() {
            assert!(manager.0.try_wait().unwrap().is_none(), "systemd-socket-activate exited");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;

    // The first connection starts kdd, which takes the socket named kdd.
    let c = within("kdd to start", Client::connect(&socket)).await.unwrap();
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    kd_tests::send_one_round(&c, &t, "What did you inherit?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let answer = kd_tests::last_message(&c, &t).await;
    assert_eq!(answer.body.trim(), "sockets=0 listen=none,none,none", "{answer:?}");

    drop(sub);
    drop(c);
    rustix::process::kill_process(rustix::process::Pid::from_child(&manager.0), rustix::process::Signal::TERM).unwrap();
    assert!(manager.0.wait().unwrap().success());
}
