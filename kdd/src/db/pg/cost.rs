//! What answers cost (PostgreSQL; mirrors `db/cost.rs`): the ledger
//! (`costs`) written with each run's message, and its daily sums
//! (`cost_days`, kept in step by the migration's triggers). A report sums
//! one thread's ledger rows, or the daily sums across threads (with the
//! ledger's rows of the first day when `since` falls within it), as
//! SQLite's does, with the same rules ([`cost::summed`], [`cost::Entry`]).

use deadpool_postgres::GenericClient;
use kd_proto::types::{Cost, CostBy, CostReport, Message, RunInfo};
use tokio_postgres::types::ToSql;

use super::{Pg, threads};
use crate::db::DbResult;
use crate::db::cost::{self, DAY_MS, Entry, Filter};

/// Writes the ledger's row for `message`, which `run` wrote: in the
/// transaction that writes the message.
pub(crate) async fn record(c: &impl GenericClient, run: &RunInfo, message: &Message) -> DbResult<()> {
    let e = message.run.as_ref().map(Entry::of).unwrap_or_default();
    let stmt = c
        .prepare_cached(
            "INSERT INTO costs (thread_id, seq, member, exchange, round, day, at, cost_usd, input_tokens, output_tokens)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .await?;
    c.execute(
        &stmt,
        &[
            &message.thread,
            &(message.seq as i64),
            &message.from,
            &run.exchange.map(|x| x as i64),
            &run.round.map(i64::from),
            &message.created_at_ms.div_euclid(DAY_MS),
            &message.created_at_ms,
            &e.cost_usd,
            &(e.input_tokens as i64),
            &(e.output_tokens as i64),
        ],
    )
    .await?;
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
        CostBy::Round => format!("{table}.exchange::text || '/' || coalesce({table}.round, 1)::text"),
    }
}

/// The key shown for a group, as text.
fn shown(by: CostBy, group: &str) -> String {
    match by {
        CostBy::Day => format!("to_char(to_timestamp({group} * 86400) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"),
        _ => format!("({group})::text"),
    }
}

/// The statement of a report: key, cost, input and output tokens, answers
/// per group. Parameters by name: `:thread`, `:workspace`, `:since`, and
/// `:day`, the UTC day `:since` falls in ([`positional`] numbers them).
fn statement(f: &Filter, by: CostBy) -> String {
    const SUMS: &str = "coalesce(sum(cost_usd), 0)::float8, coalesce(sum(input_tokens), 0)::float8, \
                        coalesce(sum(output_tokens), 0)::float8";
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
        return format!("SELECT {}, {SUMS}, sum(answers)::bigint FROM cost_days d{ws} GROUP BY {d}", shown(by, &d));
    }
    // The days after the one `since` falls in, whole; of that day, the
    // answers from `since` on.
    format!(
        "SELECT {}, {SUMS}, sum(answers)::bigint FROM (
             SELECT {d} AS k, cost_usd, input_tokens, output_tokens, answers FROM cost_days d WHERE d.day > :day{}
             UNION ALL
             SELECT {} AS k, cost_usd, input_tokens, output_tokens, 1 FROM costs c
             WHERE c.day = :day AND c.at >= :since{}
         ) u GROUP BY k",
        shown(by, "k"),
        in_workspace("d"),
        group(by, "c"),
        in_workspace("c")
    )
}

