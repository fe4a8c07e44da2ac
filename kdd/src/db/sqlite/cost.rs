//! The SQLite side of [`crate::db::cost`]: its SQL and the engine's operations.

use kd_proto::types::{Cost, CostBy, CostReport, Message, RunInfo};
use rusqlite::{Connection, ToSql, params};

use super::threads;
use crate::db::DbResult;
use crate::db::cost::{DAY_MS, Entry, Filter, micro_dollars, summed, without_thread};

/// Writes the ledger's row for `message`, which `run` wrote: in the
/// transaction that writes the message ([`super::runs::finish`]).
pub fn record(conn: &Connection, run: &RunInfo, message: &Message) -> DbResult<()> {
    let e = message.run.as_ref().map(Entry::of).unwrap_or_default();
    conn.prepare_cached(
        "INSERT INTO costs (thread_id, seq, member, exchange, round, day, at, cost_usd, input_tokens, output_tokens)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        message.thread,
        message.seq as i64,
        message.from,
        run.exchange.map(|x| x as i64),
        run.round,
        message.created_at_ms.div_euclid(DAY_MS),
        message.created_at_ms,
        e.cost_usd,
        e.input_tokens as i64,
        e.output_tokens as i64
    ])?;
    Ok(())
}

/// The expression a report groups by, over the ledger (`c`) or the daily
/// sums (`d`, which have no exchange).
fn group(by: CostBy, table: &str) -> String {
    match by {
        CostBy::Member => format!("{table}.member"),
        CostBy::Thread => format!("{table}.thread_id"),
        CostBy::Day => format!("{table}.day"),
        CostBy::Exchange => format!("{table}.exchange"),
        CostBy::Round => format!("{table}.exchange || '/' || ifnull({table}.round, 1)"),
    }
}

/// The key shown for a group.
fn shown(by: CostBy, group: &str) -> String {
    match by {
        CostBy::Day => format!("strftime('%Y-%m-%d', {group} * 86400, 'unixepoch')"),
        CostBy::Exchange => format!("CAST({group} AS TEXT)"),
        _ => group.to_string(),
    }
}

/// The statement of a report: key, cost, input and output tokens, answers
/// per group. Parameters by name: `:thread`, `:workspace`, `:since`, and
/// `:day`, the UTC day `:since` falls in.
fn statement(f: &Filter, by: CostBy) -> String {
    const SUMS: &str = "total(cost_usd), total(input_tokens), total(output_tokens)";
    let in_workspace = |table: &str| match f.workspace {
        Some(_) => format!(" AND {table}.thread_id IN (SELECT id FROM threads WHERE workspace = :workspace)"),
        None => String::new(),
    };
    if f.thread.is_some() {
        let since = if f.since_ms.is_some() { " AND c.at >= :since" } else { "" };
        let ws = match f.workspace {
            Some(_) => " AND EXISTS (SELECT 1 FROM threads WHERE id = :thread AND workspace = :workspace)",
            None => "",
        };
        let g = group(by, "c");
        return format!(
            "SELECT {}, {SUMS}, count(*) FROM costs c WHERE c.thread_id = :thread{since}{ws} GROUP BY {g}",
            shown(by, &g)
        );
    }
    let d = group(by, "d");
    if f.since_ms.is_none() {
        let ws = in_workspace("d").replacen(" AND", " WHERE", 1);
        return format!("SELECT {}, {SUMS}, sum(answers) FROM cost_days d{ws} GROUP BY {d}", shown(by, &d));
    }
    // The days after the one `since` falls in, whole; of that day, the
    // answers from `since` on.
    format!(
        "SELECT {}, {SUMS}, sum(answers) FROM (
             SELECT {d} AS k, cost_usd, input_tokens, output_tokens, answers FROM cost_days d WHERE d.day > :day{}
             UNION ALL
             SELECT {} AS k, cost_usd, input_tokens, output_tokens, 1 FROM costs c
             WHERE c.day = :day AND c.at >= :since{}
         ) GROUP BY k",
        shown(by, "k"),
        in_workspace("d"),
        group(by, "c"),
        in_workspace("c")
    )
}

pub fn report(conn: &Connection, f: &Filter, by: CostBy) -> DbResult<CostReport> {
    match &f.thread {
        Some(t) => {
            threads::get(conn, t)?;
        }
        None => without_thread(by)?,
    }
    let day = f.since_ms.map(|s| s.div_euclid(DAY_MS));
    let mut stmt = conn.prepare_cached(&statement(f, by))?;
    let named: [(&str, &dyn ToSql); 4] =
        [(":thread", &f.thread), (":workspace", &f.workspace), (":since", &f.since_ms), (":day", &day)];
    for (name, value) in named {
        if let Some(i) = stmt.parameter_index(name)? {
            stmt.raw_bind_parameter(i, value)?;
        }
    }
    let mut groups = vec![];
    let mut found = stmt.raw_query();
    while let Some(r) = found.next()? {
        let count = |i: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, f64>(i)? as u64) };
        groups.push(Cost {
            key: r.get::<_, Option<String>>(0)?.unwrap_or_else(|| "-".into()),
            cost_usd: r.get(1)?,
            input_tokens: count(2)?,
            output_tokens: count(3)?,
            answers: r.get::<_, i64>(4)?.max(0) as u64,
        });
    }
    Ok(summed(by, groups))
}

/// What the answers of exchange `king` of `thread` cost so far (they all
/// come after the King's message).
pub fn exchange(conn: &Connection, thread: &str, king: u64) -> DbResult<f64> {
    let cost: f64 = conn
        .prepare_cached("SELECT total(cost_usd) FROM costs WHERE thread_id = ?1 AND seq > ?2 AND exchange = ?2")?
        .query_row(params![thread, king as i64], |r| r.get(0))?;
    Ok(micro_dollars(cost))
}

impl super::Sqlite {
    pub async fn cost_report(&self, f: Filter, by: CostBy) -> DbResult<CostReport> {
        self.read(move |c| report(c, &f, by)).await
    }

    pub async fn exchange_cost(&self, thread: String, king: u64) -> DbResult<f64> {
        self.read(move |c| exchange(c, &thread, king)).await
    }
}

#[cfg(test)]
mod tests;
