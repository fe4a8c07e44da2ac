//! What `kd work` costs before any member runs (issue 23): `work.start`'s
//! time per member — the worktree made at the King's HEAD, recorded, the
//! run launched — on a repository of 10,000 files, beside `git worktree
//! add` alone on the same repository. Members are instant fakes; no
//! `work.setup` command.

use std::path::Path;
use std::time::Instant;

use kd_client::prelude::*;
use serde_json::json;

use super::{percentile as pct, row};
use crate::{Kdd, Workspace, fake, git};

/// A repository of `files` small files in 100 directories, one commit.
fn repository(files: usize, members: &[String]) -> Workspace {
    let ws = Workspace::new(&[]);
    let texts: Vec<(String, String)> = (0..files)
        .map(|i| (format!("src/d{:02}/f{i}.rs", i % 100), format!("// file {i}\nfn f{i}() {{}}\n")))
        .collect();
    let files: Vec<(&str, &str)> = texts.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    ws.git_init(&files, &[]);
    let agents: serde_json::Map<String, serde_json::Value> =
        members.iter().map(|m| (m.clone(), fake("claude", m, &[("FAKE_TEXT", "ok")]))).collect();
    ws.write_config(&json!({"council": {"members": members}, "agents": agents}));
    ws
}

/// `git worktree add` alone once, at a fresh path of `scratch`, in ms.
fn git_alone(ws: &Workspace, scratch: &Path, i: usize) -> f64 {
    let path = scratch.join(format!("w{i}"));
    let start = Instant::now();
    git(ws.dir.path(), &["worktree", "add", "--quiet", "-b", &format!("bench/{i}"), path.to_str().unwrap(), "HEAD"]);
    super::ms(start.elapsed())
}

/// `work.start` for `members` once, in ms per member: from the call to
/// its answer (the worktrees made and recorded, the task written, the
/// runs launched). Then waits until the runs ended and kd committed their
/// (empty) work, so that no start waits on the repository behind them.
async fn work_start(c: &kd_client::Client, ws: &Workspace, members: usize) -> f64 {
    let start = Instant::now();
    let started = c.work_start(ws.path(), "Bench task".into(), None, None, None, None).await.expect("work.start");
    let took = super::ms(start.elapsed()) / members as f64;
    assert_eq!(started.worktrees.len(), members);
    loop {
        let trees = c.work_list(None, Some(started.thread.clone())).await.expect("work.list");
        if trees.iter().all(|w| w.state != kd_proto::work::WorkState::Working) {
            return took;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The rows: per member, p50 and p90, beside git alone.
pub async fn start_overhead(files: usize, n: usize) {
    for members in [1usize, 3] {
        let names: Vec<String> = (1..=members).map(|i| format!("m{i}")).collect();
        let ws = repository(files, &names);
        let kdd = Kdd::start();
        let c = kdd.client().await;
        let scratch = tempfile::tempdir().expect("tempdir");
        // Interleaved, so that both see the disk as it is then (every
        // worktree writes all the files).
        let (mut alone, mut work) = (Vec::new(), Vec::new());
        for i in 0..n {
            alone.push(git_alone(&ws, scratch.path(), i));
            work.push(work_start(&c, &ws, members).await);
        }
        alone.sort_by(|a, b| a.total_cmp(b));
        work.sort_by(|a, b| a.total_cmp(b));
        let (a50, w50) = (pct(&alone, 0.5), pct(&work, 0.5));
        row(
            &format!("{files} files: git worktree add alone, p50 / p90"),
            format!("{a50:.1} / {:.1} ms", pct(&alone, 0.9)),
            "",
        );
        row(
            &format!("  work.start, {members} member(s): per member p50 / p90"),
            format!("{w50:.1} / {:.1} ms", pct(&work, 0.9)),
            &format!("{:.2}× git alone", w50 / a50),
        );
    }
}
