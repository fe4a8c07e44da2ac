//! The cost report against what the runs' messages carry: every filter and
//! grouping gives what a scan of the messages gives; a thread's report reads
//! that thread's rows only, and the whole registry's reads one row per
//! thread, member and day; an agent's absurd usage is bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kd_proto::names::KING;
use kd_proto::types::{ContextMode, Cost, CostBy, MessageKind, RunInfo, RunMeta, RunStatus};
use rusqlite::Connection;
use serde_json::{Value, json};

use super::*;
use crate::db::messages::{self, NewMessage};
use crate::db::threads::{self, NewThread};
use crate::db::{Outbox, lifecycle, runs, schema};

const DAY: i64 = 86_400_000;
/// A Monday at 00:00 UTC.
const D0: i64 = 1_767_571_200_000;

struct Registry {
    _dir: tempfile::TempDir,
    conn: Connection,
    runs: u64,
}

impl Registry {
    fn new() -> Registry {
        Registry::at_version(None)
    }

    /// A registry migrated to `version` (the latest when `None`).
    fn at_version(version: Option<usize>) -> Registry {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path).expect("open");
        schema::configure(&conn).expect("configure");
        match version {
            None => {
                schema::migrate(&mut conn, &path).expect("migrate");
            }
            Some(v) => {
                let ms = schema::MIGRATIONS[..v].iter().map(|sql| rusqlite_migration::M::up(sql)).collect();
                rusqlite_migration::Migrations::new(ms).to_latest(&mut conn).expect("migrate");
            }
        }
        Registry { _dir: dir, conn, runs: 0 }
    }

    fn thread(&mut self, workspace: &str) -> String {
        let t = NewThread {
            id: None,
            workspace: workspace.into(),
            branch: None,
            title: None,
            members: vec![],
            lineage: None,
            parent: None,
            set_current: false,
            context: ContextMode::History,
            origin: None,
        };
        threads::create(&self.conn, D0, t, &mut Outbox::default()).expect("thread").id
    }

    /// The King's message opening an exchange; its seq.
    fn king(&mut self, thread: &str, at: i64) -> u64 {
        let m = NewMessage::new(thread, KING, vec!["all".into()], MessageKind::King, "How much?".into());
        messages::append(&self.conn, at, m, &mut Outbox::default()).expect("king").seq
    }

    /// A run ended as `r` says; the seq of its message.
    fn run(&mut self, r: Run) -> u64 {
        self.runs += 1;
        let info = RunInfo {
            id: format!("r{}", self.runs),
            thread: r.thread.into(),
            member: r.member.into(),
            backend: "claude".into(),
            status: RunStatus::Waiting,
            pid: None,
            started_at_ms: r.at,
            chars: 0,
            reply_to: Some(r.king),
            round: Some(r.round),
            exchange: Some(r.king),
            replaces: r.replaces,
            ordinal: self.runs,
            purpose: None,
            approval: None,
        };
        let out = &mut Outbox::default();
        runs::insert(&self.conn, r.at, &info, None, out).expect("run");
        let meta = RunMeta {
            run_id: Some(info.id.clone()),
            backend: Some("claude".into()),
            cost_usd: r.cost_usd,
            usage: r.usage,
            ..RunMeta::default()
        };
        let finish = runs::Finish {
            status: r.status,
            body: format!("answer of {}", r.member),
            error: None,
            meta,
            session: None,
            to: vec![],
        };
        runs::finish(&self.conn, r.at, &info, finish, out).expect("finish").seq
    }

    /// An answer that went well, reporting `cost_usd` and tokens.
    fn answer(&mut self, thread: &str, member: &str, king: u64, at: i64, cost_usd: f64, tokens: u64) -> u64 {
        let usage = json!({"input_tokens": tokens, "output_tokens": tokens / 2});
        self.run(Run { cost_usd: Some(cost_usd), usage: Some(usage), ..Run::new(thread, member, king, at) })
    }

    /// A thread imported with messages naming their backend and model (no
    /// run of this registry wrote them).
    fn imported(&mut self, workspace: &str) -> String {
        let t = self.thread(workspace);
        let meta = RunMeta {
            backend: Some("claude".into()),
            model: Some("opus".into()),
            cost_usd: Some(3.0),
            ..RunMeta::default()
        };
        let m = NewMessage {
            run: Some(meta),
            ..NewMessage::new(&t, "claude", vec![KING.into()], MessageKind::Agent, "imported".into())
        };
        messages::import(&self.conn, &t, vec![(D0 + 5, m)], &mut Outbox::default()).expect("import");
        t
    }

    fn report(&self, f: &Filter, by: CostBy) -> CostReport {
        report(&self.conn, f, by).expect("report")
    }

    /// VM instructions SQLite runs for the report (after it was prepared).
    fn steps(&self, f: &Filter, by: CostBy) -> u64 {
        self.report(f, by);
        let n = Arc::new(AtomicU64::new(0));
        let counted = n.clone();
        self.conn
            .progress_handler(
                1,
                Some(move || {
                    counted.fetch_add(1, Ordering::Relaxed);
                    false
                }),
            )
            .expect("progress handler");
        self.report(f, by);
        self.conn.progress_handler(0, None::<fn() -> bool>).expect("progress handler");
        n.load(Ordering::Relaxed)
    }
}

