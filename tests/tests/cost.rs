//! What answers cost (issue 11, item 7): sums per member, thread, day and
//! exchange over the RPC and `kd cost`, `kd threads --cost`, the `kd show`
//! footer; and `council.budget_usd` stopping an exchange's auto-turns.
//! The fake claude reports $0.0012 and 10/5 tokens a run, the fake codex
//! 10/5 tokens and no cost, as the real CLIs report them.

use kd_client::{ClientError, KdApiClient};
use kd_proto::ErrorCode;
use kd_proto::types::*;
use kd_tests::{Kdd, Workspace, collect_until, run};

fn config(ws: &Workspace, council: serde_json::Value) {
    let mut council = council;
    council["members"] = serde_json::json!(["claude", "codex"]);
    ws.write_config(&serde_json::json!({
        "council": council,
        "agents": {
            "claude": kd_tests::fake("claude", "claude", &[]),
            "codex": kd_tests::fake("codex", "codex", &[])
        },
    }));
}

async fn ask(c: &kd_client::Client, t: &str, rounds: Option<u32>) {
    let mut sub = c.thread_subscribe(t.into(), None, None).await.unwrap();
    let sent = c.council_send(t.into(), "How much?".into(), None, None, None, None, None, rounds, None).await.unwrap();
    let king = sent.message.seq;
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != RoundState::Running))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn costs_sum_per_member_thread_and_exchange() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t1 = kd_tests::new_thread(&c, &ws.path()).await;
    let t2 = kd_tests::new_thread(&c, &ws.path()).await;
    ask(&c, &t1, Some(0)).await;
    ask(&c, &t1, Some(0)).await;
    ask(&c, &t2, Some(0)).await;

    let by_member = c.cost_report(None, None, None, Some(CostBy::Member)).await.unwrap();
    let rows: Vec<(&str, String, u64, u64, u64)> = by_member
        .rows
        .iter()
        .map(|r| (r.key.as_str(), format!("{:.4}", r.cost_usd), r.input_tokens, r.output_tokens, r.answers))
        .collect();
    assert_eq!(rows, [("claude", "0.0036".into(), 30, 15, 3), ("codex", "0.0000".into(), 30, 15, 3)]);
    assert_eq!((format!("{:.4}", by_member.total.cost_usd), by_member.total.answers), ("0.0036".into(), 6));
    let by_thread = c.cost_report(None, Some(ws.path()), None, Some(CostBy::Thread)).await.unwrap();
    let threads: Vec<(&str, String)> =
        by_thread.rows.iter().map(|r| (r.key.as_str(), format!("{:.4}", r.cost_usd))).collect();
    assert_eq!(threads, [(t1.as_str(), "0.0024".into()), (t2.as_str(), "0.0012".into())]);
    let by_exchange = c.cost_report(Some(t1.clone()), None, None, Some(CostBy::Exchange)).await.unwrap();
    let exchanges: Vec<(&str, String)> =
        by_exchange.rows.iter().map(|r| (r.key.as_str(), format!("{:.4}", r.cost_usd))).collect();
    assert_eq!(exchanges, [("1", "0.0012".into()), ("4", "0.0012".into())]);
    let by_round = c.cost_report(Some(t1.clone()), None, None, Some(CostBy::Round)).await.unwrap();
    let rounds: Vec<(&str, u64)> = by_round.rows.iter().map(|r| (r.key.as_str(), r.answers)).collect();
    assert_eq!(rounds, [("1/1", 2), ("4/1", 2)]);
    let later = c.cost_report(None, None, Some(i64::MAX / 2), None).await.unwrap();
    assert_eq!(later.total.answers, 0, "since filters");
    let e = ClientError::from(c.cost_report(None, None, None, Some(CostBy::Exchange)).await.unwrap_err());
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{e}");

    let mut k = kdd.kd();
    k.args(["cost", "--by", "member"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let claude = out.stdout.lines().find(|l| l.starts_with("claude")).unwrap();
    assert_eq!(claude.split_whitespace().collect::<Vec<_>>(), ["claude", "$0.0036", "30", "15", "3"]);
    assert!(out.stdout.lines().last().unwrap().starts_with("total"), "{}", out.stdout);
    // By exchange, kd cost takes the current thread when none is named.
    c.thread_set_current(ws.path(), None, t1.clone()).await.unwrap();
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["cost", "--by", "exchange"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.starts_with("EXCHANGE") && out.stdout.contains("\n4 "), "{}", out.stdout);
    let mut k = kdd.kd();
    k.args(["show", &t1]);
    let out = run(k).await;
    assert!(
        out.stdout.contains("cost $0.0024 · 40 in / 20 out tokens · claude $0.0024, codex $0.0000"),
        "{}",
        out.stdout
    );
    let mut k = kdd.kd();
    k.args(["threads", "--cost"]);
    let out = run(k).await;
    let row = out.stdout.lines().find(|l| l.contains(&t1)).unwrap();
    assert!(row.contains("$0.0024"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_stops_the_pending_auto_turns_with_a_notice() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({"auto_rounds": 2, "budget_usd": 0.001}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    ask(&c, &t, None).await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let answers = messages.iter().filter(|m| m.kind == MessageKind::Agent).count();
    assert_eq!(answers, 2, "the first round only: {messages:#?}");
    let notice = messages.iter().find(|m| m.kind == MessageKind::System).unwrap();
    assert!(notice.body.contains("$0.0012") && notice.body.contains("council.budget_usd ($0.0010)"), "{}", notice.body);
    let events = c.events_list(Some(t.clone()), None, Some("exchange.budget".into()), None, None, None).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].data["budget_usd"], 0.001);
    // Without a budget the same exchange takes its two auto-rounds.
    config(&ws, serde_json::json!({"auto_rounds": 2}));
    ask(&c, &t, None).await;
    let after = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!(after.iter().filter(|m| m.kind == MessageKind::Agent).count(), 2 + 2 + 4);
}
