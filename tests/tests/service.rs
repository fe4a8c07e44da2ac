//! kdd under a service manager (issue 12, item 1, in part): `READY=1` and
//! `STOPPING=1` over `NOTIFY_SOCKET`, watchdog pings, and agents that never
//! inherit the manager's variables. The manager is played by a datagram
//! socket, as systemd's is.

use std::os::unix::net::UnixDatagram;

use kd_client::KdApiClient;
use kd_tests::{Kdd, Workspace, collect_until};

/// The next notification, waiting at most the test deadline.
fn next(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(kd_tests::DEADLINE)).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification before the deadline");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn kdd_tells_the_manager_it_is_ready_pings_the_watchdog_and_says_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).unwrap();
    let ws = Workspace::new(&[]);
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[
            ("FAKE_RUN", "echo notify=${NOTIFY_SOCKET:-none} watchdog=${WATCHDOG_USEC:-none}"),
            ("FAKE_TEXT", "{run}"),
        ])},
    }));
    let notify = path.display().to_string();
    let mut kdd = Kdd::start_env(&[], &[("NOTIFY_SOCKET", &notify)]);
    let ready = next(&manager);
    assert!(ready.contains("READY=1\n"), "{ready:?}");
    assert!(ready.contains(&format!("STATUS=listening on {}", kdd.socket.display())), "{ready:?}");

    // An agent's environment has none of the manager's variables.
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Env?".into(), None, None, None, None, None, Some(0), None).await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let answer = c.thread_messages(t, Some(1), None, None, None).await.unwrap().pop().unwrap();
    assert_eq!(answer.body.trim(), "notify=none watchdog=none");

    kdd.stop();
    let stopping = next(&manager);
    assert!(stopping.contains("STOPPING=1\n"), "{stopping:?}");
}

#[test]
fn kdd_pings_the_watchdog_the_manager_set_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).unwrap();
    let private = dir.path().join("run");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&private).unwrap();
    // WATCHDOG_PID must be kdd's own pid, as systemd sets it: a shell that
    // exports its pid and then becomes kdd.
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$0\" --socket \"$1\" --db \"$2\"")
        .arg(kd_tests::bin("kdd"))
        .arg(private.join("kd.sock"))
        .arg(private.join("kd.sqlite3"))
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "100000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(next(&manager).contains("READY=1"));
    // At half the interval: two pings come well within the deadline.
    for _ in 0..2 {
        assert_eq!(next(&manager), "WATCHDOG=1\n");
    }
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    let mut saw_stopping = false;
    for _ in 0..20 {
        let n = next(&manager);
        if n.contains("STOPPING=1") {
            saw_stopping = true;
            break;
        }
    }
    assert!(saw_stopping, "STOPPING=1 at SIGTERM");
    assert!(child.wait().unwrap().success());
}

#[test]
fn on_the_journal_kdd_logs_priority_prefixed_lines() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let manager = UnixDatagram::bind(dir.path().join("notify.sock")).unwrap();
    let private = dir.path().join("run");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&private).unwrap();
    let log = std::fs::File::create(dir.path().join("journal")).unwrap();
    let meta = log.metadata().unwrap();
    let mut child = std::process::Command::new(kd_tests::bin("kdd"))
        .arg("--socket")
        .arg(private.join("kd.sock"))
        .arg("--db")
        .arg(private.join("kd.sqlite3"))
        .env("NOTIFY_SOCKET", dir.path().join("notify.sock"))
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    assert!(next(&manager).contains("READY=1"));
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(dir.path().join("journal")).unwrap();
    assert!(text.lines().any(|l| l.starts_with("<6>kdd: kdd ") && l.contains("listening")), "{text}");
    assert!(text.lines().all(|l| l.starts_with('<')), "every line has its priority, no timestamp: {text}");
}
