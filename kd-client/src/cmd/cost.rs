//! `kd cost`: what the members' answers cost, summed.

use std::process::ExitCode;

use clap::Args;
use kd_client::prelude::*;
use kd_client::{ClientError, workspace};
use kd_proto::types::{Cost, CostBy};

use super::{Ctx, print_json};
use crate::fmt::{self, Table};

#[derive(Debug, Args)]
pub struct CostArgs {
    /// Only this thread
    #[arg(long, value_name = "ID")]
    thread: Option<String>,
    /// Only threads of the current workspace
    #[arg(long)]
    here: bool,
    /// Only answers since then: a duration back (`7d`, `12h`, `30m`) or a day (`2026-11-01`, UTC)
    #[arg(long, value_parser = parse_since, value_name = "WHEN")]
    since: Option<i64>,
    /// How to group: member, thread, day, or exchange or round (of --thread, default the current thread)
    #[arg(long, value_enum, default_value = "member")]
    by: By,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum By {
    Member,
    Thread,
    Day,
    Exchange,
    Round,
}

impl From<By> for CostBy {
    fn from(b: By) -> CostBy {
        match b {
            By::Member => CostBy::Member,
            By::Thread => CostBy::Thread,
            By::Day => CostBy::Day,
            By::Exchange => CostBy::Exchange,
            By::Round => CostBy::Round,
        }
    }
}

pub async fn run(ctx: &Ctx, a: CostArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let ws = if a.here { Some(workspace::current()?.root.display().to_string()) } else { None };
    // By exchange or round is of one thread: this workspace's current one
    // unless named.
    let thread = match (a.thread, a.by) {
        (None, By::Exchange | By::Round) => Some(super::thread_or_current(&client, None).await?.id),
        (thread, _) => thread,
    };
    let report = client.cost_report(thread, ws, a.since, Some(a.by.into())).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let key = match report.by {
        CostBy::Member => "MEMBER",
        CostBy::Thread => "THREAD",
        CostBy::Day => "DAY",
        CostBy::Exchange => "EXCHANGE",
        CostBy::Round => "EXCHANGE/ROUND",
    };
    let mut t = Table::new(&[key, "COST", "IN TOKENS", "OUT TOKENS", "ANSWERS"]);
    for row in report.rows.iter().chain(std::iter::once(&report.total)) {
        t.row(cells(row));
    }
    out!("{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}

fn cells(c: &Cost) -> Vec<String> {
    vec![c.key.clone(), usd(c.cost_usd), c.input_tokens.to_string(), c.output_tokens.to_string(), c.answers.to_string()]
}

/// `$0.0123`.
pub fn usd(v: f64) -> String {
    format!("${v:.4}")
}

/// `7d`, `12h`, `30m`, `90s` back from now, or a UTC day `YYYY-MM-DD`, as Unix ms.
pub fn parse_since(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?}: give a duration back such as 7d, 12h, 30m, or a day such as 2026-11-01");
    if let Ok(day) = s.parse::<jiff::civil::Date>() {
        let ts = day.to_zoned(jiff::tz::TimeZone::UTC).map_err(|_| bad())?.timestamp();
        return Ok(ts.as_millisecond());
    }
    let secs = kd_proto::duration::parse_secs(s).ok_or_else(bad)?;
    let back = i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    Ok(fmt::now_ms().saturating_sub(back))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_duration_back_or_a_utc_day() {
        assert_eq!(parse_since("2026-11-01"), Ok(1_793_491_200_000));
        let week = parse_since("7d").unwrap();
        assert!((fmt::now_ms() - week - 7 * 86_400_000).abs() < 60_000);
        for bad in ["7w", "d", "", "yesterday", "-1d"] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }
}