/// How a run went.
struct Run<'a> {
    thread: &'a str,
    member: &'a str,
    king: u64,
    round: u32,
    at: i64,
    status: RunStatus,
    cost_usd: Option<f64>,
    usage: Option<Value>,
    replaces: Option<u64>,
}

impl<'a> Run<'a> {
    /// A first-round answer reporting nothing.
    fn new(thread: &'a str, member: &'a str, king: u64, at: i64) -> Run<'a> {
        Run { thread, member, king, round: 1, at, status: RunStatus::Done, cost_usd: None, usage: None, replaces: None }
    }
}

/// What a scan of every message gives: the sums of the run's metadata of
/// each message a run of this registry wrote (as `cost.report` was first
/// written).
fn scanned(conn: &Connection, f: &Filter, by: CostBy) -> Vec<Cost> {
    let key = match by {
        CostBy::Member => "m.sender",
        CostBy::Thread => "m.thread_id",
        CostBy::Day => "strftime('%Y-%m-%d', m.created_at / 1000, 'unixepoch')",
        CostBy::Exchange => {
            "(SELECT CAST(r.exchange AS TEXT) FROM runs r WHERE r.id = json_extract(m.run, '$.run_id'))"
        }
        CostBy::Round => {
            "(SELECT r.exchange || '/' || ifnull(r.round, 1) FROM runs r WHERE r.id = json_extract(m.run, '$.run_id'))"
        }
    };
    let sql = format!(
        "SELECT ifnull({key}, '-'), total(json_extract(m.run, '$.cost_usd')),
                coalesce(sum(json_extract(m.run, '$.usage.input_tokens')), 0),
                coalesce(sum(json_extract(m.run, '$.usage.output_tokens')), 0), count(*)
         FROM messages m JOIN threads t ON t.id = m.thread_id
         WHERE json_extract(m.run, '$.run_id') IS NOT NULL
           AND (?1 IS NULL OR m.thread_id = ?1) AND (?2 IS NULL OR t.workspace = ?2)
           AND (?3 IS NULL OR m.created_at >= ?3)
         GROUP BY 1 ORDER BY 1"
    );
    let mut stmt = conn.prepare(&sql).expect("scan");
    stmt.query_map(rusqlite::params![f.thread, f.workspace, f.since_ms], |r| {
        Ok(Cost {
            key: r.get(0)?,
            cost_usd: micro_dollars(r.get(1)?),
            input_tokens: r.get::<_, i64>(2)? as u64,
            output_tokens: r.get::<_, i64>(3)? as u64,
            answers: r.get::<_, i64>(4)? as u64,
        })
    })
    .expect("scan")
    .collect::<Result<_, _>>()
    .expect("scan")
}

