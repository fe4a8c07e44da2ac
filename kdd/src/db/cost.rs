//! What answers cost (F-B cost): the `cost_usd` and token usage each run's
//! message carries (`messages.run`), summed by member, thread, day or
//! exchange; and one exchange's running cost, for `council.budget_usd`.

use kd_proto::types::{Cost, CostBy, CostReport};
use rusqlite::{Connection, params};

use super::{DbError, DbResult, threads};

/// Most rows a report lists (the total counts them all).
pub const MAX_ROWS: u32 = 1000;

/// Which answers a report counts.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub thread: Option<String>,
    pub workspace: Option<String>,
    pub since_ms: Option<i64>,
}

/// The sums of a report: cost, input tokens, output tokens, answers, per key.
const SUMS: &str = "total(json_extract(m.run, '$.cost_usd')),
       coalesce(sum(json_extract(m.run, '$.usage.input_tokens')), 0),
       coalesce(sum(json_extract(m.run, '$.usage.output_tokens')), 0),
       count(*)";

/// Answers of runs (imported messages name a backend but were no run here).
const WHERE: &str = "FROM messages m JOIN threads t ON t.id = m.thread_id
     WHERE json_extract(m.run, '$.run_id') IS NOT NULL
       AND (?1 IS NULL OR m.thread_id = ?1) AND (?2 IS NULL OR t.workspace = ?2) AND (?3 IS NULL OR m.created_at >= ?3)";

pub fn report(conn: &Connection, f: &Filter, by: CostBy) -> DbResult<CostReport> {
    if let Some(t) = &f.thread {
        threads::get(conn, t)?;
    }
    let key = match by {
        CostBy::Member => "m.sender",
        CostBy::Thread => "m.thread_id",
        CostBy::Day => "strftime('%Y-%m-%d', m.created_at / 1000, 'unixepoch')",
        CostBy::Exchange | CostBy::Round if f.thread.is_none() => {
            return Err(DbError::Invalid("a report by exchange or round is of one thread: give thread".into()));
        }
        CostBy::Exchange => {
            "(SELECT CAST(r.exchange AS TEXT) FROM runs r WHERE r.id = json_extract(m.run, '$.run_id'))"
        }
        CostBy::Round => {
            "(SELECT r.exchange || '/' || ifnull(r.round, 1) FROM runs r WHERE r.id = json_extract(m.run, '$.run_id'))"
        }
    };
    let args = params![f.thread, f.workspace, f.since_ms];
    let row = |r: &rusqlite::Row<'_>, key: String| -> rusqlite::Result<Cost> {
        Ok(Cost {
            key,
            cost_usd: micro_dollars(r.get(1)?),
            input_tokens: r.get::<_, i64>(2)?.max(0) as u64,
            output_tokens: r.get::<_, i64>(3)?.max(0) as u64,
            answers: r.get::<_, i64>(4)?.max(0) as u64,
        })
    };
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {key}, {SUMS} {WHERE} GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT {MAX_ROWS}"))?;
    let rows = stmt
        .query_map(args, |r| {
            let key: Option<String> = r.get(0)?;
            row(r, key.unwrap_or_else(|| "-".into()))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let total =
        conn.prepare_cached(&format!("SELECT NULL, {SUMS} {WHERE}"))?.query_row(args, |r| row(r, "total".into()))?;
    Ok(CostReport { by, rows, total })
}

/// A cost as reported: rounded to micro-dollars, so that five answers of
/// $0.0012 read `0.006`, not `0.005999999999999999`.
fn micro_dollars(usd: f64) -> f64 {
    (usd * 1e6).round() / 1e6
}

/// What the answers of exchange `king` of `thread` cost so far.
pub fn exchange(conn: &Connection, thread: &str, king: u64) -> DbResult<f64> {
    Ok(micro_dollars(
        conn.prepare_cached(
            "SELECT coalesce(sum(json_extract(m.run, '$.cost_usd')), 0.0)
             FROM runs r JOIN messages m ON m.thread_id = r.thread_id AND m.seq = r.message_seq
             WHERE r.thread_id = ?1 AND r.exchange = ?2",
        )?
        .query_row(params![thread, king as i64], |r| r.get(0))?,
    ))
}

impl super::Db {
    pub async fn cost_report(&self, f: Filter, by: CostBy) -> DbResult<CostReport> {
        self.read(move |c| report(c, &f, by)).await
    }

    pub async fn exchange_cost(&self, thread: String, king: u64) -> DbResult<f64> {
        self.read(move |c| exchange(c, &thread, king)).await
    }
}
