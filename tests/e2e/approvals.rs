//! Approvals (issue 33) end to end with the fake claude speaking claude's
//! permission prompt tool as captured (shared/captures/approvals
//! `claude-*.allow`, `claude-*.deny`): claude asks kd's MCP server's
//! `approve`, kdd records a pending approval and tells the King's clients,
//! the King decides over the socket, and the tool runs — or the agent is
//! told the King's message. The policy decides without asking.

use kd_client::prelude::*;
use kd_proto::approval::{ApprovalState, DecidedBy, Decision, ToolKind};
use kd_proto::types::{RunStatus, ThreadEvent};
use kd_tests::Kdd;

use crate::reconnect::Piped;
use serde_json::json;

/// A workspace whose claude asks to run `touch <file>`, and the file.
pub(crate) fn asking(ws: &kd_tests::Workspace, file: &str, approvals: serde_json::Value) -> String {
    let path = ws.file(file);
    let asked = json!({"tool_name": "Bash", "input": {"command": format!("touch {path}"), "description": "touch it"}});
    let asked = asked.to_string();
    let env = [("FAKE_PERMISSION", asked.as_str())];
    ws.write_config(&json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &env)},
        "approvals": approvals,
    }));
    path
}

/// The approval the thread's subscription tells, once it does.
pub(crate) async fn requested(
    sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>,
) -> kd_proto::approval::Approval {
    let events =
        kd_tests::collect_until(sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::ApprovalRequested { .. }))).await;
    events
        .into_iter()
        .find_map(|e| match e {
            ThreadEvent::ApprovalRequested { approval } => Some(*approval),
            _ => None,
        })
        .expect("an approval requested")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_king_approves_and_claudes_tool_runs() {
    let ws = kd_tests::Workspace::new(&[]);
    let file = asking(&ws, "x-approved", json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let a = requested(&mut sub).await;
    assert_eq!((a.member.as_str(), a.tool.kind, a.state), ("claude", ToolKind::Execute, ApprovalState::Pending));
    assert_eq!(a.tool.command.as_deref(), Some(format!("touch {file}").as_str()));
    assert!(!std::path::Path::new(&file).exists(), "nothing runs before the King says so");
    // The run waits on it, and says which.
    let runs = c.run_list(Some(t.clone())).await.unwrap();
    let waiting: Vec<_> = runs.iter().map(|r| (r.status, r.approval.as_deref())).collect();
    assert_eq!(waiting, [(RunStatus::Waiting, Some(a.id.as_str()))], "{runs:?}");
    assert_eq!(a.run.as_deref(), Some(runs[0].id.as_str()));
    let pending = c.approval_list(None, None, None).await.unwrap();
    assert_eq!(pending.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), [a.id.as_str()]);
    let decided = c.approval_decide(a.id.clone(), Decision::Approve, None, None).await.unwrap();
    assert_eq!((decided.state, decided.decided_by), (ApprovalState::Approved, Some(DecidedBy::King)));
    kd_tests::collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert!(last.body.contains("allowed, ran touch"), "{last:?}");
    assert!(std::path::Path::new(&file).exists(), "the approved command ran");
    // Decided once.
    let again = c.approval_decide(a.id.clone(), Decision::Deny, None, None).await.unwrap_err();
    assert!(again.to_string().contains("approved already"), "{again}");
    assert!(c.approval_list(None, None, None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_king_denies_and_claude_is_told_his_message() {
    let ws = kd_tests::Workspace::new(&[]);
    let file = asking(&ws, "x-denied", json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let a = requested(&mut sub).await;
    c.approval_decide(a.id.clone(), Decision::Deny, None, Some("not this one".into())).await.unwrap();
    kd_tests::collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert!(last.body.contains("denied: not this one"), "{last:?}");
    assert!(!std::path::Path::new(&file).exists());
    let all = c.approval_list(Some(true), Some(t.clone()), None).await.unwrap();
    assert_eq!((all[0].state, all[0].message.as_deref()), (ApprovalState::Denied, Some("not this one")));
}

/// The run ends without the King being asked, claude told the policy's
/// denial, nothing run, the denial recorded as the policy's.
async fn denied_by_the_policy(
    c: &kd_client::Client,
    t: &str,
    sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>,
    file: &str,
) {
    let events = kd_tests::collect_until(sub, |e| kd_tests::ended(e) == 1).await;
    assert!(!events.iter().any(|e| matches!(e, ThreadEvent::ApprovalRequested { .. })), "the King was asked");
    let last = kd_tests::last_message(c, t).await;
    assert!(last.body.contains("denied: kd's approvals policy denies execute"), "{last:?}");
    assert!(!std::path::Path::new(file).exists());
    let all = c.approval_list(Some(true), None, None).await.unwrap();
    assert_eq!((all[0].state, all[0].decided_by), (ApprovalState::Denied, Some(DecidedBy::Policy)));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_denies_without_asking_the_king() {
    let ws = kd_tests::Workspace::new(&[]);
    let file = asking(&ws, "x-policy", json!({"tools": {"execute": "deny"}}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    denied_by_the_policy(&c, &t, &mut sub, &file).await;
}

/// The user's configuration's `approvals` apply beside the workspace's
/// own file (which sets none): the user's denial of `execute` decides
/// without asking the King, and `kd config show` says where it comes from.
#[tokio::test(flavor = "multi_thread")]
async fn the_users_policy_denies_without_asking_beside_the_workspaces_file() {
    let ws = kd_tests::Workspace::new(&[]);
    let file = asking(&ws, "x-user-policy", json!({"timeout": "5m"}));
    let kdd = Kdd::start();
    let user = kdd.dir.path().join("config/kd/config.json");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    std::fs::write(&user, json!({"approvals": {"tools": {"execute": "deny"}}}).to_string()).unwrap();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    denied_by_the_policy(&c, &t, &mut sub, &file).await;
    let view = c.config_get(ws.path(), None).await.unwrap();
    let entry = |key: &str| view.entries.iter().find(|e| e.key == key).cloned();
    let rule = entry("approvals.tools.execute").expect("the user's rule is shown");
    assert_eq!((rule.value, rule.source), (json!("deny"), user.display().to_string()));
    let timeout = entry("approvals.timeout").unwrap();
    assert_eq!((timeout.value, timeout.source), (json!(300), ws.file(".kd/config.json")));
}

#[tokio::test(flavor = "multi_thread")]
async fn nobody_answering_expires_the_approval_and_claude_is_told_so() {
    let ws = kd_tests::Workspace::new(&[]);
    asking(&ws, "x-expired", json!({"timeout": 1}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let a = requested(&mut sub).await;
    kd_tests::collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let last = kd_tests::last_message(&c, &t).await;
    assert!(last.body.contains("expired"), "{last:?}");
    let all = c.approval_list(Some(true), None, None).await.unwrap();
    assert_eq!((all[0].id.as_str(), all[0].state), (a.id.as_str(), ApprovalState::Expired));
}

/// A claude run cancelled while its permission tool waits for the King:
/// the approval is cancelled with it, at once, not left pending until
/// `approvals.timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn a_claude_run_cancelled_while_it_waits_cancels_its_approval() {
    let ws = kd_tests::Workspace::new(&[]);
    let file = asking(&ws, "x-cancelled", json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let a = requested(&mut sub).await;
    c.run_cancel(t.clone(), None, None).await.unwrap();
    let events = kd_tests::collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::ApprovalDecided { approval } if approval.id == a.id))
    })
    .await;
    let decided = events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::ApprovalDecided { approval } if approval.id == a.id => Some(approval.clone()),
            _ => None,
        })
        .expect("decided");
    assert_eq!((decided.state, decided.decided_by), (ApprovalState::Cancelled, None), "{decided:?}");
    assert!(c.approval_list(None, None, None).await.unwrap().is_empty(), "nothing left pending");
    let late = c.approval_decide(a.id.clone(), Decision::Approve, None, None).await;
    assert!(late.is_err(), "a cancelled approval cannot be approved: {late:?}");
    assert!(!std::path::Path::new(&file).exists(), "the tool never ran");
}

/// kdd killed while an approval waits: started again, the dead run's
/// approval is `cancelled` (by no one), never left pending, and the
/// exchange it was part of settles.
#[tokio::test(flavor = "multi_thread")]
async fn kdd_killed_with_an_approval_pending_cancels_it_at_the_next_start() {
    let ws = kd_tests::Workspace::new(&[]);
    let file = asking(&ws, "x-killed", json!({}));
    let mut kdd = Kdd::start();
    let (a, t) = {
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        kd_tests::send_one_round(&c, &t, "Touch the file.").await;
        (requested(&mut sub).await, t)
    };
    kdd.kill9();
    kdd.launch().unwrap();
    let c = kdd.client().await;
    let all = c.approval_list(Some(true), Some(t.clone()), None).await.unwrap();
    let before = all.iter().find(|x| x.id == a.id).expect("the approval is kept");
    assert_eq!((before.state, before.decided_by), (ApprovalState::Cancelled, None), "{before:?}");
    assert!(before.message.is_some(), "it says why: {before:?}");
    kd_tests::settled(&kdd.db, &t).await;
    assert!(!std::path::Path::new(&file).exists() || all.len() > 1, "the tool ran only if asked again");
}

/// The King's CLI: `kd approvals` lists the pending one, `kd approve ID
/// --run` allows it for the run, `kd deny` of a decided one is refused.
#[tokio::test(flavor = "multi_thread")]
async fn kd_approvals_lists_it_and_kd_approve_lets_the_tool_run() {
    let ws = kd_tests::Workspace::new(&[]);
    let file = asking(&ws, "x-cli", json!({}));
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    kd_tests::send_one_round(&c, &t, "Touch the file.").await;
    let a = requested(&mut sub).await;
    let listed = kdd.kd().arg("approvals").output().await.unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains(&a.id) && listed.contains(&format!("execute: touch {file}")), "{listed}");
    let runs = kdd.kd().arg("runs").output().await.unwrap();
    let runs = String::from_utf8_lossy(&runs.stdout);
    assert!(runs.contains(&format!("waiting on {}", a.id)), "{runs}");
    let json = kdd.kd().args(["approvals", "--json"]).output().await.unwrap();
    let json: Vec<kd_proto::approval::Approval> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json.len(), 1);
    let ok = kdd.kd().args(["approve", &a.id, "--run"]).output().await.unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("[approved by king]"));
    kd_tests::collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    assert!(std::path::Path::new(&file).exists(), "the approved command ran");
    let all = c.approval_list(Some(true), None, None).await.unwrap();
    assert_eq!(all[0].scope, Some(kd_proto::approval::Scope::Run));
    let late = kdd.kd().args(["deny", &a.id, "-m", "too late"]).output().await.unwrap();
    assert!(!late.status.success());
    assert!(String::from_utf8_lossy(&late.stderr).contains("approved already"), "{late:?}");
}

