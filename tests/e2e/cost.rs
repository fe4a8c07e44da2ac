//! What answers cost (issue 11, item 7): sums per member, thread, day and
//! exchange over the RPC and `kd cost`, `kd threads --cost`, the `kd show`
//! footer; and `council.budget_usd` stopping an exchange's auto-turns.
//! The ledger they are read from (issue 21) holds what the runs reported:
//! a failure and the retry replacing it, never a deleted or imported thread.
//! The fake claude reports $0.0012 and 10/5 tokens a run, the fake codex
//! 10/5 tokens and no cost, as the real CLIs report them.

use kd_client::ClientError;
use kd_client::prelude::*;
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
    let sent =
        c.council_send(t.into(), "How much?".into(), None, None, None, None, None, rounds, None, None).await.unwrap();
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

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_prints_the_budget_stop() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({"auto_rounds": 2, "budget_usd": 0.001}));
    let kdd = Kdd::start();
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["ask", "How much?"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let line = out.stdout.lines().find(|l| l.starts_with("kd: ")).unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(line.contains("reaches council.budget_usd ($0.0010)"), "{line}");
    assert!(out.stdout.trim_end().ends_with(line), "kd's word comes last: {}", out.stdout);
}

/// What the runs of `messages` reported (cost, input and output tokens,
/// answers), per member: the sums `cost.report` must give.
fn reported(messages: &[Message]) -> Vec<(String, String, u64, u64, u64)> {
    let mut sums = std::collections::BTreeMap::<String, (f64, u64, u64, u64)>::new();
    for m in messages {
        let Some(run) = m.run.as_ref().filter(|r| r.run_id.is_some()) else { continue };
        let tokens = |k: &str| run.usage.as_ref().and_then(|u| u[k].as_u64()).unwrap_or(0);
        let s = sums.entry(m.from.clone()).or_default();
        *s = (s.0 + run.cost_usd.unwrap_or(0.0), s.1 + tokens("input_tokens"), s.2 + tokens("output_tokens"), s.3 + 1);
    }
    sums.into_iter().map(|(k, (c, i, o, n))| (k, format!("{c:.6}"), i, o, n)).collect()
}

