//! Permissions codex app-server and ACP agents ask (the fake speaks them as
//! `captures/approvals` recorded them), decided through kd's approvals
//! service beside the run's loop: what each CLI is answered, what the run
//! says, and that a run waiting on one still ends.

use kd_proto::types::{MessageKind, ThreadEvent};
use kd_tests::{Kdd, Workspace, bin, collect_until, ended, records, send_one_round as send};

/// A codex member through app-server opened `untrusted` (codex asks for
/// every command and patch), taking `FAKE_STEPS` `steps`.
fn codex_untrusted(steps: &str) -> (Workspace, String) {
    let ws = Workspace::new(&[]);
    let record = ws.file("codex.jsonl");
    let mut codex = kd_tests::fake("codex", "codex", &[("FAKE_STEPS", steps), ("FAKE_RECORD", &record)]);
    codex["sandbox"] = "workspace-write".into();
    codex["approval"] = "untrusted".into();
    ws.write_config(&serde_json::json!({"council": {"members": ["codex"]}, "agents": {"codex": codex}}));
    (ws, record)
}

/// An ACP member playing `adapter` (`claude-code-acp` or `codex-acp`) that
/// asks to run `command`, with `extra` configuration.
fn acp_asking(adapter: &str, command: &str, extra: serde_json::Value) -> (Workspace, String) {
    let ws = Workspace::new(&[]);
    let record = ws.file("acp.jsonl");
    let env = serde_json::json!({"FAKE_NAME": "acp", "FAKE_ACP": adapter, "FAKE_COMMAND": command,
                                 "FAKE_RECORD": record, "CODEX_HOME": ws.file("codex-home")});
    let mut agent = serde_json::json!({"backend": "acp", "command": bin("fake-agent"), "args": ["acp"], "env": env});
    if let (Some(a), Some(e)) = (agent.as_object_mut(), extra.as_object()) {
        a.extend(e.clone());
    }
    ws.write_config(&serde_json::json!({"council": {"members": ["acp"]}, "agents": {"acp": agent}}));
    (ws, record)
}

fn activities(events: &[ThreadEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| if let ThreadEvent::Activity { what, .. } = e { Some(what.as_str()) } else { None })
        .collect()
}

/// What the fake was answered, request by request: (method, decision or
/// option chosen).
fn answers(record: &str) -> Vec<(String, String)> {
    records(record)
        .iter()
        .filter(|r| r.get("answered").is_some())
        .map(|r| {
            let method = r["answered"].as_str().unwrap_or("session/request_permission").to_string();
            let result = &r["result"];
            let chosen = result["decision"]
                .as_str()
                .or_else(|| result.pointer("/outcome/optionId").and_then(|v| v.as_str()))
                .or_else(|| result.pointer("/outcome/outcome").and_then(|v| v.as_str()))
                .unwrap_or("?")
                .to_string();
            (method, chosen)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_asks_a_command_and_a_patch_and_is_declined_as_before_when_no_king_answers() {
    let (ws, record) = codex_untrusted("C:touch x-cmd ;; P:x-patch.txt");
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Make them.").await;
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_eq!(
        answers(&record),
        [
            ("item/commandExecution/requestApproval".to_string(), "decline".to_string()),
            ("item/fileChange/requestApproval".to_string(), "decline".to_string())
        ]
    );
    let shown = activities(&events);
    assert!(shown.contains(&"waiting for approval: touch x-cmd"), "{shown:?}");
    assert!(shown.contains(&format!("waiting for approval: Edit {}/x-patch.txt", ws.path()).as_str()), "{shown:?}");
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(
        (last.kind, last.body.as_str()),
        (MessageKind::Agent, "Tool said: exec command rejected by user\npatch rejected by user")
    );
    assert!(!ws.dir.path().join("x-cmd").exists() && !ws.dir.path().join("x-patch.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_command_is_refused_by_the_read_only_default_when_no_king_answers() {
    for adapter in ["claude-code-acp", "codex-acp"] {
        let (ws, record) = acp_asking(adapter, "touch x-acp", serde_json::json!({}));
        let kdd = Kdd::start();
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Touch it.").await;
        collect_until(&mut sub, |e| ended(e) == 1).await;
        let refused = if adapter == "codex-acp" { "abort" } else { "reject" };
        assert_eq!(answers(&record), [("session/request_permission".to_string(), refused.to_string())], "{adapter}");
        let last = kd_tests::last_message(&c, &t).await;
        assert_eq!(last.kind, MessageKind::Error, "{adapter}");
        assert!(last.body.starts_with("acp: refused by policy read-only: "), "{adapter}: {}", last.body);
        assert!(!ws.dir.path().join("x-acp").exists(), "{adapter}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_member_configured_to_allow_runs_the_command_once_never_always() {
    for adapter in ["claude-code-acp", "codex-acp"] {
        let (ws, record) = acp_asking(adapter, "touch x-acp", serde_json::json!({"permissions": "allow"}));
        let kdd = Kdd::start();
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Touch it.").await;
        collect_until(&mut sub, |e| ended(e) == 1).await;
        let once = if adapter == "codex-acp" { "approved" } else { "allow" };
        assert_eq!(answers(&record), [("session/request_permission".to_string(), once.to_string())], "{adapter}");
        let last = kd_tests::last_message(&c, &t).await;
        assert_eq!(last.kind, MessageKind::Agent, "{adapter}: {}", last.body);
        assert!(last.body.contains("ran `touch x-acp`: exit code 0"), "{adapter}: {}", last.body);
        assert!(ws.dir.path().join("x-acp").exists(), "{adapter}");
        // No rule written into the user's files.
        assert!(!ws.dir.path().join(".claude/settings.local.json").exists(), "{adapter}");
    }
}
