//! Line comments on every engine: added pending, listed oldest first (of a
//! member or all), sent once with the King's message, resolved once,
//! bounded per work, gone with their thread.

use kd_proto::comment::{Comment, CommentState};
use kd_proto::work::{WorkState, Worktree};

use super::{engines, thread};
use crate::db::DbError;

fn tree(thread: &str, member: &str) -> Worktree {
    Worktree {
        thread: thread.into(),
        repo: "/r".into(),
        path: format!("/w/{member}"),
        branch: format!("kd/{thread}/{member}"),
        base: "b0".into(),
        head: "h1".into(),
        state: WorkState::Done,
        files: 1,
        added: 1,
        created_at_ms: 1,
        ..crate::db::fixtures::worktree(member, 1)
    }
}

fn comment(id: &str, thread: &str, member: &str, at: i64) -> Comment {
    Comment {
        id: id.into(),
        thread: thread.into(),
        member: member.into(),
        author: "king".into(),
        path: "src/a.rs".into(),
        line: 3,
        end_line: 5,
        commit: "h1".into(),
        body: "name it better".into(),
        hunk: "@@ -1,2 +1,3 @@\n+x\n".into(),
        state: CommentState::Pending,
        created_at_ms: at,
        sent_seq: None,
        sent_at_ms: None,
        resolved_by: None,
        resolved_at_ms: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn comments_are_added_listed_sent_once_and_resolved_once() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        let t = db.create_thread(thread("/w")).await.unwrap();
        for m in ["claude", "codex"] {
            db.add_worktree(tree(&t.id, m), false).await.unwrap();
        }
        db.add_comment(comment("c1", &t.id, "claude", 10)).await.unwrap();
        db.add_comment(comment("c2", &t.id, "claude", 20)).await.unwrap();
        db.add_comment(comment("c3", &t.id, "codex", 15)).await.unwrap();
        let ids = |v: Vec<Comment>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(ids(db.comments(t.id.clone(), None).await.unwrap()), ["c1", "c3", "c2"], "{n}: oldest first");
        assert_eq!(ids(db.comments(t.id.clone(), Some("claude".into())).await.unwrap()), ["c1", "c2"], "{n}");
        assert_eq!(db.comment("c1".into()).await.unwrap(), Some(comment("c1", &t.id, "claude", 10)), "{n}");
        assert_eq!(db.comment("nope".into()).await.unwrap(), None, "{n}");
        let dup = db.add_comment(comment("c1", &t.id, "claude", 30)).await;
        assert!(dup.is_err(), "{n}: {dup:?}");

        let sent = db.send_comments(vec!["c1".into(), "c2".into()], 7, 100).await.unwrap();
        assert_eq!(ids(sent.clone()), ["c1", "c2"], "{n}");
        assert!(
            sent.iter().all(|c| c.state == CommentState::Sent && c.sent_seq == Some(7) && c.sent_at_ms == Some(100))
        );
        // Sent once: a second send finds them sent.
        assert!(db.send_comments(vec!["c1".into()], 8, 200).await.unwrap().is_empty(), "{n}");

        let r = db.resolve_comment("c1".into(), Some("h2".into()), 300).await.unwrap();
        assert_eq!(
            (r.state, r.resolved_by.as_deref(), r.resolved_at_ms),
            (CommentState::Resolved, Some("h2"), Some(300))
        );
        assert_eq!(r.sent_seq, Some(7), "{n}: its sending kept");
        let again = db.resolve_comment("c1".into(), None, 400).await.unwrap();
        assert_eq!(again, r, "{n}: resolved once");
        let king = db.resolve_comment("c3".into(), None, 500).await.unwrap();
        assert_eq!((king.state, king.resolved_by), (CommentState::Resolved, None), "{n}");
        // A resolved comment is never sent.
        assert!(db.send_comments(vec!["c3".into()], 9, 600).await.unwrap().is_empty(), "{n}");
        let missing = db.resolve_comment("cx".into(), None, 1).await;
        assert!(matches!(missing, Err(DbError::NotFound(_))), "{n}: {missing:?}");

        db.delete_thread(t.id.clone()).await.unwrap();
        assert!(db.comments(t.id.clone(), None).await.unwrap().is_empty(), "{n}: gone with the thread");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_work_holds_a_bounded_number_of_comments() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        let t = db.create_thread(thread("/w")).await.unwrap();
        db.add_worktree(tree(&t.id, "claude"), false).await.unwrap();
        let max = crate::db::comments::MAX_PER_WORK;
        for i in 0..max {
            db.add_comment(comment(&format!("c{i}"), &t.id, "claude", i64::from(i))).await.unwrap();
        }
        let over = db.add_comment(comment("over", &t.id, "claude", 0)).await;
        assert!(matches!(&over, Err(DbError::Invalid(m)) if m.contains("comments already")), "{n}: {over:?}");
    }
}