fn micro_dollars(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

/// Every filter (thread or not, workspace or not, since or not) with every
/// grouping it takes.
fn filters(thread: &str, workspace: &str, since: i64) -> Vec<(Filter, CostBy)> {
    let mut all = vec![];
    for thread in [None, Some(thread.to_string())] {
        for workspace in [None, Some(workspace.to_string())] {
            for since_ms in [None, Some(since)] {
                for by in [CostBy::Member, CostBy::Thread, CostBy::Day, CostBy::Exchange, CostBy::Round] {
                    if thread.is_none() && matches!(by, CostBy::Exchange | CostBy::Round) {
                        continue;
                    }
                    let f = Filter { thread: thread.clone(), workspace: workspace.clone(), since_ms };
                    all.push((f, by));
                }
            }
        }
    }
    all
}

/// The report equals the scan, row for row, and lists the costliest first.
fn assert_matches_scan(reg: &Registry, f: &Filter, by: CostBy) {
    let report = reg.report(f, by);
    let mut rows = report.rows.clone();
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    let expected = scanned(&reg.conn, f, by);
    assert_eq!(rows, expected, "{f:?} by {by:?}");
    let sum = |get: fn(&Cost) -> u64| expected.iter().map(get).sum::<u64>();
    let total = Cost {
        key: "total".into(),
        cost_usd: report.total.cost_usd,
        input_tokens: sum(|c| c.input_tokens),
        output_tokens: sum(|c| c.output_tokens),
        answers: sum(|c| c.answers),
    };
    assert_eq!(report.total, total, "{f:?} by {by:?}");
    let cost: f64 = expected.iter().map(|c| c.cost_usd).sum();
    assert!((report.total.cost_usd - cost).abs() < 1e-9, "{f:?} by {by:?}: {} vs {cost}", report.total.cost_usd);
    assert!(
        report
            .rows
            .windows(2)
            .all(|w| w[0].cost_usd > w[1].cost_usd || (w[0].cost_usd == w[1].cost_usd && w[0].key < w[1].key)),
        "costliest first: {:?}",
        report.rows
    );
}

/// Two workspaces, three threads (one of them imported), three members,
/// answers over four days in exchanges of one and two rounds, a failure
/// and its retry, a cancelled run.
fn populated() -> (Registry, String, String) {
    let mut reg = Registry::new();
    let a = reg.thread("/w/a");
    let b = reg.thread("/w/a");
    let c = reg.thread("/w/c");
    reg.imported("/w/a");
    for day in 0..4 {
        let at = D0 + day * DAY + 3_600_000;
        for (n, t) in [&a, &b, &c].into_iter().enumerate() {
            let king = reg.king(t, at);
            let n = n as i64;
            reg.answer(t, "claude", king, at + 1, 0.0012, 10 + day as u64);
            reg.answer(t, "codex", king, at + 2 + n * 7_200_000, 0.0, 24_763);
            let failed = reg.run(Run { status: RunStatus::Error, ..Run::new(t, "gemini", king, at + 3) });
            let late = at + 4 + day * 20_000_000;
            reg.run(Run { round: 2, cost_usd: Some(0.0031), ..Run::new(t, "claude", king, late) });
            reg.run(Run { status: RunStatus::Cancelled, cost_usd: Some(0.25), ..Run::new(t, "cursor", king, at + 5) });
            // The failure retried: both count.
            let usage = Some(json!({"input_tokens": 3, "output_tokens": 4}));
            reg.run(Run {
                replaces: Some(failed),
                usage,
                cost_usd: Some(0.01),
                ..Run::new(t, "gemini", king, late + 1)
            });
        }
    }
    (reg, a, "/w/a".into())
}

#[test]
fn every_report_sums_what_the_runs_reported() {
    let (reg, a, ws) = populated();
    for since in [D0 + 2 * DAY + 3_600_002, D0 + DAY, D0 - 1, D0 + 9 * DAY] {
        for (f, by) in filters(&a, &ws, since) {
            assert_matches_scan(&reg, &f, by);
        }
    }
}

#[test]
fn a_deleted_thread_leaves_every_report() {
    let (reg, a, ws) = populated();
    lifecycle::delete(&reg.conn, D0 + 10 * DAY, &a, &mut Outbox::default()).expect("delete");
    let remaining: i64 = reg.conn.query_row("SELECT count(*) FROM threads", [], |r| r.get(0)).expect("count");
    assert_eq!(remaining, 3);
    let everything = reg.report(&Filter::default(), CostBy::Thread);
    assert!(everything.rows.iter().all(|r| r.key != a), "{everything:?}");
    assert_eq!(everything.total.answers, 2 * 4 * 6);
    for (f, by) in filters(&a, &ws, D0 + DAY + 1).into_iter().filter(|(f, _)| f.thread.is_none()) {
        assert_matches_scan(&reg, &f, by);
    }
    assert!(matches!(
        report(&reg.conn, &Filter { thread: Some(a), ..Filter::default() }, CostBy::Member),
        Err(DbError::NotFound(_))
    ));
}

#[test]
fn an_imported_thread_costs_nothing_though_its_messages_name_a_backend() {
    let mut reg = Registry::new();
    let t = reg.imported("/w/i");
    let r = reg.report(&Filter { thread: Some(t), ..Filter::default() }, CostBy::Member);
    assert_eq!((r.rows.len(), r.total.answers, r.total.cost_usd), (0, 0, 0.0));
    assert_eq!(reg.report(&Filter::default(), CostBy::Member).total.answers, 0);
}

#[test]
fn one_threads_cost_reads_that_threads_rows_only_and_the_registrys_one_row_per_thread_member_and_day() {
    let mut reg = Registry::new();
    let small = reg.thread("/w/a");
    let big = reg.thread("/w/a");
    let other = reg.thread("/w/b");
    let today = D0 + 3 * DAY;
    for (t, at) in [(&small, D0), (&small, today + 10), (&small, today + 7_200_000), (&other, today + 5)] {
        let king = reg.king(t, at);
        reg.answer(t, "claude", king, at + 1, 0.0012, 10);
        reg.answer(t, "codex", king, at + 2, 0.002, 20);
    }
    let grow = |reg: &mut Registry, answers: usize| {
        let king = reg.king(&big, D0 + DAY);
        for i in 0..answers {
            let member = if i % 2 == 0 { "claude" } else { "codex" };
            reg.answer(&big, member, king, D0 + DAY + 1 + i as i64, 0.0012, 10);
        }
    };
    grow(&mut reg, 20);
    let cases = filters(&small, "/w/a", today + 3_600_000);
    let before: Vec<u64> = cases.iter().map(|(f, by)| reg.steps(f, *by)).collect();
    // Ten times as many answers, in threads, members and days that already
    // have some.
    grow(&mut reg, 200);
    let after: Vec<u64> = cases.iter().map(|(f, by)| reg.steps(f, *by)).collect();
    for ((case, before), after) in cases.iter().zip(before).zip(after) {
        assert_eq!(before, after, "{case:?}: SQLite steps grew with another thread's answers");
    }
}

#[test]
fn an_agents_absurd_usage_is_bounded_and_every_report_still_answers() {
    let mut reg = Registry::new();
    let t = reg.thread("/w/a");
    let king = reg.king(&t, D0);
    let absurd = [
        (Some(1e308), json!({"input_tokens": 1e30, "output_tokens": u64::MAX})),
        (Some(1e308), json!({"input_tokens": 1.5, "output_tokens": -7})),
        (Some(-5.0), json!({"input_tokens": "12", "output_tokens": {"n": 1}})),
        (None, json!([1, 2])),
    ];
    for (cost, usage) in absurd {
        reg.run(Run { cost_usd: cost, usage: Some(usage), ..Run::new(&t, "claude", king, D0 + 1) });
    }
    reg.answer(&t, "codex", king, D0 + 2, 0.0012, 10);
    for (f, by) in filters(&t, "/w/a", D0) {
        let r = reg.report(&f, by);
        assert!(r.total.cost_usd.is_finite() && r.rows.iter().all(|c| c.cost_usd.is_finite()), "{r:?}");
    }
    let r = reg.report(&Filter::default(), CostBy::Member);
    let claude = r.rows.iter().find(|c| c.key == "claude").expect("claude");
    assert_eq!(claude.answers, 4);
    assert_eq!(claude.cost_usd, 2.0 * MAX_ANSWER_USD);
    assert_eq!((claude.input_tokens, claude.output_tokens), (MAX_ANSWER_TOKENS + 1, MAX_ANSWER_TOKENS));
    let codex = r.rows.iter().find(|c| c.key == "codex").expect("codex");
    assert_eq!((codex.cost_usd, codex.input_tokens, codex.output_tokens, codex.answers), (0.0012, 10, 5, 1));
}

#[test]
fn costs_are_given_in_micro_dollars() {
    let mut reg = Registry::new();
    let t = reg.thread("/w/a");
    for i in 0..5 {
        let king = reg.king(&t, D0 + i);
        reg.answer(&t, "claude", king, D0 + i, 0.0012, 10);
    }
    let r = reg.report(&Filter::default(), CostBy::Day);
    assert_eq!(serde_json::to_value(&r.total).expect("json")["cost_usd"], json!(0.006));
    assert_eq!(serde_json::to_value(&r.rows[0]).expect("json")["cost_usd"], json!(0.006));
    assert_eq!(exchange(&reg.conn, &t, 1).expect("exchange"), 0.0012);
}

#[test]
fn an_exchanges_cost_is_its_runs_answers() {
    let (reg, a, _) = populated();
    let kings: Vec<u64> = reg
        .conn
        .prepare("SELECT seq FROM messages WHERE thread_id = ?1 AND kind = 'king' ORDER BY seq")
        .expect("kings")
        .query_map([&a], |r| r.get::<_, i64>(0).map(|s| s as u64))
        .expect("kings")
        .collect::<Result<_, _>>()
        .expect("kings");
    assert_eq!(kings.len(), 4);
    for king in kings {
        assert_eq!(exchange(&reg.conn, &a, king).expect("exchange"), micro_dollars(0.0012 + 0.0031 + 0.25 + 0.01));
    }
    assert_eq!(exchange(&reg.conn, &a, 999).expect("exchange"), 0.0);
}

mod migration;
