//! Permissions codex app-server and ACP agents ask (the fake speaks them as
//! `captures/approvals` recorded them), decided through kd's approvals
//! service beside the run's loop: what each CLI is answered, what the run
//! says, and that a run waiting on one still ends.

use kd_client::prelude::*;
use kd_proto::approval::{Approval, ApprovalState, DecidedBy, Decision, Scope};
use kd_proto::types::{Message, MessageKind, ThreadEvent};
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

/// Sends `body` on a new thread nobody follows (no King's client can
/// answer: the CLI is answered as before approvals) and waits on the
/// journal for the exchange to end; the last message.
async fn unwatched(kdd: &Kdd, ws: &Workspace, body: &str) -> (kd_client::Client, String, Message) {
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, ws, None).await;
    send(&c, &t, body).await;
    kd_tests::settled(&kdd.db, &t).await;
    let last = kd_tests::last_message(&c, &t).await;
    (c, t, last)
}

/// The first `n` answers the fake was given, waiting for them (an ACP
/// agent may end the prompt before it reads the answer that follows).
async fn answered(record: &str, n: usize) -> Vec<(String, String)> {
    kd_tests::within("the agent's answers", async {
        loop {
            let got = answers(record);
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_asks_a_command_and_a_patch_and_is_declined_as_before_when_no_king_listens() {
    let (ws, record) = codex_untrusted("C:touch x-cmd ;; P:x-patch.txt");
    let kdd = Kdd::start();
    let (_c, _t, last) = unwatched(&kdd, &ws, "Make them.").await;
    assert_eq!(
        answers(&record),
        [
            ("item/commandExecution/requestApproval".to_string(), "decline".to_string()),
            ("item/fileChange/requestApproval".to_string(), "decline".to_string())
        ]
    );
    assert_eq!(
        (last.kind, last.body.as_str()),
        (MessageKind::Agent, "Tool said: exec command rejected by user\npatch rejected by user")
    );
    assert!(!ws.dir.path().join("x-cmd").exists() && !ws.dir.path().join("x-patch.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_command_is_refused_by_the_read_only_default_when_no_king_listens() {
    for adapter in ["claude-code-acp", "codex-acp"] {
        let (ws, record) = acp_asking(adapter, "touch x-acp", serde_json::json!({}));
        let kdd = Kdd::start();
        let (_c, _t, last) = unwatched(&kdd, &ws, "Touch it.").await;
        let refused = if adapter == "codex-acp" { "abort" } else { "reject" };
        assert_eq!(answers(&record), [("session/request_permission".to_string(), refused.to_string())], "{adapter}");
        assert_eq!(last.kind, MessageKind::Error, "{adapter}");
        assert!(last.body.starts_with("acp: refused by policy read-only: "), "{adapter}: {}", last.body);
        assert!(!ws.dir.path().join("x-acp").exists(), "{adapter}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_member_configured_to_allow_runs_the_command_once_never_always() {
    for adapter in ["claude-code-acp", "codex-acp"] {
        // Configured: answered so even with a King's client following.
        let (ws, record) = acp_asking(adapter, "touch x-acp", serde_json::json!({"permissions": "allow"}));
        let kdd = Kdd::start();
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Touch it.").await;
        let events = collect_until(&mut sub, |e| ended(e) == 1).await;
        assert!(!events.iter().any(|e| matches!(e, ThreadEvent::ApprovalRequested { .. })), "{events:?}");
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

/// The next approval requested on the thread `sub` follows.
async fn requested(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>) -> (Approval, Vec<ThreadEvent>) {
    let events = collect_until(sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::ApprovalRequested { .. }))).await;
    let approval = events
        .iter()
        .find_map(|e| if let ThreadEvent::ApprovalRequested { approval } = e { Some(*approval.clone()) } else { None })
        .unwrap();
    (approval, events)
}

/// The approval's state once decided, as `approval.list` tells it.
async fn state_of(c: &kd_client::Client, t: &str, id: &str) -> Approval {
    let all = c.approval_list(Some(true), Some(t.to_string()), None).await.unwrap();
    all.into_iter().find(|a| a.id == id).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_waits_for_the_king_who_approves_the_command_and_denies_the_patch() {
    let (ws, record) = codex_untrusted("C:touch x-cmd ;; P:x-patch.txt");
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Make them.").await;
    let (cmd, events) = requested(&mut sub).await;
    assert_eq!((cmd.member.as_str(), cmd.state), ("codex", ApprovalState::Pending));
    assert_eq!(cmd.tool.title, "touch x-cmd");
    assert_eq!(cmd.tool.command.as_deref(), Some("/bin/bash -lc 'touch x-cmd'"));
    assert_eq!(cmd.scopes, [Scope::Once, Scope::Run], "codex can accept for its session");
    assert!(cmd.run.is_some());
    assert!(activities(&events).contains(&"waiting for approval: touch x-cmd"), "{events:?}");
    assert!(answers(&record).is_empty(), "codex waits for the King");
    c.approval_decide(cmd.id.clone(), Decision::Approve, None, None).await.unwrap();
    let (patch, _) = requested(&mut sub).await;
    assert_eq!(patch.tool.paths, [format!("{}/x-patch.txt", ws.path())]);
    assert_eq!(patch.tool.input["changes"][0]["diff"], "written by the stub\n", "the diff codex showed before");
    c.approval_decide(patch.id.clone(), Decision::Deny, None, Some("Not that file.".into())).await.unwrap();
    collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_eq!(
        answers(&record),
        [
            ("item/commandExecution/requestApproval".to_string(), "accept".to_string()),
            ("item/fileChange/requestApproval".to_string(), "decline".to_string())
        ]
    );
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(
        (last.kind, last.body.as_str()),
        (MessageKind::Agent, "Tool said: ran `touch x-cmd`: exit code 0\npatch rejected by user")
    );
    assert!(ws.dir.path().join("x-cmd").exists() && !ws.dir.path().join("x-patch.txt").exists());
    let (cmd, patch) = (state_of(&c, &t, &cmd.id).await, state_of(&c, &t, &patch.id).await);
    assert_eq!((cmd.state, cmd.decided_by), (ApprovalState::Approved, Some(DecidedBy::King)));
    assert_eq!((patch.state, patch.message.as_deref()), (ApprovalState::Denied, Some("Not that file.")));
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_approved_for_the_run_accepts_for_its_session_and_is_not_asked_again() {
    let (ws, record) = codex_untrusted("C:touch x1 ;; C:touch x2");
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Make them.").await;
    let (first, _) = requested(&mut sub).await;
    c.approval_decide(first.id.clone(), Decision::Approve, Some(Scope::Run), None).await.unwrap();
    let events = collect_until(&mut sub, |e| ended(e) == 1).await;
    // The second command is asked by codex (another command) but allowed
    // by the King's grant for the run, without asking him again.
    assert!(!events.iter().any(|e| matches!(e, ThreadEvent::ApprovalRequested { .. })), "{events:?}");
    assert_eq!(
        answers(&record).into_iter().map(|(_, d)| d).collect::<Vec<_>>(),
        ["acceptForSession", "acceptForSession"]
    );
    assert!(ws.dir.path().join("x1").exists() && ws.dir.path().join("x2").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_nobody_decides_expires_and_the_agent_is_told_no() {
    for member in ["codex", "acp"] {
        let (ws, record) = if member == "codex" {
            codex_untrusted("C:touch x-cmd")
        } else {
            acp_asking("codex-acp", "touch x-acp", serde_json::json!({}))
        };
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(ws.dir.path().join(".kd/config.json")).unwrap())
                .unwrap_or_default();
        config["approvals"] = serde_json::json!({"timeout": "1s"});
        ws.write_config(&config);
        let kdd = Kdd::start();
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Go.").await;
        let (asked, _) = requested(&mut sub).await;
        collect_until(&mut sub, |e| ended(e) == 1).await;
        let expired = state_of(&c, &t, &asked.id).await;
        assert_eq!((expired.state, expired.decided_by), (ApprovalState::Expired, Some(DecidedBy::Timeout)), "{member}");
        let refused = if member == "codex" { "decline" } else { "abort" };
        assert_eq!(answers(&record).into_iter().map(|(_, d)| d).collect::<Vec<_>>(), [refused], "{member}");
        let last = kd_tests::last_message(&c, &t).await;
        if member == "acp" {
            // codex-acp ends the prompt `cancelled`: the run says why.
            assert!(last.body.contains("nobody answered within 1 second"), "{}", last.body);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_run_waiting_on_an_approval_answers_the_agent_cancelled_at_once() {
    for (member, cancelled) in [("codex", "cancel"), ("claude-code-acp", "cancelled"), ("codex-acp", "cancelled")] {
        let (ws, record) = if member == "codex" {
            codex_untrusted("C:touch x-cmd")
        } else {
            acp_asking(member, "touch x-acp", serde_json::json!({}))
        };
        let kdd = Kdd::start();
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        send(&c, &t, "Go.").await;
        let (asked, _) = requested(&mut sub).await;
        c.run_cancel(t.clone(), None, None).await.unwrap();
        let events = collect_until(&mut sub, |e| ended(e) == 1).await;
        assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { .. })), "{member}: {events:?}");
        let got = answered(&record, 1).await;
        assert_eq!(got.into_iter().map(|(_, d)| d).collect::<Vec<_>>(), [cancelled], "{member}");
        // Recorded by the service when the run let it go (in the background).
        let state = kd_tests::within("the approval cancelled", async {
            loop {
                let a = state_of(&c, &t, &asked.id).await;
                if a.state != ApprovalState::Pending {
                    return a.state;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
        assert_eq!(state, ApprovalState::Cancelled, "{member}");
        assert!(!ws.dir.path().join("x-cmd").exists() && !ws.dir.path().join("x-acp").exists());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_agent_approved_by_the_king_runs_the_command_once() {
    let (ws, record) = acp_asking("claude-code-acp", "touch x-acp", serde_json::json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Touch it.").await;
    let (asked, _) = requested(&mut sub).await;
    assert_eq!((asked.tool.title.as_str(), asked.tool.name.as_deref()), ("touch x-acp", Some("Bash")));
    assert_eq!(asked.scopes, [Scope::Once]);
    c.approval_decide(asked.id.clone(), Decision::Approve, None, None).await.unwrap();
    collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_eq!(answers(&record), [("session/request_permission".to_string(), "allow".to_string())]);
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!(last.kind, MessageKind::Agent, "{}", last.body);
    assert!(ws.dir.path().join("x-acp").exists());
    assert!(!ws.dir.path().join(".claude/settings.local.json").exists(), "no rule written");
}

#[tokio::test(flavor = "multi_thread")]
async fn kdd_stops_in_bounded_time_with_a_run_waiting_on_an_approval() {
    let (ws, record) = codex_untrusted("C:touch x-cmd");
    let mut kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Go.").await;
    requested(&mut sub).await;
    // Ends (within the harness's deadline, not the approval's 10 minutes).
    let status = kdd.stop();
    assert!(status.success(), "{status:?}");
    assert!(!ws.dir.path().join("x-cmd").exists());
    // codex was answered `cancel` before it went (when it read it in time).
    assert!(answers(&record).iter().all(|(_, d)| d == "cancel"), "{:?}", answers(&record));
}