fn by_member(report: &CostReport) -> Vec<(String, String, u64, u64, u64)> {
    let mut rows: Vec<_> = report
        .rows
        .iter()
        .map(|r| (r.key.clone(), format!("{:.6}", r.cost_usd), r.input_tokens, r.output_tokens, r.answers))
        .collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_cost_json_gives_micro_dollars() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    // Five claude answers of $0.0012: summed as floats, $0.005999999999999999.
    ask(&c, &t, Some(4)).await;
    let mut k = kdd.kd();
    k.args(["cost", "--json"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["rows"][0]["key"], "claude", "{}", out.stdout);
    assert_eq!(report["rows"][0]["answers"], 5, "{}", out.stdout);
    assert!(out.stdout.contains("\"cost_usd\": 0.006,"), "{}", out.stdout);
    assert!(!out.stdout.contains("0.0059999"), "{}", out.stdout);
    assert_eq!(report["total"]["cost_usd"], serde_json::json!(0.006));
}

/// `YYYY-MM-DD` of a Unix time in ms, UTC.
fn utc_day(ms: i64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = ms.div_euclid(86_400_000) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_cost_by_day_sums_each_utc_day_and_since_leaves_out_the_days_before() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t1 = kd_tests::new_thread(&c, &ws.path()).await;
    let t2 = kd_tests::new_thread(&c, &ws.path()).await;
    ask(&c, &t1, Some(0)).await;
    ask(&c, &t2, Some(1)).await;
    // What each day's answers reported (one day, unless the test ran over
    // midnight UTC).
    let mut days = std::collections::BTreeMap::<String, (f64, u64)>::new();
    for t in [&t1, &t2] {
        for m in c.thread_messages(t.clone(), None, None, None, None).await.unwrap().iter() {
            if let Some(run) = &m.run {
                let d = days.entry(utc_day(m.created_at_ms)).or_default();
                *d = (d.0 + run.cost_usd.unwrap_or(0.0), d.1 + 1);
            }
        }
    }
    let mut k = kdd.kd();
    k.args(["cost", "--by", "day"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let lines: Vec<Vec<&str>> = out.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["DAY", "COST", "IN", "TOKENS", "OUT", "TOKENS", "ANSWERS"], "{}", out.stdout);
    let mut shown: Vec<(String, String, String)> =
        lines[1..lines.len() - 1].iter().map(|l| (l[0].to_string(), l[1].to_string(), l[4].to_string())).collect();
    shown.sort();
    let expected: Vec<(String, String, String)> =
        days.iter().map(|(d, (cost, n))| (d.clone(), format!("${cost:.4}"), n.to_string())).collect();
    assert_eq!(shown, expected, "{}", out.stdout);
    assert_eq!(lines.last().unwrap()[..2], ["total", "$0.0036"], "{}", out.stdout);
    assert_eq!(lines.last().unwrap()[4], "6", "{}", out.stdout);
    // Since a day to come: nothing; since a day back: everything.
    let mut k = kdd.kd();
    k.args(["cost", "--by", "day", "--since", "2999-01-01"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 2, "{}", out.stdout);
    assert_eq!(
        out.stdout.lines().last().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["total", "$0.0000", "0", "0", "0"]
    );
    let mut k = kdd.kd();
    k.args(["cost", "--by", "day", "--since", "2d", "--json"]);
    let out = run(k).await;
    let report: CostReport = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report.by, CostBy::Day);
    assert_eq!((report.rows.len(), report.total.answers), (days.len(), 6), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_answer_and_the_retry_that_replaces_it_both_count() {
    let ws = Workspace::new(&[]);
    let failing = |fail: bool| {
        let env: &[(&str, &str)] = if fail { &[("FAKE_ERROR", "overloaded")] } else { &[] };
        ws.write_config(&serde_json::json!({
            "council": {"members": ["claude", "codex"]},
            "agents": {
                "claude": kd_tests::fake("claude", "claude", env),
                "codex": kd_tests::fake("codex", "codex", &[])
            },
        }));
    };
    failing(true);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    ask(&c, &t, Some(0)).await;
    failing(false);
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let retried = c.council_retry(t.clone(), None, None, None).await.unwrap();
    assert_eq!(retried.len(), 1);
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "claude"))
    })
    .await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let retry = messages.iter().find(|m| m.replaces.is_some()).unwrap();
    assert_eq!((retry.from.as_str(), retry.kind), ("claude", MessageKind::Agent));
    let expected = reported(&messages);
    assert_eq!(expected.iter().find(|r| r.0 == "claude").unwrap().4, 2, "{expected:?}");
    let report = c.cost_report(Some(t.clone()), None, None, Some(CostBy::Member)).await.unwrap();
    assert_eq!(by_member(&report), expected);
    let everything = c.cost_report(None, None, None, Some(CostBy::Member)).await.unwrap();
    assert_eq!(by_member(&everything), expected);
    assert_eq!(everything.total.answers, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_thread_leaves_the_cost_and_an_imported_one_never_enters_it() {
    let ws = Workspace::new(&[]);
    config(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let kept = kd_tests::new_thread(&c, &ws.path()).await;
    let gone = kd_tests::new_thread(&c, &ws.path()).await;
    ask(&c, &kept, Some(0)).await;
    ask(&c, &gone, Some(1)).await;
    // Imported answers carry their backend and model, and were no run here.
    let imported = ImportedMessage {
        from: "claude".into(),
        to: vec![],
        kind: None,
        body: "From elsewhere.".into(),
        created_at_ms: 1_700_000_000_000,
        refs: vec![],
        backend: Some("claude".into()),
        model: Some("opus".into()),
    };
    let i = c.thread_import(ws.path(), None, None, None, None, None, vec![imported], None).await.unwrap();
    let stored = c.thread_messages(i.id.clone(), None, None, None, None).await.unwrap();
    assert_eq!(stored[0].run.as_ref().and_then(|r| r.backend.as_deref()), Some("claude"));
    let of_import = c.cost_report(Some(i.id.clone()), None, None, None).await.unwrap();
    assert_eq!((of_import.rows.len(), of_import.total.answers), (0, 0));
    let before = c.cost_report(None, Some(ws.path()), None, Some(CostBy::Thread)).await.unwrap();
    assert_eq!(before.rows.len(), 2);
    assert_eq!(before.total.answers, 2 + 4);

    c.thread_delete(gone.clone(), None).await.unwrap();
    let kept_messages = c.thread_messages(kept.clone(), None, None, None, None).await.unwrap();
    let everything = c.cost_report(None, None, None, Some(CostBy::Member)).await.unwrap();
    assert_eq!(by_member(&everything), reported(&kept_messages));
    let by_thread = c.cost_report(None, Some(ws.path()), None, Some(CostBy::Thread)).await.unwrap();
    let keys: Vec<&str> = by_thread.rows.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, [kept.as_str()]);
    assert_eq!(format!("{:.4}", by_thread.total.cost_usd), "0.0012");
    let e = ClientError::from(c.cost_report(Some(gone), None, None, None).await.unwrap_err());
    assert_eq!(e.code(), Some(ErrorCode::NotFound), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_budget_is_checked_before_a_hand_off() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"], "budget_usd": 0.001},
        "agents": {
            "claude": kd_tests::fake("claude", "claude", &[("FAKE_TEXT", "Parser done.\n@codex please review it."), ("FAKE_RECORD", &record)]),
            "codex": kd_tests::fake("codex", "codex", &[("FAKE_RECORD", &record)])
        },
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent =
        c.council_send(t.clone(), "@claude write the parser".into(), None, None, None, None, None, None, None, None);
    let king = sent.await.unwrap().message.seq;
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != RoundState::Running))
    })
    .await;
    // claude's answer ($0.0012) spent the budget: its hand-off is not delivered.
    assert_eq!(kd_tests::records(&record).len(), 1, "codex was not asked");
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let answer = messages.iter().find(|m| m.from == "claude").unwrap();
    assert_eq!(answer.to, ["codex"], "the answer did hand off");
    let notice = messages.iter().find(|m| m.kind == MessageKind::System).expect("kd's notice");
    assert!(notice.body.contains("council.budget_usd ($0.0010)"), "{}", notice.body);
    assert!(messages.iter().all(|m| m.from != "codex"));
    let events = c.events_list(Some(t.clone()), None, Some("exchange.budget".into()), None, None, None).await.unwrap();
    assert_eq!(events.len(), 1);
}
