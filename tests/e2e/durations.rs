//! Every duration a client, a configuration file or kdd's command line
//! gives is bounded: too long a one is refused with `invalid_argument`
//! naming the parameter and the bound, never added to a clock (issue 21,
//! item 16).

use kd_client::prelude::*;
use kd_tests::{Kdd, Workspace};

/// Past what any clock can add: `i64::MAX` seconds, and `u64::MAX`.
const HUGE: [u64; 2] = [i64::MAX as u64, u64::MAX];

/// A call over plain HTTP, expected to be refused: its code and message.
fn refused(kdd: &Kdd, method: &str, params: serde_json::Value) -> (i64, String) {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let (_, text) = kd_tests::http_post(&kdd.socket, &body).expect("http post");
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method}: no JSON-RPC answer ({e}): {text:?}"));
    let code = v["error"]["code"].as_i64().unwrap_or_else(|| panic!("{method} was not refused: {v}"));
    (code, v["error"]["message"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_duration_parameter_is_bounded_and_named_when_refused() {
    let kdd = Kdd::start();
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let max = kd_proto::duration::MAX_TIMEOUT_S;
    for huge in HUGE {
        for (method, params) in [
            ("completion.agents", serde_json::json!({"thread": t, "body": "hi", "timeout_s": huge})),
            ("council.send", serde_json::json!({"thread": t, "body": "hi", "timeout_s": huge})),
            ("council.retry", serde_json::json!({"thread": t, "timeout_s": huge})),
        ] {
            let (code, msg) = refused(&kdd, method, params);
            assert_eq!(code, 1001, "{method}: {msg}");
            assert!(msg.contains("timeout_s") && msg.contains(&max.to_string()), "{method}: {msg}");
        }
        let (code, msg) =
            refused(&kdd, "lock.acquire", serde_json::json!({"resource": "r", "holder": "h", "ttl_ms": huge}));
        assert_eq!((code, msg.contains("ttl_ms")), (1001, true), "{msg}");
        let (code, msg) =
            refused(&kdd, "resource.write", serde_json::json!({"resource": "r", "agent": "claude", "window_ms": huge}));
        assert_eq!((code, msg.contains("window_ms")), (1001, true), "{msg}");
    }
    // The bound itself is accepted, and nothing was asked before.
    assert!(c.thread_messages(t.clone(), None, None, None, None).await.unwrap().is_empty());
    let sent = c.council_send(t, "hi".into(), None, None, None, Some(max), None, Some(0), None, None).await.unwrap();
    assert_eq!(sent.runs.len(), 1);
    c.daemon_status().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configured_timeout_past_the_bound_is_refused_naming_the_key() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let max = kd_proto::duration::MAX_TIMEOUT_S;
    for (key, config) in [
        ("council.timeout", serde_json::json!({"council": {"members": ["claude"], "timeout": HUGE[0]}})),
        (
            "agents.claude.timeout",
            serde_json::json!({"council": {"members": ["claude"]}, "agents": {"claude": {"timeout": HUGE[1]}}}),
        ),
    ] {
        let ws = Workspace::new(&[]);
        ws.write_config(&config);
        let err = c.config_get(ws.path(), None).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(key) && err.contains(&max.to_string()), "{key}: {err}");
    }
}

#[test]
fn kdd_refuses_a_duration_flag_past_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    for flag in
        ["--kill-grace-ms", "--client-timeout-ms", "--shutdown-grace-ms", "--idle-timeout-ms", "--reap-interval-ms"]
    {
        let mut kdd = std::process::Command::new(kd_tests::bin("kdd"));
        kdd.arg("--socket").arg(dir.path().join("run/kdd.sock")).arg("--db").arg(dir.path().join("kd.sqlite3"));
        kdd.args([flag, &u64::MAX.to_string()]);
        let (started, stderr) = kd_tests::kdd_outcome(kdd);
        assert!(!started, "{flag}: {stderr}");
        assert!(stderr.contains(flag) && stderr.contains("86400000"), "{flag}: {stderr}");
    }
}
