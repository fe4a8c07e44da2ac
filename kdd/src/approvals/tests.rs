//! The service on a real registry (SQLite): the policy decides without
//! asking, the King decides what it leaves, the timeout expires what
//! nobody answers, and an asker that goes away cancels its approval.

use std::sync::Arc;
use std::time::Duration;

use kd_proto::approval::{ApprovalState, ApprovalTool, DecidedBy, Scope, ToolKind};
use kd_proto::paths::DbLocation;

use super::*;
use crate::db::approvals::{Decide, Decided};
use crate::db::threads::NewThread;

struct Fixture {
    approvals: Arc<Approvals>,
    db: Arc<Db>,
    hub: Arc<Hub>,
    thread: String,
    _dir: tempfile::TempDir,
}

async fn fixture(config: serde_json::Value) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".kd")).unwrap();
    std::fs::write(ws.join(".kd/config.json"), config.to_string()).unwrap();
    let hub = Arc::new(Hub::new());
    let db = crate::db::Db::open(
        &DbLocation::File(dir.path().join("kd.sqlite3")),
        hub.clone(),
        crate::db::Node::here("test"),
    )
    .await
    .unwrap();
    let db = Arc::new(db);
    let t = db.create_thread(NewThread::in_workspace(ws.to_str().unwrap())).await.unwrap();
    Fixture {
        approvals: Arc::new(Approvals::new(db.clone(), hub.clone(), Arc::new(crate::approvals::NoWaits))),
        db,
        hub,
        thread: t.id,
        _dir: dir,
    }
}

fn ask(f: &Fixture, kind: ToolKind, title: &str) -> Ask {
    let mut a = Ask::new(&f.thread, "claude", Backend::Claude, ApprovalTool::new(kind, title));
    a.run = Some("r1".into());
    a.scopes = vec![Scope::Once, Scope::Run];
    a
}

const TODAY: Answer = Answer::Cancelled;

/// The approval pending on the thread, once it is.
async fn pending(f: &Fixture) -> kd_proto::approval::Approval {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut rx = f.hub.subscribe_approvals();
    loop {
        if let Some(a) = f.db.approvals(false, Some(f.thread.clone()), 10).await.unwrap().pop() {
            return a;
        }
        tokio::time::timeout_at(deadline, rx.recv()).await.expect("no approval asked").ok();
    }
}

fn king(id: &str, state: ApprovalState, scope: Option<Scope>, message: Option<&str>) -> Decide {
    Decide { id: id.into(), state, by: Some(DecidedBy::King), scope, message: message.map(Into::into) }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_decides_without_asking_and_what_it_denies_is_recorded() {
    let f = fixture(serde_json::json!({"approvals": {"tools": {"fetch": "deny", "execute": "allow"}}})).await;
    let _king = f.hub.subscribe(&f.thread);
    assert_eq!(f.approvals.ask(ask(&f, ToolKind::Read, "read a"), TODAY).await, Answer::Allow { scope: Scope::Once });
    assert_eq!(
        f.approvals.ask(ask(&f, ToolKind::Execute, "touch x"), TODAY).await,
        Answer::Allow { scope: Scope::Once }
    );
    let denied = f.approvals.ask(ask(&f, ToolKind::Fetch, "GET https://x"), TODAY).await;
    assert!(matches!(&denied, Answer::Deny { message } if message.contains("policy denies fetch")), "{denied:?}");
    let all = f.db.approvals(true, None, 10).await.unwrap();
    // (Two asked in the same millisecond have no order between them.)
    let mut states: Vec<_> = all.iter().map(|a| (a.tool.title.as_str(), a.state, a.decided_by)).collect();
    states.sort_by_key(|s| s.0);
    assert_eq!(
        states,
        [
            ("GET https://x", ApprovalState::Denied, Some(DecidedBy::Policy)),
            ("touch x", ApprovalState::Approved, Some(DecidedBy::Policy)),
        ],
        "the default's read is not recorded; the rules' decisions are"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_kings_client_the_cli_gets_its_answer_of_before() {
    let f = fixture(serde_json::json!({})).await;
    assert_eq!(f.approvals.ask(ask(&f, ToolKind::Execute, "touch x"), TODAY).await, TODAY);
    assert!(f.db.approvals(true, None, 10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_king_approves_for_the_run_and_the_runs_next_call_of_that_kind_is_not_asked() {
    let f = fixture(serde_json::json!({})).await;
    let _king = f.hub.subscribe_approvals();
    let a = f.approvals.clone();
    let asked = tokio::spawn({
        let q = ask(&f, ToolKind::Execute, "touch x");
        async move { a.ask(q, TODAY).await }
    });
    let p = pending(&f).await;
    assert_eq!((p.tool.title.as_str(), p.scopes.clone()), ("touch x", vec![Scope::Once, Scope::Run]));
    assert!(p.expires_at_ms.unwrap() >= p.requested_at_ms + 600_000, "10 minutes by default");
    f.db.decide_approval(king(&p.id, ApprovalState::Approved, Some(Scope::Run), None)).await.unwrap();
    assert_eq!(asked.await.unwrap(), Answer::Allow { scope: Scope::Run });
    // Granted for the run: the next command is allowed without asking.
    assert_eq!(
        f.approvals.ask(ask(&f, ToolKind::Execute, "touch y"), TODAY).await,
        Answer::Allow { scope: Scope::Run }
    );
    assert!(f.db.approvals(false, None, 10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kings_denial_reaches_the_agent_with_his_message() {
    let f = fixture(serde_json::json!({})).await;
    let _king = f.hub.subscribe(&f.thread);
    let a = f.approvals.clone();
    let q = ask(&f, ToolKind::Execute, "rm -rf /");
    let asked = tokio::spawn(async move { a.ask(q, TODAY).await });
    let p = pending(&f).await;
    f.db.decide_approval(king(&p.id, ApprovalState::Denied, None, Some("not that"))).await.unwrap();
    assert_eq!(asked.await.unwrap(), Answer::Deny { message: "not that".into() });
}

#[tokio::test(flavor = "multi_thread")]
async fn nobody_answering_expires_it_and_the_agent_is_told_so() {
    let f = fixture(serde_json::json!({"approvals": {"timeout": 1}})).await;
    let _king = f.hub.subscribe(&f.thread);
    let answer = f.approvals.ask(ask(&f, ToolKind::Execute, "touch x"), TODAY).await;
    assert!(matches!(&answer, Answer::Deny { message } if message.contains("expired")), "{answer:?}");
    let a = f.db.approvals(true, None, 10).await.unwrap().pop().unwrap();
    assert_eq!((a.state, a.decided_by), (ApprovalState::Expired, Some(DecidedBy::Timeout)));
    // The King comes too late.
    let late = f.db.decide_approval(king(&a.id, ApprovalState::Approved, None, None)).await.unwrap();
    assert!(matches!(late, Decided::Already(_)));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_asker_that_goes_away_cancels_its_approval() {
    let f = fixture(serde_json::json!({})).await;
    let _king = f.hub.subscribe(&f.thread);
    let mut told = f.hub.subscribe_approvals();
    let a = f.approvals.clone();
    let q = ask(&f, ToolKind::Execute, "touch x");
    let asked = tokio::spawn(async move { a.ask(q, TODAY).await });
    let p = pending(&f).await;
    asked.abort();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let e = tokio::time::timeout_at(deadline, told.recv()).await.expect("not cancelled").unwrap();
        if let kd_proto::approval::ApprovalEvent::Decided { approval } = &*e {
            assert_eq!((approval.id.as_str(), approval.state), (p.id.as_str(), ApprovalState::Cancelled));
            break;
        }
    }
}
