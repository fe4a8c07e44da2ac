//! Bad input gets a JSON-RPC error, and the daemon keeps serving others.

use std::io::Write;
use std::os::unix::net::UnixStream;

use kd_client::prelude::*;
use kd_tests::{Kdd, http_post, http_raw, rpc_post, websocket, within, workspace, ws_frame, ws_read_text};

fn error_code(v: &serde_json::Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error: {v}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_json_unknown_methods_and_wrong_types_get_errors() {
    let kdd = Kdd::start();
    let s = &kdd.socket;
    assert_eq!(error_code(&rpc_post(s, r#"{"jsonrpc":"2.0","id":1,"#)), -32700);
    assert_eq!(error_code(&rpc_post(s, "\u{0}\u{1}garbage")), -32700);
    assert_eq!(error_code(&rpc_post(s, r#"{"jsonrpc":"2.0","id":1,"method":"no.such"}"#)), -32601);
    let v = rpc_post(s, r#"{"jsonrpc":"2.0","id":1,"method":"thread.list","params":{"limit":"ten"}}"#);
    assert_eq!(error_code(&v), -32602);
    let v = rpc_post(s, r#"{"jsonrpc":"2.0","id":1,"method":"thread.get","params":{}}"#);
    assert_eq!(error_code(&v), -32602, "missing required param");
    let v = rpc_post(s, r#"{"jsonrpc":"2.0","id":1,"method":"thread.messages","params":{"thread":"a","sinceseq":1}}"#);
    assert_eq!(error_code(&v), -32602);
    assert!(v["error"]["message"].as_str().unwrap().contains("since_seq"), "{v}");
    let v = rpc_post(s, r#"{"jsonrpc":"2.0","id":1,"method":"thread.create","params":{"workspace":"relative"}}"#);
    assert_eq!(error_code(&v), 1001);
    let v = rpc_post(
        s,
        r#"{"jsonrpc":"2.0","id":1,"method":"message.append","params":{"thread":"x","from":"Bad Name","body":""}}"#,
    );
    assert_eq!(error_code(&v), 1001);
    assert!(v["error"]["message"].as_str().unwrap().starts_with("from: "), "{v}");
    // A batch mixing good and bad calls answers each.
    let v = rpc_post(
        s,
        r#"[{"jsonrpc":"2.0","id":1,"method":"daemon.hello"},{"jsonrpc":"2.0","id":2,"method":"thread.get","params":{"threadid":"x"}}]"#,
    );
    let answers = v.as_array().unwrap();
    assert_eq!(answers.len(), 2);
    assert!(answers.iter().any(|a| a["id"] == 1 && a["result"]["protocol"] == 1));
    assert!(answers.iter().any(|a| a["id"] == 2 && a["error"]["code"] == -32602));
    // Still serving.
    let c = kdd.client().await;
    c.daemon_status().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_request_is_refused_without_harm() {
    let kdd = Kdd::start_with(&["--max-request-bytes", "4096"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &workspace("big")).await;
    let big = "x".repeat(10_000);
    let body = serde_json::json!({"jsonrpc":"2.0","id":1,"method":"message.append","params":{"thread": t, "from":"king","body": big}}).to_string();
    let (status, text) = http_post(&kdd.socket, &body).unwrap();
    assert_eq!(status, 413, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error_code(&v), -32007, "{v}");
    // Over WebSocket too: the call fails, nothing is written, others are served.
    let ws_err =
        c.message_append(t.clone(), "king".into(), "x".repeat(10_000), None, None, None, None, None, None, None).await;
    assert!(ws_err.is_err());
    let other = kdd.client().await;
    assert!(other.thread_messages(t, None, None, None, None).await.unwrap().is_empty());
}

/// A request limit under the smallest one a client may send before the
/// daemon says its own (`kd ask`'s question beside the greeting) is refused
/// at the start.
#[test]
fn kdd_refuses_a_request_limit_under_the_smallest() {
    let dir = tempfile::tempdir().unwrap();
    let mut kdd = std::process::Command::new(kd_tests::bin("kdd"));
    kdd.arg("--socket").arg(dir.path().join("run/kdd.sock")).arg("--db").arg(dir.path().join("kd.sqlite3"));
    kdd.args(["--max-request-bytes", "4095"]);
    let (started, stderr) = kd_tests::kdd_outcome(kdd);
    assert!(!started, "{stderr}");
    assert!(stderr.contains("--max-request-bytes") && stderr.contains("4096"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_disconnects_mid_call_does_not_disturb_others() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    for _ in 0..20 {
        // Half a request, then gone.
        let mut s = UnixStream::connect(&kdd.socket).unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nHost: kd\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\":").unwrap();
        drop(s);
        // A whole request whose answer is never read.
        let mut s = UnixStream::connect(&kdd.socket).unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"thread.list"}"#;
        write!(s, "POST / HTTP/1.1\r\nHost: kd\r\nContent-Length: {}\r\n\r\n{}", body.len(), body).unwrap();
        drop(s);
    }
    // A WebSocket client that subscribes and then vanishes.
    {
        let gone = kdd.client().await;
        let t = kd_tests::new_thread(&gone, &workspace("gone")).await;
        let _sub = gone.thread_subscribe(t, Some(0), None).await.unwrap();
    }
    within("status after abuse", c.daemon_status()).await.unwrap();
    within("subscriptions closed", async {
        while c.daemon_status().await.unwrap().subscriptions != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_http_methods_and_garbage_bytes_do_not_crash_the_daemon() {
    let kdd = Kdd::start();
    let (status, _) = http_raw(&kdd.socket, b"GET / HTTP/1.1\r\nHost: kd\r\nConnection: close\r\n\r\n").unwrap();
    assert_eq!(status, 405);
    let mut s = UnixStream::connect(&kdd.socket).unwrap();
    s.write_all(&[0xff, 0xfe, 0x00, 0x13, 0x37, b'\r', b'\n', b'\r', b'\n']).unwrap();
    drop(s);
    let c = kdd.client().await;
    c.daemon_status().await.unwrap();
}

/// Ids JSON-RPC does not allow, or that no integer type holds.
const BAD_IDS: &[&str] = &["1.5", "{}", "[1]", "true", "18446744073709551616", "-9223372036854775809", "1e3"];

fn hello(id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"daemon.hello"}}"#)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_request_gets_an_answer_whatever_its_id() {
    let kdd = Kdd::start();
    let mut ws = websocket(&kdd.socket);
    let mut over_ws = |body: &str| -> serde_json::Value {
        ws.write_all(&ws_frame(body.as_bytes())).unwrap();
        serde_json::from_str(&ws_read_text(&mut ws)).unwrap()
    };
    for id in BAD_IDS {
        for (how, v) in [("HTTP", rpc_post(&kdd.socket, &hello(id))), ("WebSocket", over_ws(&hello(id)))] {
            assert_eq!(error_code(&v), -32600, "{how}, id {id}: {v}");
            assert_eq!(v["id"], serde_json::Value::Null, "{how}, id {id}: {v}");
            assert!(v["error"]["message"].as_str().unwrap().contains("id"), "{v}");
        }
    }
    // Ids no number type holds, and ids nested past any parser's depth.
    let deep = |n: usize, open: &str, close: &str| format!("{}{}", open.repeat(n), close.repeat(n));
    let deep_object = format!("{}0{}", r#"{"a":"#.repeat(2000), "}".repeat(2000));
    let odd = ["1e400".to_string(), "-1e400".into(), deep(1000, "[", "]"), deep(100_000, "[", "]"), deep_object];
    for id in &odd {
        for (how, v) in [("HTTP", rpc_post(&kdd.socket, &hello(id))), ("WebSocket", over_ws(&hello(id)))] {
            let shown = &id[..id.len().min(12)];
            assert_eq!(error_code(&v), -32600, "{how}, id {shown}…: {v}");
            assert_eq!(v["id"], serde_json::Value::Null, "{how}, id {shown}…: {v}");
        }
    }
    // Negative integers are ids like any other: the call is made and
    // answered under the same id — and so are strings that look like kd's own.
    for id in ["-1", "-9223372036854775808", r#""\u0000kd:7""#, "0", r#""x""#] {
        for (how, v) in [("HTTP", rpc_post(&kdd.socket, &hello(id))), ("WebSocket", over_ws(&hello(id)))] {
            assert_eq!(v["result"]["protocol"], kd_proto::PROTOCOL_VERSION, "{how}, id {id}: {v}");
            assert_eq!(v["id"], serde_json::from_str::<serde_json::Value>(id).unwrap(), "{how}: {v}");
        }
    }
    // In a batch, each entry gets its own answer.
    let v = rpc_post(&kdd.socket, &format!("[{},{}]", hello("-2"), hello("true")));
    let answers = v.as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(answers.len(), 2, "{v}");
    assert!(answers.iter().any(|a| a["id"] == -2 && a["result"]["protocol"].is_u64()), "{v}");
    assert!(answers.iter().any(|a| a["id"].is_null() && a["error"]["code"] == -32600), "{v}");
    // A subscription under a negative id over WebSocket: its id comes back.
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &workspace("ids")).await;
    let sub = format!(r#"{{"jsonrpc":"2.0","id":-3,"method":"thread.subscribe","params":{{"thread":"{t}"}}}}"#);
    let v = over_ws(&sub);
    assert_eq!(v["id"], -3, "{v}");
    assert!(v["result"].is_u64() || v["result"].is_string(), "a subscription id: {v}");
}

/// A batch is bounded: its calls run one after another on the daemon's
/// worker, so thousands of `rpc.discover` in one request held every other
/// client, and shutdown, for seconds. A batch of more calls than kdd takes
/// is refused whole; one of that many is answered call by call.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_more_calls_than_kdd_takes_is_refused_whole() {
    let kdd = Kdd::start();
    let discover = |n: usize| {
        let calls: Vec<String> =
            (0..n).map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"rpc.discover"}}"#)).collect();
        format!("[{}]", calls.join(","))
    };
    let v = rpc_post(&kdd.socket, &discover(kd_proto::MAX_BATCH + 1));
    assert!(v.is_object(), "the batch was run: {} answers", v.as_array().map_or(0, Vec::len));
    assert_eq!(error_code(&v), -32010, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("too large"), "{v}");
    let v = rpc_post(&kdd.socket, &discover(kd_proto::MAX_BATCH));
    let answers = v.as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(answers.len(), kd_proto::MAX_BATCH);
    assert!(answers.iter().all(|a| a["result"]["openrpc"].is_string()), "each answered");
    kdd.client().await.daemon_status().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_over_http_says_it_needs_a_websocket() {
    let kdd = Kdd::start();
    let v = rpc_post(&kdd.socket, r#"{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{"thread":"t-x"}}"#);
    assert_eq!(error_code(&v), -32600, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("needs a WebSocket"), "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_websocket_upgrade_is_a_400_and_frees_its_slot() {
    let kdd = Kdd::start_with(&["--max-connections", "2"]);
    for _ in 0..10 {
        let (status, body) = http_raw(
            &kdd.socket,
            b"GET / HTTP/1.1\r\nHost: kd\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n\r\n",
        )
        .unwrap();
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("WebSocket"), "{body}");
    }
    let c = kdd.client().await;
    c.daemon_status().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_says_when_a_request_is_too_large_for_the_daemon() {
    let kdd = Kdd::start_with(&["--max-request-bytes", "1048576"]);
    let ws = kd_tests::Workspace::new(&[("claude", "claude", &[])]);
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["ask", "-"]).stdin(std::process::Stdio::piped());
    kd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = kd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let question = "q".repeat(2 * 1024 * 1024);
    tokio::io::AsyncWriteExt::write_all(&mut stdin, question.as_bytes()).await.unwrap();
    drop(stdin);
    let out = within("kd ask", child.wait_with_output()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim(), "kd: request too large (2.0 MiB > 1 MiB limit)");
    // Nothing was asked.
    let c = kdd.client().await;
    assert!(c.thread_list(None, None, None).await.unwrap().iter().all(|t| t.last_seq == 0));
}

/// One rule for a title wherever it is set: thread.create, thread.set_title,
/// thread.fork, council.send's new thread, thread.import and `kd title`
/// all refuse an escape, a tab, a newline, an empty title and one over 200
/// characters, and store nothing (issue 21 item 11).
#[tokio::test(flavor = "multi_thread")]
async fn a_title_is_checked_the_same_wherever_it_is_set() {
    let kdd = Kdd::start();
    let s = &kdd.socket;
    let c = kdd.client().await;
    let ws = workspace("titles");
    let t =
        c.thread_create(ws.clone(), None, Some("Good title".into()), None, None, None, None, None, None).await.unwrap();
    let call = |method: &str, params: serde_json::Value| {
        rpc_post(s, &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string())
    };
    let long = "x".repeat(201);
    for bad in ["bad\u{1b}]0;pwned\u{7}title", "tab\there", "two\nlines", "  ", long.as_str()] {
        let message = serde_json::json!([{"from": "king", "to": ["all"], "body": "hi", "created_at_ms": 1}]);
        let attempts = [
            ("thread.create", serde_json::json!({"workspace": ws, "title": bad})),
            ("thread.set_title", serde_json::json!({"thread": t.id, "title": bad})),
            ("thread.fork", serde_json::json!({"thread": t.id, "title": bad})),
            (
                "council.send",
                serde_json::json!({"thread": "newone1", "body": "hi", "new_thread": {"workspace": ws, "title": bad}}),
            ),
            ("thread.import", serde_json::json!({"workspace": ws, "title": bad, "messages": message})),
        ];
        for (method, params) in attempts {
            let v = call(method, params);
            assert_eq!(error_code(&v), 1001, "{method} {bad:?}: {v}");
            let said = v["error"]["message"].as_str().unwrap();
            assert!(said.contains("title"), "{method} {bad:?}: {said}");
        }
    }
    // A good title is stored trimmed, however it is set.
    let v = call("thread.set_title", serde_json::json!({"thread": t.id, "title": "  Orders sharding  "}));
    assert_eq!(v["result"]["title"], "Orders sharding", "{v}");
    let v = call("thread.create", serde_json::json!({"workspace": workspace("titles2"), "title": " Spaced "}));
    assert_eq!(v["result"]["title"], "Spaced", "{v}");
    // Nothing else was written: the one thread made above, plus that one.
    let threads = c.thread_list(None, None, None).await.unwrap();
    assert_eq!(threads.len(), 2, "{threads:?}");
    assert_eq!(c.thread_get(t.id.clone()).await.unwrap().title.as_deref(), Some("Orders sharding"));

    // From the command line: refused in one line, the title kept.
    let mut k = kdd.kd();
    k.args(["title", &t.id, "bad\u{1b}title"]);
    let out = kd_tests::run(k).await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stdout);
    assert!(out.stderr.contains("control characters") && !out.stderr.contains('\u{1b}'), "{}", out.stderr);
    assert_eq!(c.thread_get(t.id.clone()).await.unwrap().title.as_deref(), Some("Orders sharding"));
}
