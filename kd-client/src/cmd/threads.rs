//! `kd threads`: threads as a tree, each branch under its parent, with
//! status, activity, members, title and, when any has one, the gist of
//! its summary.

use std::process::ExitCode;

use clap::Args;
use kd_client::prelude::*;
use kd_client::{ClientError, workspace};
use kd_proto::types::{Cost, Thread, ThreadStatus};

use super::inspect::status_name;
use super::{Ctx, print_json};
use crate::fmt::{self, Table};

#[derive(Debug, Args)]
pub struct ThreadsArgs {
    /// Only threads of the current workspace
    #[arg(long)]
    here: bool,
    /// Only threads with this status (active, idle, archived)
    #[arg(long, value_parser = parse_thread_status)]
    status: Option<ThreadStatus>,
    /// At most this many
    #[arg(long)]
    limit: Option<u32>,
    /// Add each thread's cost (its answers, as the agents reported it)
    #[arg(long)]
    cost: bool,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn run(ctx: &Ctx, a: ThreadsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let ws = if a.here { Some(workspace::current()?.root.display().to_string()) } else { None };
    let threads = client.thread_list(ws.clone(), a.status, a.limit).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&threads)?;
        return Ok(ExitCode::SUCCESS);
    }
    if threads.is_empty() {
        outln!("no threads yet")?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = fmt::now_ms();
    let costs = match a.cost {
        true => Some(
            client
                .cost_report(None, ws, None, Some(kd_proto::types::CostBy::Thread))
                .await
                .map_err(ClientError::from)?
                .rows,
        ),
        false => None,
    };
    out!("{}", table(&threads, costs.as_deref(), now))?;
    Ok(ExitCode::SUCCESS)
}

/// The listing: one row per thread, in tree order.
fn table(threads: &[Thread], costs: Option<&[Cost]>, now: i64) -> String {
    let mut header =
        vec!["ID", "STATUS", "CONTEXT", "MSGS", "LAST ACTIVITY", "MEMBERS", "BRANCH", "WORKSPACE", "TITLE"];
    if costs.is_some() {
        header.insert(4, "COST");
    }
    // An archived thread's summary, its gist, when any has one.
    let summaries = threads.iter().any(|t| t.summary.is_some());
    if summaries {
        header.push("SUMMARY");
    }
    let mut t = Table::new(&header);
    for (depth, th) in tree(threads) {
        let id = match depth {
            0 => th.id.clone(),
            _ => format!("└ {}", th.id),
        };
        let cost =
            costs.map(|rows| super::cost::usd(rows.iter().find(|c| c.key == th.id).map(|c| c.cost_usd).unwrap_or(0.0)));
        t.row(vec![
            id,
            status_name(th.status).into(),
            th.context.as_str().into(),
            th.last_seq.to_string(),
            fmt::ago_ms(th.last_activity_at_ms, now),
            th.members.join(","),
            th.branch.clone().unwrap_or_else(|| "-".into()),
            th.workspace.clone(),
            th.title.clone().unwrap_or_default(),
        ]);
        // Each generation one step deeper (a cell's own spaces are folded).
        t.indent_first(2 * depth.saturating_sub(1));
        if let Some(cost) = cost {
            t.insert_cell(4, cost);
        }
        if summaries {
            t.insert_cell(usize::MAX, th.summary.as_deref().map(gist).unwrap_or_default());
        }
    }
    t.render()
}

/// Longest gist of a summary shown.
const GIST_CHARS: usize = 60;

/// What a summary says, on one line: its first line that says something —
/// not a heading, nor a label such as the extractive summary's `The King
/// asked:` — without list markers or emphasis, cut at [`GIST_CHARS`].
fn gist(summary: &str) -> String {
    let says = |line: &&str| !line.is_empty() && !line.ends_with(':');
    let lines: Vec<String> = summary
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| {
            let l = l.trim();
            let l = l.strip_prefix(['-', '*', '+', '•']).map(str::trim_start).unwrap_or(l);
            let l = match l.split_once(". ") {
                Some((n, rest)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => rest,
                _ => l,
            };
            l.replace("**", "").replace("__", "").replace('`', "")
        })
        .collect();
    let line = lines
        .iter()
        .map(|l| l.trim())
        .find(says)
        .or_else(|| lines.iter().map(|l| l.trim()).find(|l| !l.is_empty()))
        .unwrap_or("");
    let mut cut: String = line.chars().take(GIST_CHARS).collect();
    if line.chars().count() > GIST_CHARS {
        cut.push('…');
    }
    cut
}

/// Threads as a tree, each branch right under its parent (when listed)
/// with its depth; otherwise in the order given.
fn tree(threads: &[Thread]) -> Vec<(usize, &Thread)> {
    fn walk<'a>(t: &'a Thread, depth: usize, all: &'a [Thread], out: &mut Vec<(usize, &'a Thread)>) {
        out.push((depth, t));
        // A parent chain is a tree by construction; the bound is a guard.
        if depth < 32 {
            for child in all.iter().filter(|c| c.parent.as_deref() == Some(t.id.as_str())) {
                walk(child, depth + 1, all, out);
            }
        }
    }
    let listed = |id: &str| threads.iter().any(|t| t.id == id);
    let mut out = Vec::with_capacity(threads.len());
    for root in threads.iter().filter(|t| t.parent.as_deref().is_none_or(|p| !listed(p))) {
        walk(root, 0, threads, &mut out);
    }
    out
}

fn parse_thread_status(s: &str) -> Result<ThreadStatus, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("{s:?} is not a thread status (active, idle, archived)"))
}

#[cfg(test)]
mod tests {
    use kd_proto::types::{ContextMode, Lineage};

    use super::*;

    fn thread(id: &str, parent: Option<&str>, summary: Option<&str>) -> Thread {
        Thread {
            id: id.into(),
            workspace: "/repo".into(),
            branch: Some("main".into()),
            title: None,
            status: if summary.is_some() { ThreadStatus::Archived } else { ThreadStatus::Active },
            lineage: if parent.is_some() { Lineage::Branch } else { Lineage::Trunk },
            parent: parent.map(Into::into),
            members: vec!["claude".into()],
            context: ContextMode::History,
            created_at_ms: 0,
            last_activity_at_ms: 0,
            last_seq: 1,
            origin: None,
            summary: summary.map(Into::into),
        }
    }

    /// Each row's first column.
    fn ids(table: &str) -> Vec<String> {
        table.lines().skip(1).map(|l| l.split("  active").next().unwrap_or(l).trim_end().to_string()).collect()
    }

    #[test]
    fn each_generation_of_branches_is_drawn_one_step_deeper() {
        let threads = [
            thread("trunk1", None, None),
            thread("child1", Some("trunk1"), None),
            thread("grand1", Some("child1"), None),
        ];
        let t = table(&threads, None, 0);
        assert_eq!(ids(&t), ["trunk1", "└ child1", "  └ grand1"], "{t}");
    }

    #[test]
    fn the_summary_column_shows_the_summarys_gist_not_its_header() {
        let extractive = "The King asked:\n- How do we shard orders?\n\nLast answers:\n- claude: By tenant.";
        let written = "## Summary\n\n**Decision:** shard by tenant id.\n";
        let threads = [thread("trunk1", None, Some(extractive)), thread("other1", None, Some(written))];
        let t = table(&threads, None, 0);
        let rows: Vec<&str> = t.lines().collect();
        assert!(rows[1].ends_with("How do we shard orders?"), "{t}");
        assert!(rows[2].ends_with("Decision: shard by tenant id."), "{t}");
    }
}
