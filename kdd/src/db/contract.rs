//! The registry's contract, run against every engine through [`Db`]: the
//! same calls give the same results, errors and events on SQLite and on
//! PostgreSQL, and the invariants the daemon relies on (dense seq, one
//! trunk, single holder of a lock, events only after commit) hold under
//! concurrent callers.

use std::collections::BTreeSet;
use std::sync::Arc;

use kd_proto::paths::DbLocation;
use kd_proto::types::{Lineage, LockOutcome, MessageKind, ThreadEvent};
use kd_proto::work::{WorkState, Worktree};

mod alike;
mod approvals;
mod check;
mod comments;
mod runs;

use super::fixtures::worktree;
use super::messages::{NewMessage, Page};
use super::threads::NewThread;
use super::{Db, DbError};
use crate::hub::Hub;

/// A registry on one engine, with what keeps its storage alive.
struct Engine {
    name: &'static str,
    db: Arc<Db>,
    hub: Arc<Hub>,
    _keep: Box<dyn std::any::Any + Send>,
}

/// A fresh registry on each engine this test run can reach.
async fn engines() -> Vec<Engine> {
    let mut all = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let hub = Arc::new(Hub::new());
    let db = Db::open(&DbLocation::File(dir.path().join("kd.sqlite3")), hub.clone(), crate::db::Node::here("test"))
        .await
        .unwrap();
    all.push(Engine { name: "sqlite", db: Arc::new(db), hub, _keep: Box::new(dir) });
    if let Some((pg, keep)) = super::pg::testing::fresh().await {
        pg.close().await;
        let hub = Arc::new(Hub::new());
        let url = DbLocation::Url(keep.url().to_string());
        let db = Db::open(&url, hub.clone(), crate::db::Node::here("contract")).await.unwrap();
        all.push(Engine { name: "postgres", db: Arc::new(db), hub, _keep: Box::new(keep) });
    }
    all
}

fn thread(workspace: &str) -> NewThread {
    NewThread::in_workspace(workspace)
}

