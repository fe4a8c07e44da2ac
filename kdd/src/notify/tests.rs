//! The notifier on a real registry and hub (SQLite): an approval that
//! waits for the King reaches a command sink once, with its id.

use std::sync::Arc;
use std::time::Duration;

use kd_proto::approval::{ApprovalTool, Scope, ToolKind};
use kd_proto::notify::{Notification, NotifyKind};
use kd_proto::paths::DbLocation;
use tokio_util::sync::CancellationToken;

use super::Notifier;
use crate::approvals::{Answer, Approvals, Ask};
use crate::config::Backend;
use crate::db::threads::NewThread;
use crate::hub::Hub;

/// The notifications the command sink wrote into `dir`, once there are `n`.
async fn written(dir: &std::path::Path, n: usize) -> Vec<Notification> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .collect();
        if files.len() >= n {
            return files.iter().map(|f| serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap()).collect();
        }
        assert!(tokio::time::Instant::now() < deadline, "{} of {n} notifications written", files.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_that_waits_for_the_king_is_told_once_with_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".kd")).unwrap();
    let writer = "cat > \"$0/$$.json.part\" && mv \"$0/$$.json.part\" \"$0/$$.json\"";
    let config = serde_json::json!({"notify": {"command": ["/bin/sh", "-c", writer, out]}});
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
    let stop = CancellationToken::new();
    let notifier = Arc::new(Notifier::new(db.clone()));
    notifier.start(&hub, stop.clone());
    let t = db.create_thread(NewThread::in_workspace(ws.to_str().unwrap())).await.unwrap();
    // A King's client follows the thread: the approval waits for them.
    let _king = hub.subscribe(&t.id);
    let approvals = Arc::new(Approvals::new(db.clone(), hub.clone(), Arc::new(crate::approvals::NoWaits)));
    let ask = |title: &str| {
        let mut a = Ask::new(&t.id, "claude", Backend::Claude, ApprovalTool::new(ToolKind::Execute, title));
        a.run = Some("r1".into());
        a.scopes = vec![Scope::Once];
        let approvals = approvals.clone();
        tokio::spawn(async move { approvals.ask(a, Answer::Cancelled).await })
    };
    let first = ask("npm test");
    let got = written(&out, 1).await;
    assert_eq!(got[0].kind, NotifyKind::Approval);
    assert_eq!(got[0].member.as_deref(), Some("claude"));
    assert_eq!(got[0].thread.as_deref(), Some(t.id.as_str()));
    assert!(got[0].title.starts_with("kd: claude asks: npm test"), "{}", got[0].title);
    let id = got[0].approval.clone().expect("the approval's id");
    let pending = db.approvals(false, Some(t.id.clone()), 10).await.unwrap();
    assert_eq!(pending.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), [id.as_str()]);
    assert!(got[0].text.contains(&format!("kd approve {id}")), "{}", got[0].text);
    first.abort();
    stop.cancel();
}
