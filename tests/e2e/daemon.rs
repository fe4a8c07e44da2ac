//! The daemon process: transport, one daemon per socket, permissions,
//! bounds, shutdown.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;

use kd_client::prelude::*;
use kd_client::{Client, ClientError};
use kd_proto::PROTOCOL_VERSION;
use kd_tests::{Kdd, bin, http_post, rpc_post, within};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn plain_http_post_answers_a_call() {
    let kdd = Kdd::start();
    let (status, body) = http_post(&kdd.socket, r#"{"jsonrpc":"2.0","id":7,"method":"daemon.status"}"#).unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"]["pid"], kdd.pid);
    assert_eq!(v["result"]["socket"], kdd.socket.display().to_string());
    assert_eq!(v["result"]["db"], kdd.db.to_string());
    let migrations = kd_tests::registry::migrations(kdd.db.engine());
    assert_eq!(v["result"]["schema_version"], migrations, "every migration is applied");
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_unix_socket_works_without_a_content_type() {
    let kdd = Kdd::start();
    // Exactly the README's example: curl -d sends a form content type.
    let out = Command::new("curl")
        .args(["-sS", "--unix-socket"])
        .arg(&kdd.socket)
        .args(["http://kd/", "-d", r#"{"jsonrpc":"2.0","id":1,"method":"daemon.status"}"#])
        .output()
        .expect("curl is installed (.ci/run installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["pid"], kdd.pid);
}

#[tokio::test(flavor = "multi_thread")]
async fn websocket_client_says_hello_with_protocol_and_capabilities() {
    let kdd = Kdd::start();
    let client = kdd.client().await;
    assert_eq!(client.hello().protocol, PROTOCOL_VERSION);
    assert_eq!(client.hello().pid, kdd.pid);
    assert!(client.hello().capabilities.iter().any(|c| c == "subscriptions"));
    let status = client.daemon_status().await.unwrap();
    assert_eq!(status.clients, 1, "this WebSocket connection is counted while it is open");
    let second = kdd.client().await;
    assert_eq!(second.daemon_status().await.unwrap().clients, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn rpc_discover_returns_an_openrpc_document_of_every_method() {
    let kdd = Kdd::start();
    let v = rpc_post(&kdd.socket, r#"{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}"#);
    let doc = &v["result"];
    assert_eq!(doc["openrpc"], "1.2.6");
    let names: Vec<&str> = doc["methods"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    for expected in [
        "daemon.hello",
        "daemon.status",
        "daemon.shutdown",
        "rpc.discover",
        "thread.create",
        "thread.list",
        "thread.get",
        "thread.current",
        "thread.set_current",
        "thread.messages",
        "message.append",
        "thread.subscribe",
        "session.start",
        "session.resume",
        "session.end",
        "session.list",
        "lock.acquire",
        "lock.release",
        "lock.list",
        "events.list",
    ] {
        assert!(names.contains(&expected), "{expected} missing from rpc.discover");
    }
    assert!(doc["components"]["schemas"]["Thread"].is_object());
}

#[tokio::test(flavor = "multi_thread")]
async fn socket_directory_is_private_and_socket_is_owner_only() {
    let kdd = Kdd::start();
    let dir = kdd.socket.parent().unwrap();
    assert_eq!(std::fs::metadata(dir).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&kdd.socket).unwrap().permissions().mode() & 0o777, 0o600);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_kdd_on_the_same_socket_refuses_and_leaves_the_first_alone() {
    let kdd = Kdd::start();
    let out = Command::new(bin("kdd"))
        .arg("--socket")
        .arg(&kdd.socket)
        .arg("--db")
        .arg(kdd.dir.path().join("other.sqlite3"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already running"), "{err}");
    assert!(err.contains(&format!("pid {}", kdd.pid)), "{err}");
    // The first daemon still serves on its socket.
    let client = kdd.client().await;
    assert_eq!(client.daemon_status().await.unwrap().pid, kdd.pid);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_socket_file_is_replaced() {
    let mut kdd = Kdd::start();
    kdd.kill9();
    // kill -9 leaves the socket file behind.
    assert!(kdd.socket.exists());
    kdd.launch().unwrap();
    let client = kdd.client().await;
    assert_eq!(client.daemon_status().await.unwrap().pid, kdd.pid);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_with_a_newer_schema_is_refused() {
    let mut kdd = Kdd::start();
    kdd.stop();
    kdd.db.claim_schema_version(99);
    let err = kdd.launch().unwrap_err();
    assert!(err.contains("schema version 99"), "{err}");
    assert!(err.contains("newer than this kdd knows"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_gracefully_and_removes_the_socket() {
    let mut kdd = Kdd::start();
    let client = kdd.client().await;
    kd_tests::new_thread(&client, &kd_tests::workspace("a")).await;
    let status = kdd.stop();
    assert!(status.success(), "{status}");
    assert!(!kdd.socket.exists(), "socket left behind");
    assert_eq!(kdd.db.integrity(), "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_shutdown_over_rpc_exits_zero() {
    let mut kdd = Kdd::start();
    let client = kdd.client().await;
    let ack = client.daemon_shutdown(None).await.unwrap();
    assert!(ack.stopping);
    let status = kdd.wait_exit();
    assert!(status.success(), "{status}");
    assert!(!kdd.socket.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_daemon_stop_returns_only_once_kdd_has_exited() {
    // A kdd slow to exit after it let its socket go: its stderr is a pipe
    // nobody reads, filled up, so at exit it waits a moment for its log
    // lines to be written.
    let mut kdd = kd_tests::Kdd::start_full(&[], &[("RUST_LOG", "trace")], kd_tests::Stderr::Stuck);
    let status = r#"{"jsonrpc":"2.0","id":1,"method":"daemon.status"}"#;
    let full = {
        // Full once five calls in a row, each logged, add nothing to it.
        let pipe = kdd.stuck_stderr().unwrap();
        let (mut before, mut same) = (0, 0);
        while same < 5 {
            kd_tests::rpc_post(&kdd.socket, status);
            let now = rustix::io::ioctl_fionread(pipe).unwrap();
            same = if now == before { same + 1 } else { 0 };
            before = now;
        }
        // Now the log's writer waits on the pipe, and more lines wait for it.
        for _ in 0..20 {
            kd_tests::rpc_post(&kdd.socket, status);
        }
        kd_tests::rpc_post(&kdd.socket, status)
    };
    assert_eq!(full["result"]["log_lines_dropped"], 0, "the log queue is not full: {full}");
    let mut stop = kdd.kd();
    stop.args(["daemon", "stop"]);
    let out = kd_tests::run(stop).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!kd_tests::alive(kdd.pid), "kd daemon stop returned while kdd (pid {}) still ran", kdd.pid);
    assert!(kdd.wait_exit().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_over_the_bound_get_a_json_rpc_error_and_others_keep_working() {
    // No slots kept for plain HTTP here (see hardening.rs for those).
    let kdd = Kdd::start_with(&["--max-connections", "2", "--reserved-connections", "0"]);
    let a = kdd.client().await;
    let b = kdd.client().await;
    let (status, body) = http_post(&kdd.socket, r#"{"jsonrpc":"2.0","id":1,"method":"daemon.status"}"#).unwrap();
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], 1005);
    assert!(v["error"]["message"].as_str().unwrap().contains("too many connections"));
    match within("third client", Client::connect(&kdd.socket)).await {
        Err(ClientError::Refused { reason, .. }) => assert!(reason.contains("too many connections"), "{reason}"),
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("a third connection was accepted"),
    }
    // The two admitted clients are unaffected; closing one frees a slot.
    assert_eq!(a.daemon_status().await.unwrap().clients, 2);
    drop(b);
    let c = within("a slot frees up", async {
        loop {
            match Client::connect(&kdd.socket).await {
                Ok(c) => break c,
                Err(_) => tokio::task::yield_now().await,
            }
        }
    })
    .await;
    assert_eq!(c.daemon_status().await.unwrap().pid, kdd.pid);
}

#[tokio::test(flavor = "multi_thread")]
async fn another_uid_is_refused_by_the_peer_check() {
    if rustix::process::getuid().as_raw() != 0 {
        // A second uid cannot be made without root; `check_peer` is unit-tested in kdd.
        kd_tests::skip("another_uid_is_refused_by_the_peer_check", "needs root to connect as another uid");
        return;
    }
    let kdd = Kdd::start();
    // Let the other user reach the socket so that only the peer check stands.
    for p in [kdd.dir.path().to_path_buf(), kdd.socket.parent().unwrap().to_path_buf()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&kdd.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let nobody = 65534;
    assert_ne!(std::fs::metadata(&kdd.socket).unwrap().uid(), nobody);
    let out = Command::new("curl")
        .args(["-sS", "--unix-socket"])
        .arg(&kdd.socket)
        .args(["http://kd/", "-d", r#"{"jsonrpc":"2.0","id":1,"method":"daemon.status"}"#])
        .uid(nobody)
        .gid(nobody)
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body} {out:?}"));
    assert_eq!(v["error"]["code"], 1007, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("peer uid 65534"), "{v}");
    // The owner is still served.
    let v = rpc_post(&kdd.socket, &json!({"jsonrpc":"2.0","id":1,"method":"daemon.hello"}).to_string());
    assert_eq!(v["result"]["protocol"], PROTOCOL_VERSION);
}

/// The text of a log file once it holds `needle` (within the deadline).
async fn log_with(path: &std::path::Path, needle: &str) -> String {
    within(needle, async {
        loop {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if text.contains(needle) {
                return text;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_lets_go_is_cut_at_the_shutdown_deadline() {
    // A member that streams without end, and a subscriber that stopped
    // reading: nothing but the deadline ends its connection (the client
    // timeout and idle rule are set far beyond the test's deadline).
    let ws = kd_tests::Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_DELTAS", "100000000"), ("FAKE_PIECE", "0123456789abcdef0123456789abcdef"), ("FAKE_RATE", "50000")],
    )]);
    let log = tempfile::tempdir().unwrap();
    let log = log.path().join("kdd.log");
    let mut kdd = Kdd::start_with(&[
        "--shutdown-grace-ms",
        "500",
        "--client-timeout-ms",
        "3600000",
        "--idle-timeout-ms",
        "3600000",
        "--log-file",
        log.to_str().unwrap(),
    ]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut watcher = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let subscribe = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{{"thread":"{t}"}}}}"#);
    let _stalled = kd_tests::stalled_websocket(&kdd.socket, &[&subscribe]);
    c.council_send(t, "Go on and on.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let mut chars = 0;
    while chars < 4_000_000 {
        if let Some(Ok(kd_proto::types::ThreadEvent::Delta { chars: n, .. })) = within("deltas", watcher.next()).await {
            chars = n;
        }
    }
    drop(watcher);
    let status = kdd.stop();
    assert!(status.success(), "kdd exited with {status}: it waited on the stalled client past its deadline");
    let text = log_with(&log, "stopped").await;
    assert!(text.contains("did not close within 500ms; cut"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_is_ignored() {
    let log = tempfile::tempdir().unwrap();
    let log = log.path().join("kdd.log");
    let mut kdd = Kdd::start_with(&["--log-file", log.to_str().unwrap()]);
    let pid = rustix::process::Pid::from_raw(kdd.pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    log_with(&log, "SIGHUP ignored").await;
    let c = kdd.client().await;
    assert_eq!(c.daemon_status().await.unwrap().pid, kdd.pid, "still serving");
    drop(c);
    assert!(kdd.stop().success());
}