/// `sql` with its `:name`s numbered `$1`, `$2`… in order of first use, and
/// the values in that order.
fn positional<'a>(sql: &str, named: &[(&str, &'a (dyn ToSql + Sync))]) -> (String, Vec<&'a (dyn ToSql + Sync)>) {
    let mut out = sql.to_string();
    let mut values = Vec::new();
    let mut order: Vec<(usize, &str, &'a (dyn ToSql + Sync))> =
        named.iter().filter_map(|(n, v)| out.find(n).map(|at| (at, *n, *v))).collect();
    order.sort_by_key(|(at, _, _)| *at);
    for (i, (_, name, value)) in order.into_iter().enumerate() {
        out = out.replace(name, &format!("${}", i + 1));
        values.push(value);
    }
    (out, values)
}

pub(crate) async fn report(c: &impl GenericClient, f: &Filter, by: CostBy) -> DbResult<CostReport> {
    match &f.thread {
        Some(t) => {
            threads::get(c, t).await?;
        }
        None => cost::without_thread(by)?,
    }
    let day = f.since_ms.map(|s| s.div_euclid(DAY_MS));
    let named: [(&str, &(dyn ToSql + Sync)); 4] =
        [(":thread", &f.thread), (":workspace", &f.workspace), (":since", &f.since_ms), (":day", &day)];
    let (sql, values) = positional(&statement(f, by), &named);
    let stmt = c.prepare_cached(&sql).await?;
    let rows = c.query(&stmt, &values).await?;
    let mut groups = Vec::with_capacity(rows.len());
    for r in &rows {
        groups.push(Cost {
            key: r.try_get::<_, Option<String>>(0)?.unwrap_or_else(|| "-".into()),
            cost_usd: r.try_get(1)?,
            input_tokens: r.try_get::<_, f64>(2)? as u64,
            output_tokens: r.try_get::<_, f64>(3)? as u64,
            answers: r.try_get::<_, Option<i64>>(4)?.unwrap_or(0).max(0) as u64,
        });
    }
    Ok(cost::summed(by, groups))
}

/// What the answers of exchange `king` of `thread` cost so far (they all
/// come after the King's message).
pub(crate) async fn exchange(c: &impl GenericClient, thread: &str, king: u64) -> DbResult<f64> {
    let stmt = c
        .prepare_cached(
            "SELECT coalesce(sum(cost_usd), 0)::float8 FROM costs WHERE thread_id = $1 AND seq > $2 AND exchange = $2",
        )
        .await?;
    let cost: f64 = c.query_one(&stmt, &[&thread, &(king as i64)]).await?.try_get(0)?;
    Ok(cost::micro_dollars(cost))
}

impl Pg {
    pub async fn cost_report(&self, f: Filter, by: CostBy) -> DbResult<CostReport> {
        report(&self.conn().await?, &f, by).await
    }

    pub async fn exchange_cost(&self, thread: String, king: u64) -> DbResult<f64> {
        exchange(&self.conn().await?, &thread, king).await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use kd_proto::names::KING;
    use kd_proto::types::{MessageKind, RunMeta, RunStatus};

    use serde_json::json;

    use super::*;
    use crate::db::Outbox;
    use crate::db::messages::NewMessage;
    use crate::db::pg::messages;
    use crate::db::threads::NewThread;

    /// A Monday at 00:00 UTC.
    pub(crate) const D0: i64 = 1_767_571_200_000;
    pub(crate) const DAY: i64 = 86_400_000;

    pub(crate) fn new_thread(id: &str, workspace: &str) -> NewThread {
        NewThread { id: Some(id.into()), members: vec![], ..NewThread::in_workspace(workspace) }
    }

    /// One message of the scenario: (thread, member, at, exchange, round,
    /// what the agent reported); `None` member: the King's question.
    type Step = (&'static str, Option<&'static str>, i64, Option<u64>, Option<u32>, serde_json::Value);

    pub(crate) fn scenario() -> Vec<Step> {
        let r = |c: f64, i: u64, o: u64| json!({"cost_usd": c, "usage": {"input_tokens": i, "output_tokens": o}});
        vec![
            ("a", None, D0 + 10, None, None, json!(null)),
            ("a", Some("claude"), D0 + 20, Some(1), Some(1), r(0.0012, 100, 10)),
            ("a", Some("codex"), D0 + 30, Some(1), Some(1), r(0.5, 2000, 300)),
            ("a", Some("claude"), D0 + 40, Some(1), Some(2), r(0.0012, 100, 10)),
            ("a", Some("claude"), D0 + DAY + 5, Some(1), None, r(-3.0, 0, 1e13 as u64)),
            ("b", None, D0 + DAY + 10, None, None, json!(null)),
            ("b", Some("gemini"), D0 + DAY + 20, Some(1), Some(1), r(1e9, 5, 5)),
            ("b", Some("claude"), D0 + 2 * DAY + 1, None, None, json!({"usage": "odd"})),
            ("c", Some("claude"), D0 - DAY, Some(7), Some(3), r(0.25, 1, 1)),
        ]
    }

    pub(crate) fn message(thread: &str, member: Option<&str>, run: &serde_json::Value) -> NewMessage {
        match member {
            None => NewMessage::new(thread, KING, vec!["all".into()], MessageKind::King, "How much?".into()),
            Some(m) => {
                let mut msg = NewMessage::new(thread, m, vec![KING.into()], MessageKind::Agent, "answer".into());
                msg.run = Some(serde_json::from_value::<RunMeta>(run.clone()).unwrap_or_default());
                msg
            }
        }
    }

    pub(crate) fn run_info(thread: &str, member: &str, exchange: Option<u64>, round: Option<u32>) -> RunInfo {
        RunInfo {
            backend: "fake".into(),
            status: RunStatus::Done,
            exchange,
            round,
            ..RunInfo::new("r", thread, member)
        }
    }

    pub(crate) async fn postgres(pg: &Pg) {
        let mut c = pg.conn().await.unwrap();
        let tx = c.transaction().await.unwrap();
        let mut out = Outbox::default();
        for (id, ws) in [("a", "/w"), ("b", "/w"), ("c", "/v")] {
            threads::create(&tx, D0, new_thread(id, ws), &mut out).await.unwrap();
        }
        for (thread, member, at, x, round, run) in scenario() {
            let m = messages::append(&tx, at, message(thread, member, &run), &mut out).await.unwrap();
            if let Some(member) = member {
                record(&tx, &run_info(thread, member, x, round), &m).await.unwrap();
            }
        }
        pg.commit(tx, out).await.unwrap();
    }

    #[test]
    fn named_parameters_are_numbered_in_order_of_use() {
        let (a, b): (Option<String>, Option<i64>) = (None, Some(1));
        let (sql, values) = positional("x = :b AND y = :a OR z = :b", &[(":a", &a), (":b", &b), (":c", &a)]);
        assert_eq!(sql, "x = $1 AND y = $2 OR z = $1");
        assert_eq!(values.len(), 2);
    }
}
