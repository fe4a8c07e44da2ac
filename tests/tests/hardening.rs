//! What a careless process or another local user does must not hang,
//! crash, leak or impersonate kdd (issue 9, SPEC §10).

use kd_client::KdApiClient;
use kd_tests::{Kdd, Stderr, Workspace, collect_until, ended, rpc_post};

/// The daemon keeps serving, runs agents, and stops on SIGTERM.
async fn still_serves(kdd: &mut Kdd) -> kd_proto::types::DaemonStatus {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    for i in 0..50 {
        kd_tests::append(&c, &t, "king", format!("note {i}"), &[]).await;
    }
    c.council_send(t, "Still there?".into(), None, None, None, None, None, Some(0), None).await.unwrap();
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let status = c.daemon_status().await.unwrap();
    drop(sub);
    drop(c);
    let exit = kdd.stop();
    assert!(exit.success(), "kdd exited with {exit} on SIGTERM");
    status
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_stderr_neither_kills_nor_wedges_the_daemon() {
    let mut kdd = Kdd::start_full(&[], &[("RUST_LOG", "debug")], Stderr::Closed);
    // Connections that come and go, and bad requests: each is logged.
    for _ in 0..20 {
        let _ = std::os::unix::net::UnixStream::connect(&kdd.socket);
        let reply = rpc_post(&kdd.socket, r#"{"jsonrpc":"2.0","id":1,"method":"no.such"}"#);
        assert_eq!(reply["error"]["code"], -32601);
    }
    let status = still_serves(&mut kdd).await;
    assert!(status.log_lines_dropped > 0, "the lost log lines are counted: {status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stderr_nobody_reads_never_blocks_the_daemon() {
    let mut kdd = Kdd::start_full(&[], &[("RUST_LOG", "trace")], Stderr::Stuck);
    // Far more log than a pipe holds.
    for _ in 0..1000 {
        let reply = rpc_post(&kdd.socket, r#"{"jsonrpc":"2.0","id":1,"method":"daemon.status"}"#);
        assert!(reply["result"]["pid"].is_u64(), "{reply}");
    }
    let status = still_serves(&mut kdd).await;
    assert!(status.log_lines_dropped > 0, "{status:?}");
}
