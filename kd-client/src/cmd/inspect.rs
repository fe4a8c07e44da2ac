//! Read-only views of the registry: `kd show`, `kd sessions`, `kd locks`,
//! `kd events` (`kd threads` is [`super::threads`]).

use std::process::ExitCode;

use anyhow::anyhow;
use clap::Args;
use kd_client::markdown;
use kd_client::prelude::*;
use kd_client::reading::InOrder;
use kd_client::style::{Palette, bold, dim, paint};
use kd_client::terminal::{safe, safe_line};
use kd_client::{ClientError, workspace};
use kd_proto::types::{Message, MessageKind, SessionStatus, Thread, ThreadStatus};

use super::{Ctx, print_json};
use crate::fmt::{self, Table};

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Thread id [default: the current thread of this workspace and branch]
    thread: Option<String>,
    /// Print JSON (the thread and its messages)
    #[arg(long)]
    json: bool,
}

pub async fn show(ctx: &Ctx, a: ShowArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let thread = match a.thread {
        Some(id) => client.thread_get(id).await.map_err(ClientError::from)?,
        None => {
            let ws = workspace::current()?;
            client
                .thread_current(ws.root.display().to_string(), ws.branch.clone())
                .await
                .map_err(ClientError::from)?
                .ok_or_else(|| anyhow!("no current thread in {}; name one (see `kd threads`)", ws.root.display()))?
        }
    };
    if a.json {
        return show_json(&client, &thread).await;
    }
    // Page by page: a thread may be longer than one answer can hold.
    let mut reader = InOrder::open(&client, &thread.id).await?;
    let styled = ctx.styled();
    let palette = match styled {
        true => {
            let config = client.config_get(thread.workspace.clone(), kd_client::shell_path()).await.ok();
            let senders: Vec<String> = reader.outline().iter().map(|m| m.from.clone()).collect();
            Palette::from_config(config.as_ref(), &[thread.members.clone(), senders].concat())
        }
        false => Palette::default(),
    };
    out!("{}", render_header(&thread, reader.outline().len()))?;
    while let Some(m) = reader.next().await? {
        out!("{}", render_message(&m, styled, &palette))?;
    }
    let cost = client
        .cost_report(Some(thread.id.clone()), None, None, Some(kd_proto::types::CostBy::Member))
        .await
        .map_err(ClientError::from)?;
    if cost.total.answers > 0 {
        out!("\n{}\n", dim(styled, &cost_footer(&cost)))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `cost $0.0036 · 20 in / 10 out tokens · claude $0.0024, codex $0.0012`.
pub(crate) fn cost_footer(c: &kd_proto::types::CostReport) -> String {
    let t = &c.total;
    let members: Vec<String> = c.rows.iter().map(|r| format!("{} {}", r.key, super::cost::usd(r.cost_usd))).collect();
    format!(
        "cost {} · {} in / {} out tokens · {}",
        super::cost::usd(t.cost_usd),
        t.input_tokens,
        t.output_tokens,
        members.join(", ")
    )
}

/// `kd show --json`: `{"thread": …, "messages": […]}`, the messages in seq
/// order, written a page at a time.
async fn show_json(client: &kd_client::Client, thread: &Thread) -> anyhow::Result<ExitCode> {
    let indent = |json: String| json.replace('\n', "\n    ");
    out!("{{\n  \"thread\": {},\n  \"messages\": [", serde_json::to_string_pretty(thread)?.replace('\n', "\n  "))?;
    let mut after = None;
    let mut first = true;
    loop {
        let page =
            client.thread_messages(thread.id.clone(), after, None, None, None).await.map_err(ClientError::from)?;
        let Some(last) = page.last() else { break };
        after = Some(last.seq);
        for m in &page {
            out!("{}\n    {}", if first { "" } else { "," }, indent(serde_json::to_string_pretty(m)?))?;
            first = false;
        }
    }
    outln!("{}]\n}}", if first { "" } else { "\n  " })?;
    Ok(ExitCode::SUCCESS)
}

/// The head of `kd show`: the thread, its size and members, its title.
fn render_header(thread: &Thread, messages: usize) -> String {
    let mut out = format!("thread {} · {}", thread.id, thread.workspace);
    if let Some(b) = &thread.branch {
        out.push_str(&format!(" ({b})"));
    }
    out.push_str(&format!(
        " · {} · context: {}",
        crate::fmt::count(messages as u64, "message"),
        thread.context.as_str()
    ));
    if !thread.members.is_empty() {
        out.push_str(&format!(" · members: {}", thread.members.join(", ")));
    }
    if thread.status != ThreadStatus::Active {
        out.push_str(&format!(" · {}", status_name(thread.status)));
    }
    out.push('\n');
    if let Some(title) = &thread.title {
        out.push_str(&format!("{title}\n"));
    }
    if let Some(summary) = &thread.summary {
        out.push_str(&format!("\nSummary\n{summary}\n"));
    }
    safe(&out).into_owned()
}

/// One message for the terminal: Markdown rendered when `styled`, the
/// body verbatim (made safe) otherwise.
fn render_message(m: &Message, styled: bool, palette: &Palette) -> String {
    let mut out = String::new();
    let mut head = bold(styled, &palette.paint(styled, &m.from, &format!("#{} {}", m.seq, m.from)));
    let to: Vec<&str> = m.to.iter().map(String::as_str).filter(|t| *t != "all").collect();
    let mut meta = String::new();
    if !to.is_empty() {
        meta.push_str(&format!(" → {}", to.join(", ")));
    }
    if !m.cc.is_empty() {
        meta.push_str(&format!(" (cc {})", m.cc.join(", ")));
    }
    if let Some(r) = m.reply_to {
        meta.push_str(&format!(" (re #{r})"));
    }
    if let Some(r) = m.replaces {
        meta.push_str(&format!(" (replaces #{r})"));
    }
    if let Some(round) = m.round {
        meta.push_str(&format!(" · round {round}"));
    }
    match m.kind {
        MessageKind::Error => meta.push_str(" [error]"),
        MessageKind::Interrupted => match m.run.as_ref().and_then(|r| r.stopped.as_deref()) {
            // Stopped by a member's emergency broadcast, not by you.
            Some(why) => meta.push_str(&format!(" [{}]", safe_line(why))),
            None => meta.push_str(" [interrupted]"),
        },
        MessageKind::System => meta.push_str(" [system]"),
        _ => {}
    }
    if m.route == Some(kd_proto::types::RouteType::Emergency) {
        meta.push_str(" [emergency]");
    }
    if let Some(p) = m.purpose {
        // A completion's ballot, tally, synthesis or merged answers.
        meta.push_str(&format!(" [{}]", p.as_str()));
    }
    meta.push_str(&format!(" · {}", fmt::time_ms(m.created_at_ms)));
    head.push_str(&dim(styled, &meta));
    out.push('\n');
    out.push_str(&head);
    out.push('\n');
    if styled {
        let body = markdown::to_ansi(&markdown::render(&m.body));
        if m.kind == MessageKind::Error {
            out.push_str(&paint(true, 31, body.trim_end()));
            out.push('\n');
        } else {
            out.push_str(&body);
        }
    } else {
        out.push_str(&safe(&m.body));
        if !m.body.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Only this thread
    #[arg(long)]
    thread: Option<String>,
    /// Only this agent
    #[arg(long)]
    agent: Option<String>,
    /// Only this status (active, completed, expired, idle, archived)
    #[arg(long, value_parser = parse_session_status)]
    status: Option<SessionStatus>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn sessions(ctx: &Ctx, a: SessionsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let sessions = client.session_list(a.thread, a.agent, a.status).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&sessions)?;
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        outln!("no sessions")?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = fmt::now_ms();
    let mut t = Table::new(&["ID", "THREAD", "AGENT", "STATUS", "HOLDER", "PID", "LAST ACTIVE", "BACKEND SESSION"]);
    for s in &sessions {
        t.row(vec![
            s.id.clone(),
            s.thread.clone(),
            s.agent.clone(),
            s.status.as_str().into(),
            s.holder.clone().unwrap_or_else(|| "-".into()),
            s.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            fmt::ago_ms(s.last_active_at_ms, now),
            s.backend_session_id.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    out!("{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct LocksArgs {
    /// Only this resource
    resource: Option<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn locks(ctx: &Ctx, a: LocksArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let locks = client.lock_list(a.resource).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&locks)?;
        return Ok(ExitCode::SUCCESS);
    }
    if locks.is_empty() {
        outln!("no locks held")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["RESOURCE", "HOLDER", "PID", "TOKEN", "EXPIRES IN"]);
    for l in &locks {
        t.row(vec![
            l.resource.clone(),
            l.holder.clone(),
            l.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            l.token.to_string(),
            fmt::duration_ms(l.expires_in_ms),
        ]);
    }
    out!("{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only this thread
    #[arg(long)]
    thread: Option<String>,
    /// Only events concerning this agent
    #[arg(long)]
    agent: Option<String>,
    /// Only this kind (e.g. message, session.resume, lock.acquire), or a family: race.*
    #[arg(long)]
    kind: Option<String>,
    /// The first events after this id (0: from the start), instead of the newest
    #[arg(long, value_name = "ID")]
    since: Option<u64>,
    /// The newest events before this id (to page back)
    #[arg(long, value_name = "ID")]
    before: Option<u64>,
    /// How many (fetched a page of the daemon at a time, however many)
    #[arg(long, default_value_t = DEFAULT_EVENTS, value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

/// How many events `kd events` shows unless told.
const DEFAULT_EVENTS: u64 = 50;

/// `kd events`: like `tail`, the newest `--limit` events (before
/// `--before`), or with `--since` the first ones after it; oldest first
/// either way. A limit over one page of `events.list` is fetched page by
/// page; when more events lie beyond what is shown, a line on stderr says
/// how to see them.
pub async fn events(ctx: &Ctx, a: EventsArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let (events, more) = fetch_events(&client, &a).await?;
    if a.json {
        print_json(&events)?;
        return Ok(ExitCode::SUCCESS);
    }
    if events.is_empty() {
        outln!("no events")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["ID", "TIME", "KIND", "THREAD", "WHO", "TO", "DETAILS"]);
    for e in &events {
        let who = e.agent.clone().or_else(|| e.from.clone()).unwrap_or_else(|| "-".into());
        let mut details = e.data.clone();
        if let Some(obj) = details.as_object_mut() {
            // The body is in the message; keep the line short.
            obj.remove("body");
        }
        let mut details = details.to_string();
        if details.chars().count() > 80 {
            details = details.chars().take(79).collect::<String>() + "…";
        }
        t.row(vec![
            e.id.to_string(),
            fmt::time_ms(e.at_ms),
            e.kind.clone(),
            e.thread.clone().unwrap_or_else(|| "-".into()),
            who,
            if e.to.is_empty() { "-".into() } else { e.to.join(",") },
            details,
        ]);
    }
    out!("{}", t.render())?;
    if let Some(more) = more {
        errln!("kd: {more}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The events `a` asks for, and when more lie beyond them, where: one more
/// than asked is fetched to tell.
async fn fetch_events(
    client: &kd_client::Client,
    a: &EventsArgs,
) -> anyhow::Result<(Vec<kd_proto::types::Event>, Option<String>)> {
    use kd_proto::types::EVENTS_PAGE;
    let want = a.limit.saturating_add(1);
    let mut events: std::collections::VecDeque<kd_proto::types::Event> = Default::default();
    let (mut since, mut before) = (a.since, a.before);
    loop {
        let page = (want - events.len() as u64).min(u64::from(EVENTS_PAGE)) as u32;
        let got = client
            .events_list(a.thread.clone(), a.agent.clone(), a.kind.clone(), since, Some(page), before)
            .await
            .map_err(ClientError::from)?;
        let full = got.len() == page as usize;
        match since {
            // Forward from --since: each page after the last.
            Some(_) => {
                since = got.last().map(|e| e.id).or(since);
                events.extend(got);
            }
            // Back from the newest: each page before the first.
            None => {
                before = got.first().map(|e| e.id).or(before);
                for e in got.into_iter().rev() {
                    events.push_front(e);
                }
            }
        }
        if !full || events.len() as u64 >= want {
            break;
        }
    }
    let mut more = None;
    if events.len() as u64 > a.limit {
        let same = same_filter(a);
        match a.since {
            Some(_) => {
                events.pop_back();
                more = events.back().map(|e| format!("newer events: kd events --since {}{same}", e.id));
            }
            None => {
                events.pop_front();
                more = events.front().map(|e| format!("older events: kd events --before {}{same}", e.id));
            }
        }
    }
    Ok((events.into(), more))
}

/// The filter and limit of `a` as options, to repeat in a hint.
fn same_filter(a: &EventsArgs) -> String {
    let mut out = String::new();
    for (flag, value) in [("thread", &a.thread), ("agent", &a.agent), ("kind", &a.kind)] {
        if let Some(v) = value {
            // Names are checked by the daemon; a kind may hold a `*`.
            let quoted = if v.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
                v.clone()
            } else {
                format!("'{}'", v.replace('\'', ""))
            };
            out.push_str(&format!(" --{flag} {}", safe(&quoted)));
        }
    }
    if a.limit != DEFAULT_EVENTS {
        out.push_str(&format!(" --limit {}", a.limit));
    }
    out
}

pub(super) fn status_name(s: ThreadStatus) -> &'static str {
    match s {
        ThreadStatus::Active => "active",
        ThreadStatus::Idle => "idle",
        ThreadStatus::Archived => "archived",
    }
}

fn parse_session_status(s: &str) -> Result<SessionStatus, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("{s:?} is not a session status (active, completed, expired, idle, archived)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    #[test]
    fn an_answer_in_anothers_place_says_which_without_calling_it_a_retry() {
        // Also a cut answer asked again after a restart, which no one retried.
        let mut m = testkit::message(7, "claude", MessageKind::Agent, "Whole.", Some("r-2"));
        m.replaces = Some(2);
        let shown = render_message(&m, false, &Palette::new(&["claude".to_string()], vec![]));
        assert!(shown.contains("(replaces #2)") && !shown.contains("retry"), "{shown}");
    }

    #[test]
    fn a_run_a_members_emergency_stopped_says_so_not_interrupted() {
        let mut m = testkit::message(3, "codex", MessageKind::Interrupted, "I was", Some("r-1"));
        if let Some(run) = m.run.as_mut() {
            run.stopped = Some("stopped by a member's emergency broadcast".into());
        }
        let shown = render_message(&m, false, &Palette::new(&["codex".to_string()], vec![]));
        assert!(shown.contains("[stopped by a member's emergency broadcast]"), "{shown}");
        assert!(!shown.contains("[interrupted]"), "{shown}");
    }

    #[test]
    fn the_header_counts_one_message_in_the_singular() {
        let t = testkit::thread();
        assert!(render_header(&t, 1).contains(" · 1 message · "), "{}", render_header(&t, 1));
        assert!(render_header(&t, 2).contains(" · 2 messages · "), "{}", render_header(&t, 2));
    }
}
