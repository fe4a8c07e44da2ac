//! Migration 0010 on a registry kd wrote before the ledger: the answers
//! already written fill it, bounded as a new answer is.

use rusqlite::Connection;
use serde_json::{Value, json};

use super::*;

/// A registry as kd wrote it before the ledger (schema 9), by hand: two
/// threads, their runs, and `messages` (thread, seq, sender, time, run).
fn before_the_ledger(messages: &[(&str, i64, &str, i64, Option<Value>)]) -> Registry {
    let reg = Registry::at_version(Some(9));
    reg.conn
        .execute_batch(&format!(
            "INSERT INTO threads (id, workspace, created_at, last_activity_at) VALUES ('a', '/w/a', {D0}, {D0}),
                 ('b', '/w/b', {D0}, {D0});
             INSERT INTO runs (id, thread_id, member, backend, status, started_at, exchange, round) VALUES
                 ('r1', 'a', 'claude', 'claude', 'done', {D0}, 1, 1), ('r2', 'a', 'codex', 'codex', 'done', {D0}, 1, 2),
                 ('r3', 'b', 'claude', 'claude', 'error', {D0}, 1, NULL);"
        ))
        .expect("schema 9 rows");
    for (t, seq, from, at, run) in messages {
        let kind = if *from == "king" { "king" } else { "agent" };
        reg.conn
            .execute(
                "INSERT INTO messages (thread_id, seq, sender, kind, body, created_at, run) VALUES (?1, ?2, ?3, ?4, 'x', ?5, ?6)",
                rusqlite::params![t, seq, from, kind, at, run.as_ref().map(Value::to_string)],
            )
            .expect("schema 9 message");
    }
    reg.conn
        .execute_batch(
            "UPDATE threads SET last_seq = (SELECT coalesce(max(seq), 0) FROM messages WHERE thread_id = threads.id)",
        )
        .expect("last seq");
    let path = reg._dir.path().join("kd.sqlite3");
    let Registry { _dir, conn, runs } = reg;
    drop(conn);
    let mut conn = Connection::open(&path).expect("open");
    schema::configure(&conn).expect("configure");
    schema::migrate(&mut conn, &path).expect("migrate");
    Registry { _dir, conn, runs }
}

#[test]
fn the_migration_fills_the_ledger_with_the_answers_already_written() {
    let mut reg = before_the_ledger(&[
        ("a", 1, "king", D0, None),
        (
            "a",
            2,
            "claude",
            D0 + 1,
            Some(json!({"run_id": "r1", "cost_usd": 0.0012, "usage": {"input_tokens": 10, "output_tokens": 5}})),
        ),
        (
            "a",
            3,
            "codex",
            D0 + DAY + 1,
            Some(json!({"run_id": "r2", "usage": {"input_tokens": 24763, "output_tokens": 122}})),
        ),
        ("a", 4, "claude", D0 + DAY + 2, Some(json!({"backend": "claude", "model": "opus", "cost_usd": 9.0}))),
        ("b", 1, "king", D0, None),
        ("b", 2, "claude", D0 + 2 * DAY, Some(json!({"run_id": "r3", "cost_usd": 0.0, "exit_status": 1}))),
        // A run whose row is gone.
        ("b", 3, "claude", D0 + 2 * DAY + 5, Some(json!({"run_id": "gone", "cost_usd": 0.5}))),
    ]);
    let r = reg.report(&Filter::default(), CostBy::Member);
    let rows: Vec<(&str, f64, u64, u64, u64)> =
        r.rows.iter().map(|c| (c.key.as_str(), c.cost_usd, c.input_tokens, c.output_tokens, c.answers)).collect();
    assert_eq!(rows, [("claude", 0.5012, 10, 5, 3), ("codex", 0.0, 24763, 122, 1)]);
    for since in [D0 + DAY, D0 + 2 * DAY + 1] {
        for thread in ["a", "b"] {
            for (f, by) in filters(thread, "/w/a", since) {
                assert_matches_scan(&reg, &f, by);
            }
        }
    }
    // The answers written after it are counted beside them.
    reg.runs = 100;
    reg.answer("a", "claude", 1, D0 + 3 * DAY, 0.0012, 10);
    let r = reg.report(&Filter { thread: Some("a".into()), ..Filter::default() }, CostBy::Round);
    let rounds: Vec<(&str, u64)> = r.rows.iter().map(|c| (c.key.as_str(), c.answers)).collect();
    assert_eq!(rounds, [("1/1", 2), ("1/2", 1)]);
    assert_eq!(reg.report(&Filter::default(), CostBy::Member).total.answers, 5);
}

#[test]
fn the_migration_bounds_an_agents_absurd_usage_as_a_new_answer_is_bounded() {
    let reg = before_the_ledger(&[
        ("a", 1, "king", D0, None),
        (
            "a",
            2,
            "claude",
            D0 + 1,
            Some(
                json!({"run_id": "r1", "cost_usd": 1e308, "usage": {"input_tokens": 1e30, "output_tokens": u64::MAX}}),
            ),
        ),
        (
            "a",
            3,
            "claude",
            D0 + 2,
            Some(json!({"run_id": "r1", "cost_usd": 1e308, "usage": {"input_tokens": 1.5, "output_tokens": -7}})),
        ),
        (
            "a",
            4,
            "claude",
            D0 + 3,
            Some(json!({"run_id": "r1", "cost_usd": -5, "usage": {"input_tokens": "12", "output_tokens": {"n": 1}}})),
        ),
        ("a", 5, "claude", D0 + 4, Some(json!({"run_id": "r1", "usage": [1, 2]}))),
    ]);
    let r = reg.report(&Filter::default(), CostBy::Member);
    let rows: Vec<(&str, f64, u64, u64, u64)> =
        r.rows.iter().map(|c| (c.key.as_str(), c.cost_usd, c.input_tokens, c.output_tokens, c.answers)).collect();
    assert_eq!(rows, [("claude", 2.0 * MAX_ANSWER_USD, MAX_ANSWER_TOKENS + 1, MAX_ANSWER_TOKENS, 4)]);
}
