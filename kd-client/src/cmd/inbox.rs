//! `kd inbox`: a member's inbox from its shell (F-X3) — read it
//! (`queue.read`), mark entries (`--process`: `queue.process`), choose how
//! types of message reach the member (`--subscribe … --mode`:
//! `queue.subscribe`), or follow it (`--follow`: its entries as they come,
//! until Ctrl+C). As the other coordination commands, inside an agent's
//! run it acts as its member on its thread by the run's capability
//! (`member.inbox`: the entries not read yet, or read too).

use std::collections::HashSet;
use std::process::ExitCode;

use clap::Args;
use kd_client::prelude::*;
use kd_client::{Client, ClientError};
use kd_proto::names::KING;
use kd_proto::types::{DeliveryMode, InboxItem, InboxStatus, RouteType, ThreadEvent};

use super::coord::Who;
use super::{Ctx, print_json};

#[derive(Debug, Args)]
pub struct InboxArgs {
    /// Only entries not read yet (the default)
    #[arg(long, conflicts_with = "status")]
    unread: bool,
    /// Only entries with this status: pending, read, processed, dismissed, deferred, dropped
    #[arg(long, value_name = "STATUS")]
    status: Option<String>,
    /// Only these types: point_to_point, multicast, broadcast, reply, emergency
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    types: Vec<String>,
    /// Mark the entries shown read
    #[arg(long)]
    mark_read: bool,
    /// At most this many entries
    #[arg(long, default_value_t = 10)]
    limit: u32,
    /// Entries of every thread, not just this one
    #[arg(long, conflicts_with = "follow")]
    all_threads: bool,
    /// Mark these entries (ids as shown: #12) processed, or what --action says
    #[arg(long, value_name = "ID", value_delimiter = ',', conflicts_with_all = ["follow", "subscribe"])]
    process: Vec<u64>,
    /// With --process: processed (default), dismissed, deferred, read or pending
    #[arg(long, value_name = "ACTION", requires = "process", value_parser = parse_action)]
    action: Option<InboxStatus>,
    /// Take messages of these types (point_to_point, multicast, broadcast, reply) as --mode says, in this workspace
    #[arg(long, value_name = "TYPE", value_delimiter = ',', requires = "mode", conflicts_with = "follow")]
    subscribe: Vec<String>,
    /// With --subscribe: immediate (a message starts a run) or queued (it waits here)
    #[arg(long, value_name = "MODE", requires = "subscribe", value_parser = parse_mode)]
    mode: Option<DeliveryMode>,
    /// After the entries, print each new one as it arrives, until Ctrl+C
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    who: Who,
    /// Print JSON (with --follow, one entry per line)
    #[arg(long)]
    json: bool,
}

fn parse_action(s: &str) -> Result<InboxStatus, String> {
    match InboxStatus::parse(s) {
        Some(InboxStatus::Dropped) | None => {
            Err(format!("{s:?} is not an action; use processed, dismissed, deferred, read or pending"))
        }
        Some(a) => Ok(a),
    }
}

fn parse_mode(s: &str) -> Result<DeliveryMode, String> {
    match s {
        "immediate" => Ok(DeliveryMode::Immediate),
        "queued" => Ok(DeliveryMode::Queued),
        _ => Err(format!("{s:?} is not a delivery mode; use immediate or queued")),
    }
}

fn parse_types(types: &[String]) -> anyhow::Result<Vec<RouteType>> {
    types
        .iter()
        .map(|t| {
            RouteType::parse(t).ok_or_else(|| {
                anyhow::anyhow!("unknown type {t}; use point_to_point, multicast, broadcast, reply or emergency")
            })
        })
        .collect()
}

