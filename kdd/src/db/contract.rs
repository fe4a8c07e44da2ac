//! The registry's contract, run against every engine through [`Db`]: the
//! same calls give the same results, errors and events on SQLite and on
//! PostgreSQL, and the invariants the daemon relies on (dense seq, one
//! trunk, single holder of a lock, events only after commit) hold under
//! concurrent callers.

use std::collections::BTreeSet;
use std::sync::Arc;

use kd_proto::paths::DbLocation;
use kd_proto::types::{Lineage, LockOutcome, MessageKind, ThreadEvent};

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
    use kd_proto::work::{WorkState, Worktree};
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

mod approvals;
