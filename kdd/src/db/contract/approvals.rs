//! Approvals on every engine: recorded, listed, decided once, granted for
//! a run or a thread, and cancelled when their node starts again.

use kd_proto::approval::{Approval, ApprovalState, ApprovalTool, DecidedBy, Scope, ToolKind};
use kd_proto::types::ThreadEvent;

use super::{engines, thread};
use crate::db::DbError;
use crate::db::approvals::{Decide, Decided};

fn pending(id: &str, thread: &str, run: &str, at: i64) -> Approval {
    Approval {
        id: id.into(),
        thread: thread.into(),
        member: "claude".into(),
        run: Some(run.into()),
        tool: ApprovalTool { command: Some("touch x".into()), ..ApprovalTool::new(ToolKind::Execute, "touch x") },
        scopes: vec![Scope::Once, Scope::Run, Scope::Thread],
        state: ApprovalState::Pending,
        decided_by: None,
        scope: None,
        message: None,
        requested_at_ms: at,
        decided_at_ms: None,
        expires_at_ms: Some(at + 600_000),
    }
}

fn king(id: &str, state: ApprovalState, scope: Option<Scope>, message: Option<&str>) -> Decide {
    Decide { id: id.into(), state, by: Some(DecidedBy::King), scope, message: message.map(Into::into) }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_recorded_listed_decided_once_and_told() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        let t = db.create_thread(thread("/w")).await.unwrap();
        let mut rx = e.hub.subscribe(&t.id);
        db.add_approval(pending("ap-1", &t.id, "r1", 10), "test".into()).await.unwrap();
        db.add_approval(pending("ap-2", &t.id, "r1", 20), "test".into()).await.unwrap();
        let first = rx.recv().await.unwrap();
        let told: ThreadEvent = serde_json::from_str(first.json.get()).unwrap();
        assert!(matches!(&told, ThreadEvent::ApprovalRequested { approval } if approval.id == "ap-1"), "{n}: {told:?}");
        let ids = |v: Vec<Approval>| v.into_iter().map(|a| a.id).collect::<Vec<_>>();
        assert_eq!(ids(db.approvals(false, None, 10).await.unwrap()), ["ap-2", "ap-1"], "{n}: newest first");
        assert_eq!(db.approval("ap-1".into()).await.unwrap().unwrap(), pending("ap-1", &t.id, "r1", 10), "{n}");

        let done = db.decide_approval(king("ap-1", ApprovalState::Approved, Some(Scope::Run), None)).await.unwrap();
        let Decided::Now(a) = done else { panic!("{n}: {done:?}") };
        assert_eq!(
            (a.state, a.decided_by, a.scope),
            (ApprovalState::Approved, Some(DecidedBy::King), Some(Scope::Run))
        );
        assert!(a.decided_at_ms.is_some(), "{n}");
        // A second decision finds it decided and changes nothing.
        let again = db.decide_approval(king("ap-1", ApprovalState::Denied, None, Some("no"))).await.unwrap();
        assert_eq!(again, Decided::Already(a.clone()), "{n}");
        assert_eq!(ids(db.approvals(false, None, 10).await.unwrap()), ["ap-2"], "{n}: only the pending");
        assert_eq!(ids(db.approvals(true, Some(t.id.clone()), 10).await.unwrap()), ["ap-2", "ap-1"], "{n}");
        assert!(db.approvals(true, Some("nope".into()), 10).await.unwrap().is_empty(), "{n}");

        let missing = db.decide_approval(king("ap-x", ApprovalState::Denied, None, None)).await;
        assert!(matches!(missing, Err(DbError::NotFound(_))), "{n}: {missing:?}");
        let pending_again = db.decide_approval(king("ap-2", ApprovalState::Pending, None, None)).await;
        assert!(matches!(pending_again, Err(DbError::Invalid(_))), "{n}: {pending_again:?}");

        // What the King granted for the run covers that run only.
        assert_eq!(
            ids(db.approvals_granted(t.id.clone(), "claude".into(), Some("r1".into())).await.unwrap()),
            ["ap-1"]
        );
        assert!(db.approvals_granted(t.id.clone(), "claude".into(), Some("r2".into())).await.unwrap().is_empty());
        assert!(db.approvals_granted(t.id.clone(), "codex".into(), Some("r1".into())).await.unwrap().is_empty());

        let kinds: Vec<String> = db
            .events(crate::db::events::EventFilter {
                thread: Some(t.id.clone()),
                agent: None,
                kind: None,
                since_id: None,
                before_id: None,
                limit: 100,
            })
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| k.starts_with("approval."))
            .collect();
        assert_eq!(kinds, ["approval.requested", "approval.requested", "approval.decided"], "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scope_the_cli_cannot_honour_is_refused() {
    for e in engines().await {
        let t = e.db.create_thread(thread("/w")).await.unwrap();
        let once_only = Approval { scopes: vec![Scope::Once], ..pending("ap-1", &t.id, "r1", 1) };
        e.db.add_approval(once_only, "test".into()).await.unwrap();
        let r = e.db.decide_approval(king("ap-1", ApprovalState::Approved, Some(Scope::Thread), None)).await;
        assert!(matches!(&r, Err(DbError::Invalid(m)) if m.contains("honours: once")), "{}: {r:?}", e.name);
        assert!(e.db.approval("ap-1".into()).await.unwrap().unwrap().state.is_pending(), "{}", e.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_starting_again_cancels_its_pending_approvals_only() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        let t = db.create_thread(thread("/w")).await.unwrap();
        db.add_approval(pending("ap-1", &t.id, "r1", 1), "a".into()).await.unwrap();
        db.add_approval(pending("ap-2", &t.id, "r2", 2), "b".into()).await.unwrap();
        db.add_approval(pending("ap-3", &t.id, "r3", 3), "a".into()).await.unwrap();
        db.decide_approval(king("ap-3", ApprovalState::Denied, None, Some("no"))).await.unwrap();
        let cut = db.cancel_node_approvals("a".into(), "kdd stopped".into()).await.unwrap();
        assert_eq!(cut.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["ap-1"], "{n}");
        let a1 = db.approval("ap-1".into()).await.unwrap().unwrap();
        assert_eq!((a1.state, a1.message.as_deref()), (ApprovalState::Cancelled, Some("kdd stopped")), "{n}");
        assert!(db.approval("ap-2".into()).await.unwrap().unwrap().state.is_pending(), "{n}: another node's");
        assert_eq!(db.approval("ap-3".into()).await.unwrap().unwrap().state, ApprovalState::Denied, "{n}");
    }
}
