//! The coordination commands (SPEC §7): `kd send`, `kd broadcast`,
//! `kd ack`, `kd acks` and `kd claim` (`kd inbox` is [`super::inbox`]).
//! Inside an agent's run they act as its member on its thread by the run's
//! capability (`KD_RUN_TOKEN`, set by kdd for every run: the `member.*`
//! methods; `KD_MEMBER` and `KD_THREAD` are information, and `--as`,
//! `--thread` or a `KD_MEMBER` naming anything else is refused); elsewhere
//! as the King on the current thread, or as `--as NAME` (a process of an
//! agent without its token is refused by kdd).

use std::process::ExitCode;

use clap::Args;
use kd_client::prelude::*;
use kd_client::{Client, ClientError};
use kd_proto::member::{ClaimMode, Grant};
use kd_proto::names::KING;
use kd_proto::types::{Access, DeliveryStatus, RaceStatus, Routed};

use super::{Ctx, print_json};
use crate::fmt::Table;

/// Who is speaking, and on which thread.
#[derive(Debug, Args)]
pub struct Who {
    /// Act as this member [default: $KD_MEMBER, else king]
    #[arg(long = "as", value_name = "NAME")]
    as_member: Option<String>,
    /// Thread id [default: $KD_THREAD, else the current thread of this workspace and branch]
    #[arg(long, value_name = "ID")]
    thread: Option<String>,
}

impl Who {
    pub(super) fn member(&self) -> String {
        self.as_member.clone().or_else(|| env("KD_MEMBER")).unwrap_or_else(|| KING.to_string())
    }

    pub(super) async fn thread(&self, client: &Client) -> anyhow::Result<String> {
        match self.thread.clone().or_else(|| env("KD_THREAD")) {
            Some(t) => Ok(t),
            None => Ok(super::thread_or_current(client, None).await?.id),
        }
    }

    /// Inside an agent's run (`KD_RUN_TOKEN` set): the run's capability and
    /// the member and thread it names, after checking that nothing given
    /// (`--as`, `--thread`, `KD_MEMBER`, `KD_THREAD`) names another.
    pub(super) async fn capability(&self, client: &Client) -> anyhow::Result<Option<(String, Grant)>> {
        let Some(token) = env(TOKEN_VAR) else { return Ok(None) };
        let g = client.member_whoami(token.clone()).await.map_err(ClientError::from)?;
        let given = [
            ("--as", self.as_member.clone(), &g.member),
            ("KD_MEMBER", env("KD_MEMBER"), &g.member),
            ("--thread", self.thread.clone(), &g.thread),
            ("KD_THREAD", env("KD_THREAD"), &g.thread),
        ];
        for (what, value, own) in given {
            if let Some(v) = value.filter(|v| v != own) {
                anyhow::bail!(
                    "{what} names {v}, but this shell is {}'s on thread {} (its run's {TOKEN_VAR}): kd acts here only \
                     as {} on that thread",
                    g.member,
                    g.thread,
                    g.member
                );
            }
        }
        Ok(Some((token, g)))
    }
}

/// The environment variable holding a run's capability.
pub(super) const TOKEN_VAR: &str = "KD_RUN_TOKEN";

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The message
    #[arg(required = true, value_name = "MESSAGE")]
    message: Vec<String>,
    /// Addressees (`all` for every member)
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    to: Vec<String>,
    /// Members copied: they see it in their next prompt without being asked
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    cc: Vec<String>,
    /// The message (seq) this one answers
    #[arg(long, value_name = "SEQ")]
    reply_to: Option<u64>,
    #[command(flatten)]
    who: Who,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn send(ctx: &Ctx, a: SendArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let routed = if let Some((token, _)) = a.who.capability(&client).await? {
        if a.reply_to.is_some() {
            anyhow::bail!("--reply-to is not taken inside a run: a member's message goes to the members in --to");
        }
        let cc = (!a.cc.is_empty()).then_some(a.cc);
        client.member_send(token, a.to, a.message.join(" "), cc, None).await.map_err(ClientError::from)?
    } else {
        let thread = a.who.thread(&client).await?;
        let to = (!a.to.is_empty()).then_some(a.to);
        let cc = (!a.cc.is_empty()).then_some(a.cc);
        client
            .message_route(
                thread,
                a.who.member(),
                a.message.join(" "),
                to,
                cc,
                a.reply_to,
                None,
                None,
                kd_client::shell_path(),
            )
            .await
            .map_err(ClientError::from)?
    };
    show_routed(&routed, a.json)
}

