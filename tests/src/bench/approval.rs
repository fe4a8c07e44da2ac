//! An approval's round trip on the fakes (SPEC §9, issue 33): codex through
//! app-server opened `untrusted` asks a command 50 times in one turn; a
//! King's client subscribed to `approval.subscribe` approves each as it
//! comes. Measured: the agent's request (the fake's stamp when it wrote
//! it) to the King's client (the subscription item), and the King's
//! `approval.decide` to the agent's answer (the fake's stamp when it read
//! it), p50 / p99 — clocks of one machine (µs since the epoch).

use std::time::{SystemTime, UNIX_EPOCH};

use kd_client::prelude::*;
use kd_proto::approval::{ApprovalEvent, Decision};

use super::{check, percentile as pct, row};
use crate::{Kdd, Workspace};

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// The round trips of `n` commands asked in one codex turn.
pub async fn round_trip(n: usize) {
    let ws = Workspace::new(&[]);
    let record = ws.file("codex.jsonl");
    let steps: Vec<String> = (0..n).map(|i| format!("C:true {i}")).collect();
    let steps = steps.join(" ;; ");
    let mut codex = crate::fake("codex", "codex", &[("FAKE_STEPS", &steps), ("FAKE_RECORD", &record)]);
    codex["sandbox"] = "workspace-write".into();
    codex["approval"] = "untrusted".into();
    ws.write_config(&serde_json::json!({"council": {"members": ["codex"]}, "agents": {"codex": codex}}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let mut king = c.approval_subscribe().await.expect("approval.subscribe");
    let t = crate::thread_in(&c, &ws, None).await;
    c.council_send(t.clone(), "go".into(), None, None, None, None, None, Some(0), None, None).await.expect("send");
    // (seen by the King, decided) per approval, in the order asked.
    let mut king_side = Vec::new();
    while king_side.len() < n {
        match king.next().await {
            Some(Ok(ApprovalEvent::Requested { approval })) if approval.state.is_pending() => {
                let seen = now_us();
                let decided = now_us();
                c.approval_decide(approval.id.clone(), Decision::Approve, None, None).await.expect("decide");
                king_side.push((seen, decided));
            }
            Some(Ok(_)) => {}
            _ => break,
        }
    }
    crate::settled(&kdd.db, &t).await;
    let recs = crate::records(&record);
    let stamp = |key: &str| -> Vec<u64> {
        recs.iter().filter(|r| r.get(key).is_some()).filter_map(|r| r["us"].as_u64()).collect()
    };
    let (asked, answered) = (stamp("asked"), stamp("answered"));
    let mut to_king: Vec<f64> =
        asked.iter().zip(&king_side).map(|(a, (seen, _))| seen.saturating_sub(*a) as f64 / 1000.0).collect();
    let mut to_agent: Vec<f64> =
        answered.iter().zip(&king_side).map(|(got, (_, d))| got.saturating_sub(*d) as f64 / 1000.0).collect();
    row(
        "approvals asked / seen by the King / answered",
        format!("{} / {} / {}", asked.len(), king_side.len(), answered.len()),
        &n.to_string(),
    );
    if to_king.is_empty() || to_agent.is_empty() {
        row("approval round trip", "no samples".into(), "");
        return;
    }
    to_king.sort_by(|a, b| a.total_cmp(b));
    to_agent.sort_by(|a, b| a.total_cmp(b));
    let (k50, k99) = (pct(&to_king, 0.5), pct(&to_king, 0.99));
    let (a50, a99) = (pct(&to_agent, 0.5), pct(&to_agent, 0.99));
    check(
        "approval: agent's request → King's client, p50 / p99",
        format!("{k50:.2} / {k99:.2} ms"),
        "< 5 ms",
        k50 < 5.0 && k99 < 5.0,
    );
    check(
        "approval: King's decision → agent's answer, p50 / p99",
        format!("{a50:.2} / {a99:.2} ms"),
        "< 5 ms",
        a50 < 5.0 && a99 < 5.0,
    );
}