/// `kd approvals --follow` rides through a kill -9 of kdd as `kd watch`
/// does: it says the daemon went away, connects again when it is back,
/// tells what was decided meanwhile (the dead run's approval, cancelled
/// at the start) without repeating what it showed, and goes on with new
/// requests. (It exited 0 without a word when kdd died.)
#[tokio::test(flavor = "multi_thread")]
async fn kd_approvals_follow_rides_through_a_kill_9_of_kdd() {
    let ws = kd_tests::Workspace::new(&[]);
    asking(&ws, "x-follow", json!({}));
    let mut kdd = Kdd::start();
    let a = {
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        kd_tests::send_one_round(&c, &t, "Touch the file.").await;
        requested(&mut sub).await
    };
    let mut k = kdd.kd();
    k.args(["approvals", "--follow", "--reconnect", "30"]);
    let mut follow = Piped::spawn(k);
    follow.until(false, &a.id).await;

    kdd.kill9();
    follow.until(true, "kd: kdd went away; reconnecting (up to 30 s)…").await;
    kdd.launch().expect("kdd starts again");
    follow.until(true, "kd: reconnected").await;
    // The dead run's approval, cancelled at the start, is told.
    follow.until(false, "[cancelled]").await;
    // And new requests come.
    let b = {
        let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
        kd_tests::send_one_round(&c, &t, "Touch the file.").await;
        requested(&mut sub).await
    };
    follow.until(false, &b.id).await;
    follow.interrupt();
    assert_eq!(follow.exit().await, Some(0), "{}", follow.stderr());
    let out = follow.stdout();
    let of_a: Vec<&str> = out.lines().filter(|l| l.contains(&a.id)).collect();
    assert_eq!(of_a.len(), 2, "pending once, then cancelled once: {out}");
    assert!(of_a[1].ends_with("[cancelled]"), "{out}");
    assert_eq!(out.lines().filter(|l| l.contains(&b.id)).count(), 1, "{out}");
}

/// With no patience (`--reconnect 0`), `kd approvals --follow` says on
/// stderr that it lost kdd and exits non-zero, as `kd watch` does.
#[tokio::test(flavor = "multi_thread")]
async fn kd_approvals_follow_without_reconnecting_says_kdd_went_away() {
    let mut kdd = Kdd::start();
    let mut k = kdd.kd();
    k.args(["approvals", "--follow", "--reconnect", "0"]);
    let mut follow = Piped::spawn(k);
    // Subscribed once kdd counts it.
    kd_tests::within("the follow to subscribe", async {
        let c = kdd.client().await;
        while c.daemon_status().await.unwrap().subscriptions == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    kdd.kill9();
    let code = follow.exit().await;
    let err = follow.stderr();
    assert_eq!(code, Some(3), "kd's exit for a daemon it lost: {err}");
    assert!(err.contains("lost the connection to kdd") && !err.contains("reconnecting"), "{err}");
}
