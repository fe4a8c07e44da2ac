//! What the check in a worktree adds to a work run (issue 34): from the
//! work's commit — the `work` event saying the run's work is done, its
//! check running — to the check's result, with a trivial check
//! (`["true"]`): the confinement (a Landlock ruleset), the spawn, the
//! wait and the registry write, beside the check's own duration as kd
//! measured it. One member, an instant fake; a small repository.

use std::time::Instant;

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use serde_json::json;

use super::{percentile as pct, row};
use crate::{Kdd, Workspace, fake};

/// One task; (from the commit to the result, the check's own), in ms.
async fn once(kdd: &Kdd, ws: &Workspace) -> (f64, f64) {
    let c = kdd.client().await;
    let started = c.work_start(ws.path(), "Bench task".into(), None, None, None, None).await.expect("work.start");
    let mut sub = c.thread_subscribe(started.thread.clone(), Some(started.seq), None).await.expect("subscribe");
    let mut committed = None;
    loop {
        let Some(Ok(ThreadEvent::Work { worktree })) = sub.next().await else { continue };
        if committed.is_none() && worktree.checking() && worktree.state != kd_proto::work::WorkState::Working {
            committed = Some(Instant::now());
        }
        if let (Some(at), Some(check)) = (committed, worktree.check.as_ref().filter(|_| !worktree.checking())) {
            return (super::ms(at.elapsed()), check.duration_ms as f64);
        }
    }
}

/// The rows: p50 / p90 of the time a check adds after the commit.
pub async fn check_cost(n: usize) {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let agent = fake("claude", "m1", &[("FAKE_RUN", "if test -f .git; then date +%N > b.txt; fi")]);
    ws.write_config(&json!({"council": {"members": ["m1"]}, "agents": {"m1": agent}, "work": {"check": ["true"]}}));
    let kdd = Kdd::start();
    let (mut added, mut own) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let (a, o) = once(&kdd, &ws).await;
        added.push(a);
        own.push(o);
    }
    added.sort_by(|a, b| a.total_cmp(b));
    own.sort_by(|a, b| a.total_cmp(b));
    row(
        "work.check [\"true\"]: commit → result, p50 / p90",
        format!("{:.1} / {:.1} ms", pct(&added, 0.5), pct(&added, 0.9)),
        "",
    );
    row("  of which the check itself (confined spawn → exit), p50", format!("{:.1} ms", pct(&own, 0.5)), "");
}