pub async fn run(ctx: &Ctx, a: InboxArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    if let Some((token, g)) = a.who.capability(&client).await? {
        return own(&client, &a, token, &g.member).await;
    }
    let member = a.who.member();
    if member == KING {
        anyhow::bail!("the King has no inbox; run kd inbox from a member's shell or name one with --as");
    }
    if !a.process.is_empty() {
        return process(&client, &a, &member).await;
    }
    if !a.subscribe.is_empty() {
        return subscribe(&client, &a, &member).await;
    }
    let thread = if a.all_threads { None } else { Some(a.who.thread(&client).await?) };
    let status = match &a.status {
        Some(s) => Some(InboxStatus::parse(s).ok_or_else(|| {
            anyhow::anyhow!("unknown status {s}; use pending, read, processed, dismissed, deferred or dropped")
        })?),
        None => Some(InboxStatus::Pending),
    };
    let types = parse_types(&a.types)?;
    let types = (!types.is_empty()).then_some(types);
    let read = Read { member: member.clone(), thread, types, status, limit: a.limit, mark_read: a.mark_read };
    // Subscribed before the inbox is read: nothing that comes between is missed.
    let mut events = match (&read.thread, a.follow) {
        (Some(t), true) => Some(client.thread_subscribe(t.clone(), None, None).await.map_err(ClientError::from)?),
        _ => None,
    };
    let items = read.call(&client).await?;
    if a.json && !a.follow {
        print_json(&items)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut shown = HashSet::new();
    if items.is_empty() && !a.follow {
        outln!("{member}'s inbox is empty")?;
    }
    for i in &items {
        show(i, a.json)?;
        shown.insert(i.id);
    }
    let Some(sub) = events.as_mut() else { return Ok(ExitCode::SUCCESS) };
    errln!("kd: following {member}'s inbox on thread {}; Ctrl+C to stop", read.thread.as_deref().unwrap_or(""));
    // Every message may have made an entry: read what is new after each.
    while let Some(event) = sub.next().await {
        if !matches!(event, Ok(ThreadEvent::Message { .. })) {
            continue;
        }
        for i in read.call(&client).await? {
            if shown.insert(i.id) {
                show(&i, a.json)?;
            }
        }
    }
    Err(ClientError::Transport("the daemon ended the subscription".into()).into())
}

/// Inside a run: the member's inbox on its thread, by the run's capability
/// (`member.inbox`); what acts on other threads or on the member's settings
/// is for the King's shell.
async fn own(client: &Client, a: &InboxArgs, token: String, member: &str) -> anyhow::Result<ExitCode> {
    let given = [
        ("--process", !a.process.is_empty()),
        ("--subscribe", !a.subscribe.is_empty()),
        ("--follow", a.follow),
        ("--all-threads", a.all_threads),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, on)| *on) {
        anyhow::bail!(
            "{flag} is not taken inside a run: there kd inbox reads {member}'s inbox on its thread \
             (--unread, --type, --limit, --mark-read)"
        );
    }
    if let Some(s) = a.status.as_deref().filter(|s| *s != "pending") {
        anyhow::bail!("--status {s} is not taken inside a run: there kd inbox shows the entries not read yet");
    }
    let types = parse_types(&a.types)?;
    let types = (!types.is_empty()).then_some(types);
    let items = client
        .member_inbox(token, Some(true), types, Some(a.limit), Some(a.mark_read))
        .await
        .map_err(ClientError::from)?;
    if a.json {
        print_json(&items)?;
        return Ok(ExitCode::SUCCESS);
    }
    if items.is_empty() {
        outln!("{member}'s inbox is empty")?;
    }
    for i in &items {
        show(i, false)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One `queue.read`.
struct Read {
    member: String,
    thread: Option<String>,
    types: Option<Vec<RouteType>>,
    status: Option<InboxStatus>,
    limit: u32,
    mark_read: bool,
}

impl Read {
    async fn call(&self, client: &Client) -> anyhow::Result<Vec<InboxItem>> {
        Ok(client
            .queue_read(
                self.member.clone(),
                self.thread.clone(),
                self.types.clone(),
                self.status,
                Some(self.limit),
                Some(self.mark_read),
            )
            .await
            .map_err(ClientError::from)?)
    }
}

fn show(i: &InboxItem, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string(i)?)?;
        return Ok(());
    }
    let role = if i.role == kd_proto::types::Role::Cc { " (cc)" } else { "" };
    outln!(
        "#{} · {} · from {}{role} · {} · message {}",
        i.id,
        i.route_type.as_str(),
        i.from,
        i.status.as_str(),
        i.seq
    )?;
    for line in i.body.lines() {
        outln!("  {}", kd_client::terminal::safe(line))?;
    }
    Ok(())
}

/// `--process ID…`: `queue.process`.
async fn process(client: &Client, a: &InboxArgs, member: &str) -> anyhow::Result<ExitCode> {
    let p = client.queue_process(member.to_string(), a.process.clone(), a.action).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&p)?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = if p.updated == 1 { "y" } else { "ies" };
    outln!("{member}: {} entr{s} marked {}", p.updated, p.status.as_str())?;
    // Ids that are not the member's, or not there, are not an error to the daemon.
    Ok(if (p.updated as usize) < a.process.len() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `--subscribe TYPE… --mode M`: `queue.subscribe`.
async fn subscribe(client: &Client, a: &InboxArgs, member: &str) -> anyhow::Result<ExitCode> {
    let types = parse_types(&a.subscribe)?;
    let mode = a.mode.ok_or_else(|| anyhow::anyhow!("--subscribe needs --mode immediate or --mode queued"))?;
    let thread = a.who.thread(client).await?;
    let prefs = client.queue_subscribe(thread, member.to_string(), types, mode).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&prefs)?;
        return Ok(ExitCode::SUCCESS);
    }
    let list = |t: &[RouteType]| match t {
        [] => "-".to_string(),
        t => t.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(","),
    };
    outln!(
        "{}: {} by default; immediate: {}; queued: {} (at most {}, then {})",
        prefs.member,
        prefs.mode.as_str(),
        list(&prefs.immediate_types),
        list(&prefs.queued_types),
        prefs.queue_limit,
        match prefs.overflow {
            kd_proto::types::Overflow::DropOldest => "drop_oldest",
            kd_proto::types::Overflow::RejectNew => "reject_new",
        }
    )?;
    Ok(ExitCode::SUCCESS)
}
