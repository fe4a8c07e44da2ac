//! What an agent finds in its environment of kd's own: its run's marker
//! and the daemon's socket, never a marker or a capability kdd itself
//! inherited (a kdd started from an agent's shell carries that agent's).

use kd_tests::{Kdd, Workspace, collect_until, ended, send_one_round as send};

#[tokio::test(flavor = "multi_thread")]
async fn kd_markers_come_from_kd_not_from_kdds_own_environment() {
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_RUN", "echo run=${KD_RUN-none} peer=${KD_PEER-none}"), ("FAKE_TEXT", "{run}")],
    )]);
    let kdd = Kdd::start_env(&[], &[("KD_RUN", "r-stale"), ("KD_PEER", "1.1@/stale/kdd.sock")]);
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Env?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    let answer = kd_tests::last_message(&c, &t).await;
    let run = answer.run.as_ref().and_then(|r| r.run_id.clone()).unwrap_or_default();
    assert_eq!(answer.body, format!("run={run} peer=none"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_capability_kdd_inherited_never_reaches_an_agent() {
    let ws = Workspace::new(&[(
        "codex",
        "codex",
        &[("FAKE_RUN", "echo token=${KD_RUN_TOKEN-none}"), ("FAKE_TEXT", "{run}")],
    )]);
    let kdd = Kdd::start_env(&[], &[("KD_RUN_TOKEN", "kdcap_stale")]);
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    send(&c, &t, "Env?").await;
    collect_until(&mut sub, |e| ended(e) == 1).await;
    assert_eq!(kd_tests::last_message(&c, &t).await.body, "token=none", "an app-server run is given none of kdd's");
}
