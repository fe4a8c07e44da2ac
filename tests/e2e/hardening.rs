//! What a careless process or another local user does must not hang,
//! crash, leak or impersonate kdd (issue 9, SPEC §10).

use kd_client::prelude::*;
use kd_tests::{Kdd, Stderr, Workspace, collect_until, ended, rpc_post, within};

/// The daemon keeps serving, runs agents, and stops on SIGTERM.
async fn still_serves(kdd: &mut Kdd) -> kd_proto::types::DaemonStatus {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    for i in 0..50 {
        kd_tests::append(&c, &t, "king", format!("note {i}"), &[]).await;
    }
    c.council_send(t, "Still there?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
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
    // Far more log than the pipe and kdd's queue hold (each call logs ~3
    // lines at trace, and the two hold some 5,000): calls until lines are
    // dropped, every one of them answered meanwhile.
    let mut calls = 0;
    let dropped = loop {
        let reply = rpc_post(&kdd.socket, r#"{"jsonrpc":"2.0","id":1,"method":"daemon.status"}"#);
        assert!(reply["result"]["pid"].is_u64(), "{reply}");
        calls += 1;
        let dropped = reply["result"]["log_lines_dropped"].as_u64().unwrap_or(0);
        if dropped > 0 || calls == 20_000 {
            break dropped;
        }
    };
    assert!(dropped > 0, "no log line dropped after {calls} calls");
    let status = still_serves(&mut kdd).await;
    assert!(status.log_lines_dropped >= dropped, "{status:?}");
}

/// A council whose one member streams without end.
fn streaming_forever() -> Workspace {
    Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_DELTAS", "100000000"), ("FAKE_PIECE", "0123456789abcdef0123456789abcdef"), ("FAKE_RATE", "50000")],
    )])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_that_stops_reading_does_not_hold_up_the_shutdown() {
    let ws = streaming_forever();
    // A client timeout far longer than the test: only the shutdown grace
    // can cut the stalled subscriber.
    let mut kdd = Kdd::start_with(&["--shutdown-grace-ms", "1000", "--client-timeout-ms", "3600000"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut watcher = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let subscribe = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{{"thread":"{t}"}}}}"#);
    let _stalled = kd_tests::stalled_websocket(&kdd.socket, &[&subscribe]);
    c.council_send(t.clone(), "Go on and on.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    // Well past what the stalled socket and its buffers hold.
    let mut chars = 0;
    while chars < 4_000_000 {
        match within("deltas", watcher.next()).await {
            Some(Ok(kd_proto::types::ThreadEvent::Delta { chars: c, .. })) => chars = c,
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    let pid = rustix::process::Pid::from_raw(kdd.pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    // The subscriber that reads hears the run end before its subscription does.
    let mut ended_run = false;
    while let Some(e) = within("the subscription to end", watcher.next()).await {
        ended_run |= matches!(e.unwrap(), kd_proto::types::ThreadEvent::RunCancelled { .. });
    }
    assert!(ended_run, "the run's end is delivered before the subscription ends");
    let status = kdd.wait_exit();
    assert!(status.success(), "kdd exited with {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_stop_starts_no_new_turn() {
    // Thread A: claude stops at once on SIGINT, with auto-rounds to come.
    let a = Workspace::new(&[]);
    let (hold, record) = (a.file("hold"), a.file("record.jsonl"));
    std::fs::write(&hold, b"").unwrap();
    a.write_config(&serde_json::json!({
        "council": {"members": ["claude"], "auto_rounds": 3, "resume_within": "0"},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[("FAKE_HOLD", &hold), ("FAKE_RECORD", &record)])}
    }));
    // Thread B: an agent that ignores SIGTERM keeps the stop going for the kill grace.
    let b = Workspace::new(&[("codex", "codex", &[("FAKE_IGNORE_TERM", "1"), ("FAKE_HANG", "1")])]);
    b.without_resume();
    let mut kdd = Kdd::start_with(&["--kill-grace-ms", "2000"]);
    let c = kdd.client().await;
    let (ta, tb) = (kd_tests::new_thread(&c, &a.path()).await, kd_tests::new_thread(&c, &b.path()).await);
    let mut sub = c.thread_subscribe(ta.clone(), None, None).await.unwrap();
    let mut sub_b = c.thread_subscribe(tb.clone(), None, None).await.unwrap();
    c.council_send(tb.clone(), "Hang.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    c.council_send(ta.clone(), "Discuss.".into(), None, None, None, None, None, None, None, None).await.unwrap();
    let started = |e: &[kd_proto::types::ThreadEvent]| {
        e.iter().any(|e| matches!(e, kd_proto::types::ThreadEvent::RunStarted { .. }))
    };
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, kd_proto::types::ThreadEvent::Delta { .. }))).await;
    collect_until(&mut sub_b, started).await;
    let status = kdd.stop();
    assert!(status.success(), "{status}");
    assert_eq!(kd_tests::records(&record).len(), 1, "no auto-round turn started during the stop");
    kdd.launch().unwrap();
    let c = kdd.client().await;
    assert!(c.run_list(None).await.unwrap().is_empty());
    let kinds: Vec<kd_proto::types::MessageKind> =
        c.thread_messages(ta, None, None, None, None).await.unwrap().iter().map(|m| m.kind).collect();
    use kd_proto::types::MessageKind::{Interrupted, King};
    assert_eq!(kinds, [King, Interrupted]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_that_stops_reading_is_disconnected_and_others_go_on() {
    let ws = streaming_forever();
    let kdd = Kdd::start_with(&["--client-timeout-ms", "300"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let subscribe = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{{"thread":"{t}"}}}}"#);
    let mut stalled = kd_tests::stalled_websocket(&kdd.socket, &[&subscribe]);
    let s = within("the stalled subscription", async {
        loop {
            let s = c.daemon_status().await.unwrap();
            if s.subscriptions == 1 {
                return s;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(s.clients, 2);
    c.council_send(t.clone(), "Go on and on.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    // The daemon gives up on it while the run goes on.
    let status = within("the stalled client to be cut off", async {
        loop {
            let status = c.daemon_status().await.unwrap();
            if status.clients == 1 {
                return status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(status.runs_in_flight, 1, "{status:?}");
    // Its socket was closed under it: what was sent, then the end.
    let end = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut buf = vec![0u8; 1 << 16];
        while matches!(stalled.read(&mut buf), Ok(n) if n > 0) {}
    });
    within("the end of the stalled socket", end).await.unwrap();
}

/// A subscriber that stops reading while a member says much in a few large
/// pieces, then nothing more: what kdd has for it fills the socket, not
/// kdd's queue of messages, so no send waits — it is cut all the same once
/// nothing it was sent has moved for the client timeout (it stayed, and
/// kdd's memory grew with what it held for it).
#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_that_stops_reading_after_a_burst_is_disconnected() {
    let piece = "x".repeat(4000);
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_DELTAS", "2000"), ("FAKE_PIECE", &piece)])]);
    // Long enough for the reading client on a busy machine.
    let kdd = Kdd::start_with(&["--client-timeout-ms", "2000"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let subscribe = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{{"thread":"{t}"}}}}"#);
    let _stalled = kd_tests::stalled_websocket(&kdd.socket, &[&subscribe]);
    within("the stalled subscription", async {
        while c.daemon_status().await.unwrap().subscriptions != 1 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Say much.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    drop(sub);
    within("the stalled client to be cut off", async {
        while c.daemon_status().await.unwrap().clients != 1 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A JSON-RPC call over HTTP; its error code and message.
fn refused_with(kdd: &Kdd, method: &str, params: serde_json::Value) -> (i64, String) {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let v = rpc_post(&kdd.socket, &body);
    let code = v["error"]["code"].as_i64().unwrap_or_else(|| panic!("{method} was not refused: {v}"));
    (code, v["error"]["message"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn no_list_or_number_a_client_sends_is_unbounded() {
    let kdd = Kdd::start();
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let names = |n: usize| (0..n).map(|i| format!("m{i}")).collect::<Vec<_>>();
    // 100,000 members: refused at once, by count.
    let (code, msg) =
        refused_with(&kdd, "thread.create", serde_json::json!({"workspace": ws.path(), "members": names(100_000)}));
    assert_eq!((code, msg.contains("members: at most 64")), (1001, true), "{msg}");
    let import = |members: Vec<String>, to: Vec<String>, refs: Vec<String>| {
        serde_json::json!({"workspace": ws.path(), "members": members,
            "messages": [{"from": "king", "to": to, "body": "hi", "created_at_ms": 1, "refs": refs}]})
    };
    let (code, msg) = refused_with(&kdd, "thread.import", import(names(100_000), vec![], vec![]));
    assert_eq!((code, msg.contains("members: at most 64")), (1001, true), "{msg}");
    let (_, msg) = refused_with(&kdd, "thread.import", import(vec![], names(65), vec![]));
    assert!(msg.contains("messages[0].to: at most 64"), "{msg}");
    let (_, msg) = refused_with(&kdd, "thread.import", import(vec![], vec![], names(65)));
    assert!(msg.contains("messages[0].refs: at most 64"), "{msg}");
    // 64 is fine, and a duplicate among them is still found.
    let mut dup = names(64);
    dup[63] = "m0".into();
    let (_, msg) = refused_with(&kdd, "thread.create", serde_json::json!({"workspace": ws.path(), "members": dup}));
    assert!(msg.contains("\"m0\" is listed twice"), "{msg}");
    for (method, param) in
        [("council.send", "to"), ("council.send", "mute"), ("message.append", "to"), ("message.append", "cc")]
    {
        let mut params = serde_json::json!({"thread": t, "body": "hi"});
        if method == "message.append" {
            params["from"] = "king".into();
        }
        params[param] = serde_json::json!(names(65));
        let (code, msg) = refused_with(&kdd, method, params);
        assert_eq!((code, msg.contains(&format!("{param}: at most 64"))), (1001, true), "{method}: {msg}");
    }
    let (_, msg) =
        refused_with(&kdd, "council.send", serde_json::json!({"thread": t, "body": "hi", "rounds": 4294967295u32}));
    assert!(msg.contains("rounds must be at most 100"), "{msg}");
    // Positions past i64 would wrap to "everything".
    let huge = 1u64 << 63;
    let (code, msg) = refused_with(&kdd, "thread.messages", serde_json::json!({"thread": t, "since_seq": huge}));
    assert_eq!((code, msg.contains("since_seq")), (1001, true), "{msg}");
    let (code, msg) = refused_with(&kdd, "events.list", serde_json::json!({"since_id": huge}));
    assert_eq!((code, msg.contains("since_id")), (1001, true), "{msg}");
    let err = c.thread_subscribe(t.clone(), Some(huge), None).await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("since_seq"), "{err}");
    // The largest valid position is simply past the end.
    assert!(c.thread_messages(t, Some(huge - 1), None, None, None).await.unwrap().is_empty());
}

/// A raw connection that made one HTTP call, read the answer, and then
/// neither closes nor says anything more (keep-alive, forgotten).
fn idle_http(socket: &std::path::Path) -> std::os::unix::net::UnixStream {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"daemon.hello"}"#;
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: kd\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"result\"") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the daemon closed a keep-alive connection at once");
        got.extend_from_slice(&buf[..n]);
    }
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_are_dropped_and_status_and_stop_always_get_in() {
    let mut kdd =
        Kdd::start_with(&["--max-connections", "3", "--reserved-connections", "2", "--idle-timeout-ms", "600"]);
    // Every ordinary slot taken: two WebSockets that never answer a ping,
    // one HTTP connection left open after its call.
    let _ws1 = kd_tests::websocket(&kdd.socket);
    let _ws2 = kd_tests::websocket(&kdd.socket);
    let _http = idle_http(&kdd.socket);
    // kd daemon status gets in at once, on a slot kept for plain HTTP.
    let mut status = kdd.kd();
    status.args(["daemon", "status", "--json"]);
    let out = kd_tests::run(status).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("\"pid\""), "{}", out.stdout);
    // A WebSocket may not take a kept slot.
    let (code, body) = kd_tests::http_raw(
        &kdd.socket,
        b"GET / HTTP/1.1\r\nHost: kd\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .unwrap();
    assert_eq!(code, 503, "{body}");
    // The idle ones are dropped: a new WebSocket client gets in.
    let c = within("the idle connections to be dropped", async {
        loop {
            match kd_client::Client::connect(&kdd.socket).await {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    })
    .await;
    within("every idle connection to be dropped", async {
        while c.daemon_status().await.unwrap().clients > 1 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    })
    .await;
    // And kd daemon stop gets in while every slot is taken again.
    let _held: Vec<_> = (0..2).map(|_| kd_tests::websocket(&kdd.socket)).collect();
    let mut stop = kdd.kd();
    stop.args(["daemon", "stop"]);
    let out = kd_tests::run(stop).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(kdd.wait_exit().success());
}

/// A raw connection that sent an HTTP request's head and the start of its
/// body, and then nothing more.
fn half_sent(socket: &std::path::Path) -> std::os::unix::net::UnixStream {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.write_all(
        b"POST / HTTP/1.1\r\nHost: kd\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\":",
    )
    .unwrap();
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn half_sent_requests_are_dropped_but_a_call_being_answered_is_not() {
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_HOLD", &hold.env())])]);
    let kdd = Kdd::start_with(&["--max-connections", "4", "--reserved-connections", "0", "--idle-timeout-ms", "600"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    // A call over plain HTTP whose answer takes as long as the held run:
    // nothing moves on its connection meanwhile.
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "completion.agents",
        "params": {"thread": t, "body": "Take your time.", "agents": ["claude"]}})
    .to_string();
    let socket = kdd.socket.clone();
    let call = std::thread::spawn(move || kd_tests::http_post(&socket, &body));
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, kd_proto::types::ThreadEvent::RunStarted { .. }))).await;
    // The other two slots: requests whose bodies never finish.
    let halves: Vec<_> = (0..2).map(|_| half_sent(&kdd.socket)).collect();
    for mut h in halves {
        let closed = tokio::task::spawn_blocking(move || {
            use std::io::Read;
            h.set_read_timeout(Some(kd_tests::DEADLINE)).unwrap();
            let mut rest = Vec::new();
            h.read_to_end(&mut rest).map(|_| String::from_utf8_lossy(&rest).into_owned())
        });
        let closed = within("a half-sent request to be dropped", closed).await.unwrap();
        assert!(closed.is_ok(), "the daemon closed it: {closed:?}");
    }
    // Their slots are free again.
    let other = kdd.client().await;
    other.daemon_status().await.unwrap();
    // The call, silent all the while, was not taken for idle.
    hold.release();
    let (status, text) = within("the completion's answer", tokio::task::spawn_blocking(move || call.join().unwrap()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"parts\""), "{text}");
}
