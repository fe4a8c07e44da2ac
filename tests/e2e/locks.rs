//! Conversation locks: TTL, fencing tokens, dead holders, restarts.

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::{Fence, LockOutcome};
use kd_tests::{Kdd, workspace};

fn token(o: &LockOutcome) -> u64 {
    match o {
        LockOutcome::Acquired { token, .. } => *token,
        LockOutcome::Denied { .. } => panic!("expected acquired, got {o:?}"),
    }
}

/// Waits, by the daemon's clock, until the lock on `resource` has expired.
async fn wait_until_free(c: &kd_client::Client, resource: &str) {
    kd_tests::within("the lock to expire", async {
        while !c.lock_list(Some(resource.into())).await.unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_acquirer_is_denied_with_the_holder_and_time_left() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let first = c.lock_acquire("conv-1".into(), "alice".into(), 60_000, None).await.unwrap();
    assert!(token(&first) > 0);
    match c.lock_acquire("conv-1".into(), "bob".into(), 60_000, None).await.unwrap() {
        LockOutcome::Denied { holder, expires_in_ms, .. } => {
            assert_eq!(holder, "alice");
            assert!(expires_in_ms > 50_000 && expires_in_ms <= 60_000, "{expires_in_ms}");
        }
        other => panic!("bob got {other:?}"),
    }
    // Other resources are independent.
    token(&c.lock_acquire("conv-2".into(), "bob".into(), 60_000, None).await.unwrap());
    // The holder renews without changing the token.
    match c.lock_acquire("conv-1".into(), "alice".into(), 90_000, None).await.unwrap() {
        LockOutcome::Acquired { token: t, renewed, .. } => {
            assert_eq!(t, token(&first));
            assert!(renewed);
        }
        other => panic!("{other:?}"),
    }
    let denied = c.events_list(None, None, Some("lock.deny".into()), None, None, None).await.unwrap();
    assert_eq!(denied.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_ttl_the_next_acquirer_gets_a_larger_token_and_the_old_one_is_stale() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let thread = kd_tests::new_thread(&c, &workspace("locks")).await;
    // Held for a minute: however slow the machine, the write below is made
    // while alice holds the lock.
    let old = token(&c.lock_acquire(thread.clone(), "alice".into(), 60_000, None).await.unwrap());
    // While held, a fenced write with the current token goes through.
    c.message_append(
        thread.clone(),
        "claude".into(),
        "fenced".into(),
        None,
        None,
        None,
        None,
        None,
        None,
        Some(Fence { resource: thread.clone(), token: old }),
    )
    .await
    .unwrap();
    // Alice renews it for a millisecond (same token), and the TTL runs out.
    let renewed = c.lock_acquire(thread.clone(), "alice".into(), 1, None).await.unwrap();
    assert!(matches!(renewed, LockOutcome::Acquired { renewed: true, .. }), "{renewed:?}");
    assert_eq!(token(&renewed), old);
    wait_until_free(&c, &thread).await;
    let new = token(&c.lock_acquire(thread.clone(), "bob".into(), 60_000, None).await.unwrap());
    assert!(new > old, "fencing token did not grow: {old} then {new}");
    // Alice's writes with her stale token are refused.
    let e = ClientError::from(
        c.message_append(
            thread.clone(),
            "claude".into(),
            "late".into(),
            None,
            None,
            None,
            None,
            None,
            None,
            Some(Fence { resource: thread.clone(), token: old }),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code(), Some(ErrorCode::StaleToken), "{e}");
    let ClientError::Rpc { data: Some(data), .. } = &e else { panic!("{e}") };
    assert_eq!(data["current"], new);
    let e = ClientError::from(c.lock_release(thread.clone(), old).await.unwrap_err());
    assert_eq!(e.code(), Some(ErrorCode::StaleToken));
    // The refused write left no message behind.
    assert_eq!(c.thread_messages(thread.clone(), None, None, None, None).await.unwrap().len(), 1);
    // Bob releases with his token; the lock is gone.
    c.lock_release(thread.clone(), new).await.unwrap();
    assert!(c.lock_list(None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_held_by_a_dead_process_is_free() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let first = token(&c.lock_acquire("r".into(), "worker".into(), 3_600_000, Some(child.id())).await.unwrap());
    assert!(matches!(
        c.lock_acquire("r".into(), "other".into(), 1000, None).await.unwrap(),
        LockOutcome::Denied { .. }
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(c.lock_list(None).await.unwrap().is_empty(), "a dead holder's lock is not listed");
    let second = token(&c.lock_acquire("r".into(), "other".into(), 1000, None).await.unwrap());
    assert!(second > first);
    let acquired = c.events_list(None, None, Some("lock.acquire".into()), None, None, None).await.unwrap();
    assert_eq!(acquired.last().unwrap().data["freed"], "holder_dead");
}

#[tokio::test(flavor = "multi_thread")]
async fn locks_survive_a_restart_and_tokens_keep_growing() {
    let mut kdd = Kdd::start();
    let c = kdd.client().await;
    let held = token(&c.lock_acquire("long".into(), "alice".into(), 3_600_000, None).await.unwrap());
    let short = token(&c.lock_acquire("short".into(), "alice".into(), 1, None).await.unwrap());
    drop(c);
    kdd.restart();
    let c = kdd.client().await;
    let locks = c.lock_list(None).await.unwrap();
    assert_eq!(locks.iter().map(|l| (l.resource.as_str(), l.token)).collect::<Vec<_>>(), vec![("long", held)]);
    assert!(matches!(
        c.lock_acquire("long".into(), "bob".into(), 1000, None).await.unwrap(),
        LockOutcome::Denied { .. }
    ));
    // The expired one is free, with a token larger than any before the restart.
    let again = token(&c.lock_acquire("short".into(), "bob".into(), 1000, None).await.unwrap());
    assert!(again > held.max(short));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_lock_parameters_are_refused() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    for (resource, holder, ttl) in [("r", "h", 0), ("", "h", 10), ("r", "", 10), ("r", "h", 100 * 24 * 3_600_000)] {
        let e = ClientError::from(c.lock_acquire(resource.into(), holder.into(), ttl, None).await.unwrap_err());
        assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{resource:?} {holder:?} {ttl}: {e}");
    }
    let e = ClientError::from(c.lock_release("never-held".into(), 1).await.unwrap_err());
    assert_eq!(e.code(), Some(ErrorCode::StaleToken));
}