/// What `kd send` prints of a routed message: its seq and type, then each
/// member's delivery; failure when one refused it.
fn show_routed(routed: &Routed, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        print_json(&routed)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("sent #{} ({})", routed.message.seq, routed.route_type.as_str())?;
    let mut refused = false;
    for d in &routed.deliveries {
        let what = match d.status {
            DeliveryStatus::Started => format!("answering now ({})", d.run.as_deref().unwrap_or("")),
            DeliveryStatus::AfterRun => "answers after its run in flight".to_string(),
            DeliveryStatus::Queued => format!("queued in its inbox ({} pending)", d.queue_size.unwrap_or(0)),
            DeliveryStatus::Copied => "copied".to_string(),
            DeliveryStatus::Rejected => {
                refused = true;
                format!("refused: {}", d.reason.as_deref().unwrap_or("inbox full"))
            }
        };
        let dropped = d.dropped.map(|id| format!("; dropped its oldest entry #{id}")).unwrap_or_default();
        outln!("  → {}: {what}{dropped}", d.member)?;
    }
    Ok(if refused { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

#[derive(Debug, Args)]
pub struct BroadcastArgs {
    /// The message
    #[arg(required = true, value_name = "MESSAGE")]
    message: Vec<String>,
    /// An emergency: bypasses queues and delivery modes; every member must acknowledge
    #[arg(long)]
    emergency: bool,
    /// With --emergency: stop the members' runs in flight
    #[arg(long, requires = "emergency")]
    stop: bool,
    #[command(flatten)]
    who: Who,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn broadcast(ctx: &Ctx, a: BroadcastArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let body = a.message.join(" ");
    if let Some((token, _)) = a.who.capability(&client).await? {
        if a.emergency {
            anyhow::bail!("an emergency is raised from outside the runs (kd broadcast --emergency in your own shell)");
        }
        let routed =
            client.member_send(token, vec!["all".into()], body, None, None).await.map_err(ClientError::from)?;
        if a.json {
            print_json(&routed)?;
        } else {
            outln!("broadcast #{} to {}", routed.message.seq, routed.deliveries.len())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let thread = a.who.thread(&client).await?;
    if !a.emergency {
        let routed = client
            .message_route(
                thread,
                a.who.member(),
                body,
                Some(vec!["all".into()]),
                None,
                None,
                None,
                None,
                kd_client::shell_path(),
            )
            .await
            .map_err(ClientError::from)?;
        if a.json {
            print_json(&routed)?;
        } else {
            outln!("broadcast #{} to {}", routed.message.seq, routed.deliveries.len())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let e = client
        .emergency_broadcast(thread, body, Some(a.who.member()), Some(a.stop), kd_client::shell_path())
        .await
        .map_err(ClientError::from)?;
    if a.json {
        print_json(&e)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("emergency {} (message #{}) to {}", e.broadcast, e.message.seq, e.members.join(", "))?;
    if !e.told_runs.is_empty() {
        let how = if a.stop { "stopped" } else { "told" };
        outln!("  runs in flight {how}: {}", e.told_runs.join(", "))?;
    }
    outln!("  waiting for acknowledgements: see kd acks")?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct AckArgs {
    /// Only this broadcast [default: every one owed on the thread]
    #[arg(long, value_name = "ID")]
    broadcast: Option<String>,
    #[command(flatten)]
    who: Who,
}

pub async fn ack(ctx: &Ctx, a: AckArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let (member, acked) = if let Some((token, g)) = a.who.capability(&client).await? {
        (g.member, client.member_ack(token, a.broadcast).await.map_err(ClientError::from)?)
    } else {
        let member = a.who.member();
        if member == KING {
            anyhow::bail!("the King owes no acknowledgement; run kd ack from a member's shell or name one with --as");
        }
        let thread = a.who.thread(&client).await?;
        let acked = client.emergency_ack(thread, member.clone(), a.broadcast).await.map_err(ClientError::from)?;
        (member, acked)
    };
    if acked.is_empty() {
        outln!("{member} owes no acknowledgement")?;
    }
    for x in &acked {
        outln!("{member} acknowledged {} (message #{})", x.broadcast, x.seq)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct AcksArgs {
    /// Acknowledged ones too
    #[arg(long)]
    all: bool,
    /// Only this thread [default: every thread]
    #[arg(long, value_name = "ID")]
    thread: Option<String>,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn acks(ctx: &Ctx, a: AcksArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let acks = client.emergency_pending(a.thread, Some(a.all)).await.map_err(ClientError::from)?;
    if a.json {
        print_json(&acks)?;
        return Ok(ExitCode::SUCCESS);
    }
    if acks.is_empty() {
        outln!("no acknowledgements pending")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["BROADCAST", "THREAD", "MESSAGE", "MEMBER", "ACKNOWLEDGED"]);
    for x in &acks {
        let how = if x.acknowledged { format!("yes ({})", x.how.as_deref().unwrap_or("")) } else { "pending".into() };
        t.row(vec![x.broadcast.clone(), x.thread.clone(), format!("#{}", x.seq), x.member.clone(), how]);
    }
    out!("{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}

/// Exit status of `kd claim` when another member holds the resource.
pub const EXIT_RACE: u8 = 5;

#[derive(Debug, Args)]
pub struct ClaimArgs {
    /// The resource: a path, a branch, any name
    resource: String,
    /// Declare a read instead of a write
    #[arg(long)]
    read: bool,
    /// How long the write holds it, in milliseconds [default: 5000]
    #[arg(long, value_name = "MS")]
    window_ms: Option<u64>,
    #[command(flatten)]
    who: Who,
    /// Print JSON
    #[arg(long)]
    json: bool,
}

pub async fn claim(ctx: &Ctx, a: ClaimArgs) -> anyhow::Result<ExitCode> {
    let client = ctx.client().await?;
    let check = if let Some((token, _)) = a.who.capability(&client).await? {
        if a.window_ms.is_some() {
            anyhow::bail!("--window-ms is not taken inside a run: a member's write is held for the default window");
        }
        let mode = if a.read { ClaimMode::Read } else { ClaimMode::Write };
        client.member_claim(token, a.resource.clone(), Some(mode)).await
    } else {
        let agent = a.who.member();
        let thread = a.who.thread.clone().or_else(|| env("KD_THREAD"));
        if a.read {
            client.resource_read(a.resource.clone(), agent, thread).await
        } else {
            client.resource_write(a.resource.clone(), agent, thread, a.window_ms).await
        }
    }
    .map_err(ClientError::from)?;
    if a.json {
        print_json(&check)?;
    }
    let writers = check.writers.join(", ");
    match (check.access, check.status) {
        (_, RaceStatus::Rejected) => {
            if !a.json {
                errln!(
                    "kd: {} is being written by {writers}; retry in {} ms",
                    a.resource,
                    check.backoff_ms.unwrap_or(0)
                );
            }
            Ok(ExitCode::from(EXIT_RACE))
        }
        (Access::Read, RaceStatus::Warning) => {
            if !a.json {
                errln!("kd: warning: {} is being written by {writers}; what you read may be stale", a.resource);
            }
            Ok(ExitCode::SUCCESS)
        }
        (Access::Write, _) => {
            if !a.json {
                outln!("claimed {} for writing", a.resource)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        (Access::Read, _) => Ok(ExitCode::SUCCESS),
    }
}
