//! `kd search`: full-text search over every thread.

use std::process::ExitCode;

use clap::Args;
use kd_client::ClientError;
use kd_client::prelude::*;
use kd_client::style::bold;
use kd_client::terminal::safe;

use super::{Ctx, print_json};
use crate::fmt;

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// What to find (FTS5 syntax: words, "a phrase", prefix*, AND/OR/NOT, NEAR(a b))
    #[arg(required = true, value_name = "QUERY")]
    query: Vec<String>,
    /// Only this thread
    #[arg(long, value_name = "ID")]
    thread: Option<String>,
    /// Only messages from this sender (king or a member)
    #[arg(long, value_name = "NAME")]
    from: Option<String>,
    /// Only messages since then: 7d, 12h, 30m back, or a UTC day such as 2026-11-01
    #[arg(long, value_parser = super::cost::parse_since, value_name = "WHEN")]
    since: Option<i64>,
    /// At most this many hits
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn run(ctx: &Ctx, a: SearchArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let hits = client
        .search_query(a.query.join(" "), a.thread, a.from, a.since, Some(a.limit))
        .await
        .map_err(ClientError::from)?;
    if a.json {
        print_json(&hits)?;
        return Ok(ExitCode::SUCCESS);
    }
    if hits.is_empty() {
        outln!("no match")?;
        return Ok(ExitCode::from(1));
    }
    let styled = ctx.styled();
    for h in &hits {
        let place = match h.seq {
            Some(seq) => format!("#{seq} · {}", h.from),
            None => h.from.clone(),
        };
        outln!("thread {} · {place} · {}", h.thread, fmt::time_ms(h.at_ms))?;
        outln!("  {}\n", marked(&fmt::one_line(&safe(&h.snippet)), styled))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The «hits» in bold on a terminal; as they are otherwise.
fn marked(snippet: &str, styled: bool) -> String {
    if !styled {
        return snippet.to_string();
    }
    let mut out = String::new();
    let mut rest = snippet;
    while let Some(open) = rest.find('«') {
        out.push_str(&rest[..open]);
        let after = &rest[open + '«'.len_utf8()..];
        let Some(close) = after.find('»') else {
            out.push_str(&rest[open..]);
            return out;
        };
        out.push_str(&bold(true, &after[..close]));
        rest = &after[close + '»'.len_utf8()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_are_bold_on_a_terminal_and_marked_otherwise() {
        assert_eq!(marked("a «b» c", false), "a «b» c");
        assert_eq!(marked("a «b» c «d»", true), format!("a {} c {}", bold(true, "b"), bold(true, "d")));
        assert_eq!(marked("open «b", true), "open «b");
    }
}
