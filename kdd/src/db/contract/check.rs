//! The check in a member's worktree on every engine: begun on the head
//! (told), ended once and only by the check that began, a failure counting
//! a try and sending the member back while tries are left, and the checks
//! a stopped daemon left running found again.

use kd_proto::types::ThreadEvent;
use kd_proto::work::{CheckStatus, WorkCheck, WorkState};

use super::{engines, thread};
use crate::db::check::{CheckEnded, Fix, Started};
use crate::db::fixtures::worktree;
use crate::db::outage::Again;
use crate::db::threads::NewThread;

fn result(begun: &WorkCheck, status: CheckStatus) -> WorkCheck {
    WorkCheck {
        status,
        exit_code: Some(if status == CheckStatus::Pass { 0 } else { 1 }),
        duration_ms: 1200,
        output: "test a ... FAILED\n".into(),
        ..begun.clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_is_begun_on_the_head_ended_once_and_a_failure_sends_the_member_back_while_tries_are_left() {
    for e in engines().await {
        let (db, n) = (&e.db, e.name);
        db.create_thread(NewThread { id: Some("t1".into()), ..thread("/w") }).await.unwrap();
        let mut w = worktree("claude", 1);
        w.until_green = 1;
        db.add_worktree(w, false).await.unwrap();
        db.set_worktree_head("t1".into(), "claude".into(), "c".repeat(40), (1, 2, 0)).await.unwrap();
        db.set_worktree_state("t1".into(), "claude".into(), WorkState::Done).await.unwrap();
        let (t, m) = ("t1".to_string(), "claude".to_string());
        let mut sub = e.hub.subscribe("t1");
        let Started::Begun(w) = db.begin_check(t.clone(), m.clone(), 100).await.unwrap() else { panic!("{n}") };
        let begun = w.check.clone().unwrap();
        assert_eq!(
            (begun.status, begun.commit.as_str(), w.until_green),
            (CheckStatus::Running, "c".repeat(40).as_str(), 1),
            "{n}"
        );
        let told: ThreadEvent = serde_json::from_str(sub.try_recv().unwrap().json.get()).unwrap();
        assert!(matches!(told, ThreadEvent::Work { worktree } if worktree.checking()), "{n}");
        assert_eq!(db.running_checks().await.unwrap().len(), 1, "{n}: a stopped daemon's check is found again");
        // A check begun later wins: the earlier one's result is not recorded.
        let Started::Begun(w2) = db.begin_check(t.clone(), m.clone(), 200).await.unwrap() else { panic!("{n}") };
        let late = db
            .end_check(t.clone(), m.clone(), result(&begun, CheckStatus::Pass), Fix::Yes { fixes: 0 }, Again::First)
            .await
            .unwrap();
        assert_eq!(late, CheckEnded::Superseded, "{n}");
        let begun = w2.check.unwrap();
        let CheckEnded::Recorded { worktree, fixing } = db
            .end_check(t.clone(), m.clone(), result(&begun, CheckStatus::Fail), Fix::Yes { fixes: 0 }, Again::First)
            .await
            .unwrap()
        else {
            panic!("{n}")
        };
        assert!(fixing, "{n}: a try is left");
        assert_eq!(
            (worktree.state, worktree.fixes, worktree.fixing().as_deref()),
            (WorkState::Working, 1, Some("fixing 1/1")),
            "{n}"
        );
        let c = worktree.check.unwrap();
        assert_eq!(
            (c.status, c.exit_code, c.duration_ms, c.output.as_str()),
            (CheckStatus::Fail, Some(1), 1200, "test a ... FAILED\n"),
            "{n}"
        );
        assert_eq!(
            db.end_check(t.clone(), m.clone(), result(&begun, CheckStatus::Fail), Fix::Yes { fixes: 0 }, Again::First)
                .await
                .unwrap(),
            CheckEnded::Superseded,
            "{n}: ended once"
        );
        // Tried again after a commit whose answer was lost, the end finds
        // its result recorded and answers as its first try did, told again:
        // the member sent back, no second try counted.
        while sub.try_recv().is_ok() {}
        let again = db
            .end_check(t.clone(), m.clone(), result(&begun, CheckStatus::Fail), Fix::Yes { fixes: 0 }, Again::Retry)
            .await;
        assert!(
            matches!(&again, Ok(CheckEnded::Recorded { fixing: true, worktree }) if worktree.fixes == 1 && worktree.state == WorkState::Working),
            "{n}: {again:?}"
        );
        let told: ThreadEvent = serde_json::from_str(sub.try_recv().unwrap().json.get()).unwrap();
        assert!(matches!(told, ThreadEvent::Work { worktree } if worktree.fixes == 1), "{n}: told again");
        // Not so the result of a check another superseded, nor another result.
        let late = db.end_check(
            t.clone(),
            m.clone(),
            result(&w.check.unwrap(), CheckStatus::Pass),
            Fix::Yes { fixes: 0 },
            Again::Retry,
        );
        assert_eq!(late.await.unwrap(), CheckEnded::Superseded, "{n}");
        let other =
            db.end_check(t.clone(), m.clone(), result(&begun, CheckStatus::Pass), Fix::Yes { fixes: 0 }, Again::Retry);
        assert_eq!(other.await.unwrap(), CheckEnded::Superseded, "{n}");
        assert!(db.running_checks().await.unwrap().is_empty(), "{n}");
        // The try is spent: the next failure is recorded, nobody is sent back.
        db.set_worktree_state(t.clone(), m.clone(), WorkState::Done).await.unwrap();
        let Started::Begun(w3) = db.begin_check(t.clone(), m.clone(), 300).await.unwrap() else { panic!("{n}") };
        let w3_check = w3.check.unwrap();
        // A first try not written: the retry records the result as a first.
        let ended = db
            .end_check(
                t.clone(),
                m.clone(),
                result(&w3_check, CheckStatus::Timeout),
                Fix::Yes { fixes: 1 },
                Again::Retry,
            )
            .await
            .unwrap();
        assert!(
            matches!(&ended, CheckEnded::Recorded { fixing: false, worktree } if worktree.state == WorkState::Done && worktree.fixes == 1),
            "{n}: {ended:?}"
        );
        let again = db.end_check(
            t.clone(),
            m.clone(),
            result(&w3_check, CheckStatus::Timeout),
            Fix::Yes { fixes: 1 },
            Again::Retry,
        );
        assert_eq!(again.await.unwrap(), ended, "{n}: tried again, as the first try answered");
        // Settled work is not checked.
        db.set_worktree_state(t.clone(), m.clone(), WorkState::Rejected).await.unwrap();
        assert!(matches!(db.begin_check(t.clone(), m.clone(), 400).await.unwrap(), Started::Settled(_)), "{n}");
        assert_eq!(db.begin_check(t, "codex".into(), 400).await.unwrap(), Started::NoWork, "{n}");
    }
}
