//! What answers cost (F-B3): the ledger of what each run's message cost
//! (`costs`, one row per message a run wrote, with its agent's report
//! bounded), written in the transaction that writes the message, and its
//! sums per thread, member and UTC day (`cost_days`, kept in step by
//! triggers; migration 0010). A report is summed by member, thread, day or
//! exchange from whichever is smallest for its filter: one thread's rows of
//! the ledger, or the daily sums across threads (with the ledger's rows of
//! the first day when `since` falls within it). Nothing reads `messages`:
//! a thread's cost costs that thread, and the registry's grows with its
//! threads, members and days, not with what was said. Also one exchange's
//! running cost, for `council.budget_usd`.

use kd_proto::types::{Cost, CostBy, CostReport, RunMeta};

use super::{DbError, DbResult};

/// Most rows a report lists (the total counts them all).
pub const MAX_ROWS: u32 = 1000;
/// The most one answer is counted to cost, whatever its agent reported.
pub const MAX_ANSWER_USD: f64 = 1e6;
/// The most tokens one answer is counted to have taken in or given out.
pub const MAX_ANSWER_TOKENS: u64 = 1_000_000_000_000;

pub(crate) const DAY_MS: i64 = 86_400_000;

/// Which answers a report counts.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub thread: Option<String>,
    pub workspace: Option<String>,
    pub since_ms: Option<i64>,
}

/// What one run's message adds to the ledger: what its agent reported,
/// bounded (an agent's report is its own: a negative, absurd or misshapen
/// figure must not make every sum it joins wrong or fail). Migration 0010
/// bounds the answers written before the ledger the same way.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Entry {
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Entry {
    pub fn of(meta: &RunMeta) -> Entry {
        let tokens = |key: &str| {
            let n = meta.usage.as_ref().and_then(|u| u.get(key)).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
            if n >= 1.0 { n.min(MAX_ANSWER_TOKENS as f64) as u64 } else { 0 }
        };
        Entry {
            cost_usd: meta.cost_usd.filter(|c| c.is_finite() && *c > 0.0).map_or(0.0, |c| c.min(MAX_ANSWER_USD)),
            input_tokens: tokens("input_tokens"),
            output_tokens: tokens("output_tokens"),
        }
    }
}

/// A cost as reported: rounded to micro-dollars, so that five answers of
/// $0.0012 read `0.006`, not `0.005999999999999999`.
pub(crate) fn micro_dollars(usd: f64) -> f64 {
    (usd * 1e6).round() / 1e6
}

/// Refuses a report across threads that only one thread can have.
pub(crate) fn without_thread(by: CostBy) -> DbResult<()> {
    match by {
        CostBy::Exchange | CostBy::Round => {
            Err(DbError::Invalid("a report by exchange or round is of one thread: give thread".into()))
        }
        _ => Ok(()),
    }
}

/// The report of the groups a statement summed: their total, each cost in
/// micro-dollars, the costliest first (then by key), at most [`MAX_ROWS`].
pub(crate) fn summed(by: CostBy, groups: Vec<Cost>) -> CostReport {
    let mut total = Cost { key: "total".into(), ..Cost::default() };
    let mut rows = Vec::with_capacity(groups.len());
    for cost in groups {
        total.cost_usd += cost.cost_usd;
        total.input_tokens = total.input_tokens.saturating_add(cost.input_tokens);
        total.output_tokens = total.output_tokens.saturating_add(cost.output_tokens);
        total.answers += cost.answers;
        rows.push(Cost { cost_usd: micro_dollars(cost.cost_usd), ..cost });
    }
    total.cost_usd = micro_dollars(total.cost_usd);
    rows.sort_by(|a, b| b.cost_usd.total_cmp(&a.cost_usd).then_with(|| a.key.cmp(&b.key)));
    rows.truncate(MAX_ROWS as usize);
    CostReport { by, rows, total }
}