fn said(thread: &str, body: String) -> NewMessage {
    NewMessage::new(thread, "king", vec![], MessageKind::King, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_appends_to_one_thread_get_dense_seqs() {
    for e in engines().await {
        let t = e.db.create_thread(thread("/w")).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..32 {
            let db = e.db.clone();
            let id = t.id.clone();
            tasks.push(tokio::spawn(async move { db.append_message(said(&id, format!("m{i}"))).await.unwrap().seq }));
        }
        let mut seqs = BTreeSet::new();
        for task in tasks {
            assert!(seqs.insert(task.await.unwrap()), "{}: a seq given twice", e.name);
        }
        assert_eq!(seqs, (1..=32).collect(), "{}", e.name);
        let all = e.db.messages(t.id.clone(), Page::all_after(0)).await.unwrap();
        assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=32).collect::<Vec<_>>(), "{}", e.name);
        assert_eq!(e.db.thread(t.id).await.unwrap().last_seq, 32, "{}", e.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn threads_made_at_once_in_a_fresh_workspace_share_one_trunk() {
    for e in engines().await {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let db = e.db.clone();
            tasks.push(tokio::spawn(async move { db.create_thread(thread("/fresh")).await }));
        }
        let mut made = Vec::new();
        for task in tasks {
            made.push(task.await.unwrap().unwrap());
        }
        let trunks: Vec<_> = made.iter().filter(|t| t.lineage == Lineage::Trunk).collect();
        assert_eq!(trunks.len(), 1, "{}: {made:#?}", e.name);
        let trunk = &trunks[0].id;
        assert!(
            made.iter().filter(|t| t.lineage == Lineage::Branch).all(|t| t.parent.as_ref() == Some(trunk)),
            "{}: every other thread branches off the trunk: {made:#?}",
            e.name
        );
        assert_eq!(e.db.trunk("/fresh".into(), None).await.unwrap().as_ref(), Some(trunk), "{}", e.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_has_one_holder_and_its_tokens_only_grow() {
    for e in engines().await {
        let mut tasks = Vec::new();
        for i in 0..8 {
            let db = e.db.clone();
            tasks
                .push(tokio::spawn(async move { db.acquire_lock("repo".into(), format!("h{i}"), 60_000, None).await }));
        }
        let mut held = Vec::new();
        for task in tasks {
            if let LockOutcome::Acquired { token, .. } = task.await.unwrap().unwrap() {
                held.push(token);
            }
        }
        assert_eq!(held.len(), 1, "{}: one holder", e.name);
        e.db.release_lock("repo".into(), held[0]).await.unwrap();
        let again = e.db.acquire_lock("repo".into(), "next".into(), 60_000, None).await.unwrap();
        let LockOutcome::Acquired { token, .. } = again else { panic!("{}: free again: {again:?}", e.name) };
        assert!(token > held[0], "{}: fencing tokens grow ({} then {token})", e.name, held[0]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_message_is_told_to_subscribers_and_a_refused_one_is_not() {
    for e in engines().await {
        let t = e.db.create_thread(thread("/w")).await.unwrap();
        let mut sub = e.hub.subscribe(&t.id);
        let m = e.db.append_message(said(&t.id, "hello".into())).await.unwrap();
        let told = sub.try_recv().expect("the message's event is published before the append returns");
        assert_eq!(told.seq, Some(m.seq), "{}", e.name);
        let event: ThreadEvent = serde_json::from_str(told.json.get()).unwrap();
        assert!(matches!(event, ThreadEvent::Message { .. }), "{}: {event:?}", e.name);
        let gone = e.db.append_message(said("no-such-thread", "lost".into())).await;
        assert!(matches!(gone, Err(DbError::NotFound(_))), "{}: {gone:?}", e.name);
        assert!(sub.try_recv().is_err(), "{}: nothing told of a refused write", e.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn work_found_tampered_with_is_recorded_so_and_nothing_moves_it_on() {
    for e in engines().await {
        let t = e.db.create_thread(thread("/w")).await.unwrap();
        let tree = Worktree {
            thread: t.id.clone(),
            member: "claude".into(),
            task: "do it".into(),
            repo: "/w".into(),
            path: "/data/worktrees/w/claude".into(),
            branch: "kd/t/claude".into(),
            base: "b".repeat(40),
            head: "b".repeat(40),
            state: WorkState::Working,
            files: 0,
            added: 0,
            removed: 0,
            removed_at_ms: None,
            created_at_ms: 1,
            last_run: None,
            check: None,
            until_green: 0,
            fixes: 0,
            shipped: None,
            uncommitted: None,
        };
        e.db.add_worktree(tree, false).await.unwrap();
        let (id, m) = (t.id.clone(), "claude".to_string());
        e.db.work_interrupted(id.clone(), m.clone(), None, None, "cut".into(), WorkState::Tampered).await.unwrap();
        let w = e.db.worktree(id.clone(), m.clone()).await.unwrap().unwrap();
        assert_eq!(w.state, WorkState::Tampered, "{}", e.name);
        let kept = e.db.move_worktree_state(id.clone(), m.clone(), WorkState::Working).await.unwrap().unwrap();
        assert_eq!(kept.state, WorkState::Tampered, "{}: no run works there again", e.name);
        e.db.set_worktree_state(id.clone(), m.clone(), WorkState::Rejected).await.unwrap();
        assert_eq!(e.db.worktree(id, m).await.unwrap().unwrap().state, WorkState::Rejected, "{}", e.name);
    }
}

#[tokio::test]
async fn a_worktree_is_recorded_moved_on_and_settled() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        db.add_worktree(worktree("codex", 2), true).await.unwrap();
        db.add_worktree(worktree("claude", 1), true).await.unwrap();
        assert!(
            db.add_worktree(worktree("claude", 3), false).await.is_err(),
            "{n}: one worktree per member and thread"
        );
        let members = |ws: Vec<Worktree>| ws.into_iter().map(|w| w.member).collect::<Vec<_>>();
        assert_eq!(members(db.worktrees_of("t1".into()).await.unwrap()), ["claude", "codex"], "{n}");
        // Why kd could not commit a run is kept until a head is recorded.
        db.set_worktree_uncommitted("t1".into(), "claude".into(), "git add timed out".into()).await.unwrap();
        let w = db.worktree("t1".into(), "claude".into()).await.unwrap().unwrap();
        assert_eq!(w.uncommitted.as_deref(), Some("git add timed out"), "{n}");
        db.set_worktree_head("t1".into(), "claude".into(), "c".repeat(40), (2, 10, 3)).await.unwrap();
        db.set_worktree_state("t1".into(), "claude".into(), WorkState::Done).await.unwrap();
        let w = db.worktree("t1".into(), "claude".into()).await.unwrap().unwrap();
        assert_eq!(
            (w.head.as_str(), w.files, w.added, w.removed, w.state, w.uncommitted),
            ("c".repeat(40).as_str(), 2, 10, 3, WorkState::Done, None),
            "{n}"
        );
        assert_eq!(db.unsettled_worktrees().await.unwrap().len(), 2, "{n}");
        db.set_worktree_state("t1".into(), "codex".into(), WorkState::Rejected).await.unwrap();
        assert_eq!(db.unsettled_worktrees().await.unwrap().len(), 1, "{n}");
        // Settled work is not moved on.
        let kept = db.move_worktree_state("t1".into(), "codex".into(), WorkState::Done).await.unwrap().unwrap();
        assert_eq!(kept.state, WorkState::Rejected, "{n}");
        db.set_worktree_removed("t1".into(), "claude".into(), 9).await.unwrap();
        assert!(db.unsettled_worktrees().await.unwrap().is_empty(), "{n}");
        let gone = db.move_worktree_state("t1".into(), "claude".into(), WorkState::Working).await.unwrap().unwrap();
        assert_eq!((gone.state, gone.removed_at_ms), (WorkState::Done, Some(9)), "{n}");
        assert!(db.move_worktree_state("t1".into(), "gemini".into(), WorkState::Done).await.unwrap().is_none());
        let unknown = db.set_worktree_state("t1".into(), "gemini".into(), WorkState::Done).await;
        assert!(matches!(unknown, Err(DbError::NotFound(_))), "{n}: {unknown:?}");
        assert_eq!(members(db.worktrees(Some("/w".into())).await.unwrap()), ["codex", "claude"], "{n}");
        assert!(db.worktrees(Some("/v".into())).await.unwrap().is_empty(), "{n}");
        assert_eq!(db.worktrees(None).await.unwrap().len(), 2, "{n}");
    }
}

#[tokio::test]
async fn a_second_trunk_is_refused_in_a_sentence_naming_the_trunk() {
    let new = |workspace: &str, branch: Option<&str>, lineage| NewThread {
        branch: branch.map(Into::into),
        lineage,
        members: vec![],
        ..thread(workspace)
    };
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        let trunk = db.create_thread(new("/w", Some("main"), None)).await.unwrap();
        let refused = db.create_thread(new("/w", Some("main"), Some(Lineage::Trunk))).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("the trunk of /w (branch main) already exists: thread {}; fork it for a branch", trunk.id),
            "{n}"
        );
        let bare = db.create_thread(new("/v", None, None)).await.unwrap();
        let refused = db.create_thread(new("/v", None, Some(Lineage::Trunk))).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("the trunk of /v already exists: thread {}; fork it for a branch", bare.id),
            "{n}"
        );
        assert_eq!(db.trunk("/w".into(), Some("main".into())).await.unwrap(), Some(trunk.id), "{n}");
        assert_eq!(db.trunk("/w".into(), None).await.unwrap(), None, "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_beside_the_open_exchange_supersedes_it_not_and_the_next_kings_does() {
    use super::exchanges::{ExchangeState, Kind, NewExchange, StepKey};
    let work = |beside: bool| NewExchange {
        thread: "t1".into(),
        seq: 0,
        kind: Kind::Work,
        correlation_id: None,
        plan: serde_json::json!({"mode": "broadcast", "rounds": 1, "first": ["claude"], "vote": true, "beside": beside}),
        first_steps: vec![StepKey::answer(1, "claude")],
        path: None,
    };
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        let task = db.ask(None, vec![said("t1", "the task".into())], work(false)).await.unwrap().exchange;
        // kd sends a member back to fix its work: the task's vote still waits.
        let fix = db.ask(None, vec![said("t1", "fix it".into())], work(true)).await.unwrap().exchange;
        assert_eq!(db.exchange(task.id).await.unwrap().state, ExchangeState::Open, "{n}");
        // A King's next question supersedes both.
        db.ask(None, vec![said("t1", "next".into())], work(false)).await.unwrap();
        for x in [task.id, fix.id] {
            let x = db.exchange(x).await.unwrap();
            assert_eq!(x.state, ExchangeState::Stopped, "{n}: {x:?}");
        }
    }
}
