//! What kd's MCP server adds to a run's start, per backend (issue 22): the
//! time from `council.send` to the run's end for an instant answer, with
//! the server off (`council.mcp: false`) and on, where the fake starts it as
//! its CLI does — `initialize` and `tools/list` before it answers
//! (`FAKE_MCP_START`; a codex thread, an ACP session and every per-run CLI
//! start one per run). The server is the `kd` built beside kdd (`kd mcp`),
//! or with `KD_BENCH_MCP=stand-in` the fake's stand-in, for a tree without
//! `kd mcp`.

use std::time::Instant;

use kd_client::prelude::*;
use kd_proto::types::ThreadEvent;
use serde_json::{Value, json};

use super::{percentile as pct, row};
use crate::{Beside, Kdd, Workspace, fake, records};

/// A backend as a member of it is configured: its label, backend, agent
/// keys and `FAKE_*` environment.
type Backend = (&'static str, &'static str, Value, Vec<(&'static str, &'static str)>);

fn backends() -> Vec<Backend> {
    vec![
        ("claude", "claude", json!({}), vec![]),
        ("codex exec", "codex", json!({"transport": "exec"}), vec![]),
        ("codex app-server", "codex", json!({}), vec![]),
        ("acp, as claude-code-acp", "acp", json!({"args": ["acp"]}), vec![]),
        ("acp, as codex-acp", "acp", json!({"args": ["acp"]}), vec![("FAKE_ACP", "codex-acp")]),
        ("gemini", "gemini", json!({}), vec![]),
    ]
}

/// Send → run's end, `n` times after two to warm up, in ms (sorted), and
/// how many of the runs' servers answered `tools/list`.
async fn times(
    kdd: &Kdd,
    backend: &str,
    agent: &Value,
    env: &[(&str, &str)],
    mcp: bool,
    n: usize,
) -> (Vec<f64>, usize) {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let mut vars = vec![("FAKE_RECORD", record.as_str()), ("FAKE_DELTAS", "1")];
    vars.extend_from_slice(env);
    if mcp {
        vars.push(("FAKE_MCP_START", "1"));
    }
    let mut a = fake(backend, "m", &vars);
    if let (Some(a), Some(extra)) = (a.as_object_mut(), agent.as_object()) {
        a.extend(extra.clone());
    }
    ws.write_config(&json!({"council": {"members": ["m"], "mcp": mcp}, "agents": {"m": a}}));
    let c = kdd.client().await;
    let mut times = Vec::new();
    for i in 0..n + 2 {
        let t = crate::new_thread(&c, &ws.path()).await;
        let mut sub = c.thread_subscribe(t.clone(), None, None).await.expect("subscribe");
        let start = Instant::now();
        c.council_send(t, "go".into(), None, None, None, None, None, Some(0), None, None).await.expect("send");
        while let Some(Ok(e)) = sub.next().await {
            if matches!(
                e,
                ThreadEvent::RunFinished { .. } | ThreadEvent::RunError { .. } | ThreadEvent::RunCancelled { .. }
            ) {
                break;
            }
        }
        if i >= 2 {
            times.push(super::ms(start.elapsed()));
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let started = records(&record).iter().filter(|r| r["mcp"]["started"].is_array()).count();
    (times, started)
}

/// The added start time per run, every backend, `n` runs each way.
pub async fn start_times(n: usize) {
    let stand_in = std::env::var("KD_BENCH_MCP").is_ok_and(|v| v == "stand-in");
    let kdd = if stand_in { Kdd::start_beside(Beside::StandIn, &[]) } else { Kdd::start() };
    row("kd's MCP server", kdd.kd_beside().display().to_string(), if stand_in { "stand-in" } else { "kd mcp" });
    for (label, backend, agent, env) in backends() {
        let (off, _) = times(&kdd, backend, &agent, &env, false, n).await;
        let (on, started) = times(&kdd, backend, &agent, &env, true, n).await;
        let (off50, on50) = (pct(&off, 0.5), pct(&on, 0.5));
        row(
            &format!("{label}: send → answer, MCP off / on, p50"),
            format!("{off50:.1} / {on50:.1} ms"),
            &format!("+{:.1} ms", on50 - off50),
        );
        row(
            "  p90, off / on; servers listing tools",
            format!("{:.1} / {:.1} ms", pct(&off, 0.9), pct(&on, 0.9)),
            &format!("{started} of {}", n + 2),
        );
    }
}
