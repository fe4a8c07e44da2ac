//! `kd ask`: send the King's question, stream the answers as they come
//! (shown by [`super::answers`]).

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use jsonrpsee::core::client::Subscription;
use kd_client::follow::{self, Follow, Next};
use kd_client::prelude::*;
use kd_client::style::Palette;
use kd_client::{Client, ClientError, workspace};
use kd_proto::ErrorCode;
use kd_proto::types::{Completion, ExchangeState, Lineage, NewThread, RunStatus, Sent, Thread, ThreadEvent};

use super::Ctx;
use super::answers::View;
use super::asking::Asking;
use super::burst::Burst;

/// Exit status when one or more members failed, timed out or were cancelled.
pub const EXIT_MEMBER_FAILED: u8 = 4;

#[derive(Debug, Args)]
pub struct AskArgs {
    /// The question (`-` reads it from stdin)
    #[arg(required = true, value_name = "QUESTION")]
    question: Vec<String>,
    /// Ask in this thread [default: the current thread of this workspace and branch]
    #[arg(long, value_name = "ID")]
    thread: Option<String>,
    /// Start a new thread (it becomes the current one)
    #[arg(long, conflicts_with = "thread")]
    new: bool,
    /// How the new thread gives agents the conversation
    #[arg(long, value_enum, requires = "new", value_name = "MODE")]
    context: Option<super::Context>,
    /// The new thread's title [default: the question's first line]
    #[arg(long, requires = "new", value_name = "TITLE")]
    title: Option<String>,
    /// Ask only these members
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    to: Vec<String>,
    /// Do not ask these members
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    mute: Vec<String>,
    /// Send and return at once, printing the thread id
    #[arg(long = "async")]
    no_wait: bool,
    /// Print the thread's events as JSON lines
    #[arg(long)]
    json: bool,
    /// Seconds each member may take
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Discussion rounds after the first [default: council.auto_rounds]
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,
    /// Take the first good answer and cancel the other members
    #[arg(long, conflicts_with_all = ["vote", "synthesize", "no_wait"])]
    first: bool,
    /// Each member ranks the others' anonymised answers; show the tally and the winner
    #[arg(long, conflicts_with = "no_wait")]
    vote: bool,
    /// A chair member writes one final answer from all answers (after the vote with --vote)
    #[arg(long, value_name = "CHAIR", conflicts_with = "no_wait")]
    synthesize: Option<String>,
    /// When kdd goes away, reconnect for up to this long and go on (0: exit at once)
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    reconnect: u64,
}

pub async fn run(ctx: &Ctx, a: AskArgs) -> anyhow::Result<ExitCode> {
    let question = if a.question == ["-"] {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("cannot read the question from stdin")?;
        s
    } else {
        a.question.join(" ")
    };
    if question.trim().is_empty() {
        anyhow::bail!("the question is empty");
    }
    // Listened for from here on: a Ctrl+C before the question is sent
    // leaves without sending it; one while it is sent cancels its runs
    // once it is (kd died of it, and left the members answering).
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    // The workspace's current thread is asked for beside the greeting (one
    // round trip fewer), when that is the thread asked in.
    let here = match (&a.thread, a.new) {
        (None, false) => Some(workspace::current()?),
        _ => None,
    };
    let completing = a.first || a.vote || a.synthesize.is_some();
    let to = (!a.to.is_empty()).then_some(a.to.clone());
    let mute = (!a.mute.is_empty()).then_some(a.mute.clone());
    let mut pressed = false;
    // The usual question, in the workspace's current thread: asked beside
    // the greeting by one call that subscribes too (`council.ask`, a round
    // trip fewer; issue 31, item 17). A Ctrl+C until kdd is reached leaves
    // at once, nothing sent; once the question is on its way, it cancels
    // its runs once it is asked, and a second leaves at once.
    // A question too large for the smallest limit a daemon may have waits
    // for the greeting to say its own (asked as below, refused by kd when
    // it is over it).
    let mut in_one = None;
    let new = here.as_ref().map(|ws| new_thread(ws.clone(), false, None, None));
    if let (Some(new), false) = (new, completing)
        && fits_before_the_greeting(&new, &question, &to, &mute, kd_client::shell_path().as_deref())
    {
        let (question, to, mute) = (&question, &to, &mute);
        // Set as the question goes out (after the connection and the
        // upgrade, a start of kdd among them).
        let sending = std::cell::Cell::new(false);
        let asking = ctx.client_then(async |rpc: &kd_client::WsClient| {
            sending.set(true);
            ask_in_one(rpc, new.clone(), question.clone(), to.clone(), mute.clone(), a.timeout, a.rounds).await
        });
        tokio::pin!(asking);
        let (client, asked) = loop {
            tokio::select! {
                done = &mut asking => break done?,
                _ = interrupt.recv() => {
                    if pressed || !sending.get() {
                        return Ok(ExitCode::from(130));
                    }
                    pressed = true;
                }
            }
        };
        match asked {
            Ok(asked) => in_one = Some((client, asked)),
            // A trunk made meanwhile by another question, or a daemon from
            // before `council.ask`: nothing was asked; asked as below (not
            // after a Ctrl+C).
            Err(e)
                if e.code() == Some(ErrorCode::AlreadyExists) || matches!(e, ClientError::Rpc { code: -32601, .. }) =>
            {
                if pressed {
                    return Ok(ExitCode::from(130));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let (client, workspace, (thread, since, sub, sent)) = match in_one {
        Some((client, asked)) => (client, here.map(|ws| ws.root.display().to_string()).unwrap_or_default(), asked),
        None => {
            // Until the question is sent, Ctrl+C leaves at once.
            let reached = async {
                let (client, current) = ctx
                    .client_then(async |rpc: &kd_client::WsClient| match &here {
                        Some(ws) => Some(rpc.thread_current(ws.root.display().to_string(), ws.branch.clone()).await),
                        None => None,
                    })
                    .await?;
                let target = match (current, here) {
                    (Some(current), Some(ws)) => match current.map_err(ClientError::from)? {
                        Some(t) => Target::Existing(t),
                        None => Target::New(new_thread(ws, false, a.context, a.title.clone())),
                    },
                    _ => resolve_thread(&client, a.thread.clone(), a.new, a.context, a.title.clone()).await?,
                };
                anyhow::Ok((client, target))
            };
            let (client, mut target) = tokio::select! {
                reached = reached => reached?,
                _ = interrupt.recv() => return Ok(ExitCode::from(130)),
            };
            if completing {
                return complete(ctx, client, target, question, a).await;
            }
            let asked = loop {
                let (id, since, new_thread) = match &target {
                    Target::Existing(t) => (t.id.clone(), t.last_seq, None),
                    Target::New(spec) => (kd_client::new_thread_id(), 0, Some(spec.clone())),
                };
                // Subscribed beside the sending, one round trip fewer (issue 31,
                // item 17): from the thread as it was before, so nothing of the
                // exchange is missed whichever kdd takes first — what came before
                // the subscription is in its backlog, with how the exchange ended
                // if it is already over.
                let pending = new_thread.is_some().then_some(true);
                let (sub, sent) = {
                    let sending = async {
                        tokio::join!(
                            client.thread_subscribe(id.clone(), Some(since), pending),
                            client.council_send(
                                id.clone(),
                                question.clone(),
                                to.clone(),
                                mute.clone(),
                                None,
                                a.timeout,
                                None,
                                a.rounds,
                                new_thread.clone(),
                                kd_client::shell_path(),
                            )
                        )
                    };
                    // Sent or not, the question is awaited: a Ctrl+C meanwhile cancels
                    // its runs once it is (below); a second leaves at once.
                    tokio::pin!(sending);
                    loop {
                        tokio::select! {
                            done = &mut sending => break done,
                            _ = interrupt.recv() => {
                                if pressed {
                                    return Ok(ExitCode::from(130));
                                }
                                pressed = true;
                            }
                        }
                    }
                };
                let sent = sent.map_err(ClientError::from);
                match sent {
                    // The workspace's trunk was made meanwhile (by a question asked
                    // at the same time): ask there. Or a new thread's id was taken:
                    // draw another.
                    Err(e) if new_thread.is_some() && e.code() == Some(ErrorCode::AlreadyExists) => {
                        target = resolve_thread(&client, None, a.new, a.context, a.title.clone()).await?;
                    }
                    sent => {
                        let sent = sent?;
                        break (id, since, sub.map_err(ClientError::from)?, sent);
                    }
                }
            };
            let workspace = workspace_of(&target);
            (client, workspace, asked)
        }
    };
    let mut interrupted = false;
    if pressed || caught(&mut interrupt).await {
        interrupted = true;
        for r in &sent.runs {
            let _ = client.run_cancel(thread.clone(), None, Some(r.run.id.clone())).await;
        }
        if a.no_wait {
            return Ok(ExitCode::from(130));
        }
    }
    if let Some(notice) = &sent.notice {
        errln!("kd: {notice}");
    }
    for r in sent.runs.iter().filter(|r| r.run.status == RunStatus::Queued) {
        errln!("kd: {} is still answering an earlier message; yours is queued behind it", r.run.member);
    }
    if a.no_wait {
        if a.json {
            outln!("{}", serde_json::to_string(&sent)?)?;
        } else {
            outln!("{thread}")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let stdout = std::io::stdout();
    let color = !a.json && ctx.styled();
    let mut view = View::new(&sent, color, a.json);
    if color {
        // Colours as the workspace's council has them (overrides included).
        let config = client.config_get(workspace, kd_client::shell_path()).await.ok();
        view.palette = Palette::from_config(config.as_ref(), &sent.members);
    }
    let mut out = Burst::new(stdout.lock());
    // Rides through a restart of kdd: the notices go to stderr, so stdout
    // stays the answers.
    let mut follow = Follow::new(client, sub, thread.clone(), since, Duration::from_secs(a.reconnect));
    // One listener for the whole exchange: a Ctrl+C that comes while an
    // event is being shown is not lost.
    // An approval a member waits on is asked here, answered with a key.
    let mut asking = Asking::new(!a.json, color);
    while !view.all_done() {
        tokio::select! {
            // In this order: what came at once is shown at once, written
            // when nothing more is there (one write, not one a line).
            biased;
            _ = interrupt.recv() => {
                // The first Ctrl+C cancels the runs (through the connection
                // of the moment); the second leaves at once.
                if interrupted {
                    return Ok(ExitCode::from(130));
                }
                interrupted = true;
                if let Ok(client) = follow.client() {
                    for id in view.pending() {
                        let _ = client.run_cancel(thread.clone(), None, Some(id)).await;
                    }
                }
            }
            next = follow.next() => match next {
                Next::Event(e) => {
                    view.on_event(&e, &mut out)?;
                    asking.follow(&e, &mut view, &mut out)?;
                }
                Next::Reconnecting => {
                    out.flush()?;
                    errln!("kd: kdd went away; reconnecting (up to {} s)…", a.reconnect);
                }
                Next::Reconnected => {
                    out.flush()?;
                    errln!("kd: reconnected");
                    view.reconnected();
                    if let Some(last) = exchange_end(follow.client()?, &thread, sent.message.seq).await {
                        view.exchange_ends_at(last);
                    }
                    asking.reconnected(follow.client()?, &thread, |ap| ap.run.as_deref().is_some_and(|r| view.owns(r))).await?;
                }
                Next::Gone(e) => return Err(e.into()),
            },
            () = std::future::ready(()), if out.holds() => out.flush()?,
            choice = asking.choice() => asking.decide(choice, follow.client()?).await?,
        }
    }
    view.finish(&mut out)?;
    out.flush()?;
    drop(out);
    let failures = view.failures();
    for f in &failures {
        errln!("kd: {f}");
    }
    Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_MEMBER_FAILED) })
}

/// Whether a Ctrl+C came since `interrupt` was last asked.
async fn caught(interrupt: &mut tokio::signal::unix::Signal) -> bool {
    // Polled once: a notice already there is taken, none is waited for
    // (not even the timer's next tick, as a zero timeout would).
    std::future::poll_fn(|cx| std::task::Poll::Ready(interrupt.poll_recv(cx).is_ready())).await
}

/// Where the exchange begun by message `seq` ends, if it is over, as the
/// daemon's journal says after a reconnect: its last answer's seq, which
/// the backlog brings. A daemon without a journal of it (none for that
/// message, or a daemon from before journals) cannot go on with it: what it
/// left is in the backlog, and then it is over. Open (`None`): the daemon
/// goes on with it, and its events say when it ends.
async fn exchange_end(client: &Client, thread: &str, seq: u64) -> Option<u64> {
    match client.exchange_get(thread.to_string(), seq).await.map_err(ClientError::from) {
        // Over: its last message is the last one to show.
        Ok(x) if x.state != ExchangeState::Open => {
            Some(x.steps.iter().filter_map(|s| s.message_seq).max().unwrap_or(0))
        }
        Ok(_) => None,
        // Gone again: the follower notices, and asks again once back.
        Err(e) if e.is_connection() => None,
        Err(_) => Some(0),
    }
}

/// `--first`, `--vote`, `--synthesize`: one `completion.agents` call. On
/// the way the answers, ballots, tally and synthesis stream as `kd ask`
/// shows answers; the summary follows. With `--json`, the completion alone.
async fn complete(ctx: &Ctx, client: Client, target: Target, question: String, a: AskArgs) -> anyhow::Result<ExitCode> {
    use kd_proto::types::{Aggregation, Wait};
    let mut target = target;
    let (thread, since, workspace) = loop {
        match target {
            Target::Existing(t) => break (t.id, t.last_seq, t.workspace),
            Target::New(n) => {
                let made = client
                    .thread_create(n.workspace, n.branch, n.title, None, None, n.lineage, None, Some(true), n.context)
                    .await
                    .map_err(ClientError::from);
                match made {
                    Ok(t) => break (t.id, t.last_seq, t.workspace),
                    // The workspace's trunk was made meanwhile: ask there.
                    Err(e) if e.code() == Some(ErrorCode::AlreadyExists) => {
                        target = resolve_thread(&client, None, a.new, a.context, a.title.clone()).await?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    let aggregation = match (&a.synthesize, a.vote) {
        (Some(_), _) => Aggregation::Synthesize,
        (None, true) => Aggregation::Vote,
        (None, false) => Aggregation::None,
    };
    let wait = if a.first { Wait::First } else { Wait::All };
    let to = (!a.to.is_empty()).then_some(a.to);
    // Subscribed before asking, so nothing of the completion is missed.
    let sub = client.thread_subscribe(thread.clone(), Some(since), None).await.map_err(ClientError::from)?;
    // A completion lasts as long as its members take: no request timeout.
    let mut long = ctx.client_waiting().await?;
    // The completion's name: asked again after a reconnect, the daemon
    // attaches the call to the completion it runs under that name.
    let id = format!("c-{}", kd_client::new_thread_id());
    let patience = Duration::from_secs(a.reconnect);
    let color = !a.json && ctx.styled();
    let mut view = View::following(color, Palette::default());
    if color {
        let config = client.config_get(workspace, kd_client::shell_path()).await.ok();
        view.palette = Palette::from_config(config.as_ref(), &[]);
    }
    let stdout = std::io::stdout();
    let mut out = Burst::new(stdout.lock());
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut interrupted = false;
    let mut live = !a.json;
    let mut follow = Follow::new(client, sub, thread.clone(), since, patience);
    let mut asking = Asking::new(!a.json, color);
    let c = loop {
        let answered = {
            let call = long.completion_agents(
                thread.clone(),
                question.clone(),
                to.clone(),
                Some(wait),
                a.timeout,
                Some(aggregation),
                Some(a.vote),
                a.synthesize.clone(),
                Some(id.clone()),
                kd_client::shell_path(),
            );
            tokio::pin!(call);
            loop {
                tokio::select! {
                    // Events first, written when nothing more is there.
                    biased;
                    _ = interrupt.recv() => {
                        // The first Ctrl+C cancels the runs (the completion then
                        // ends with what it has); the second leaves at once.
                        if interrupted {
                            return Ok(ExitCode::from(130));
                        }
                        interrupted = true;
                        if let Ok(client) = follow.client() {
                            let _ = client.run_cancel(thread.clone(), None, None).await;
                        }
                    }
                    next = follow.next(), if live => match next {
                        Next::Event(e) => {
                            view.on_event(&e, &mut out)?;
                            asking.follow(&e, &mut view, &mut out)?;
                        }
                        Next::Reconnecting => {
                            out.flush()?;
                            errln!("kd: kdd went away; reconnecting (up to {} s)…", a.reconnect);
                        }
                        Next::Reconnected => {
                            out.flush()?;
                            errln!("kd: reconnected");
                        }
                        // The result still comes whole at the end.
                        Next::Gone(_) => live = false,
                    },
                    () = std::future::ready(()), if out.holds() => out.flush()?,
                    done = &mut call => match done.map_err(ClientError::from) {
                        Ok(c) => break Some(c),
                        // kdd went away during the call: once it is back, ask
                        // again under the same name.
                        Err(e) if e.is_connection() && !patience.is_zero() => break None,
                        Err(e) => return Err(e.into()),
                    },
                    choice = asking.choice() => asking.decide(choice, follow.client()?).await?,
                }
            }
        };
        match answered {
            Some(c) => break c,
            None => long = reconnect_waiting(ctx, patience).await?,
        }
    };
    if a.json {
        outln!("{}", serde_json::to_string(&c)?)?;
    } else {
        // What the completion wrote may still be on its way to us.
        let last = completion_seqs(&c).max().unwrap_or(c.seq);
        while live && !view.settled(last) {
            out.flush()?;
            match follow.next().await {
                Next::Event(e) if !matches!(e, ThreadEvent::Lagged { .. }) => view.on_event(&e, &mut out)?,
                Next::Reconnecting | Next::Reconnected => {}
                _ => live = false,
            }
        }
        view.finish(&mut out)?;
        if !live {
            print_completion(&c, &mut out)?;
        }
        let m = &c.summary;
        writeln!(
            out,
            "\n{} asked · {} answered · {} errors · {} timeouts · {} cancelled · ${:.4}",
            m.total, m.completed, m.errors, m.timeouts, m.cancelled, m.cost_usd
        )?;
    }
    out.flush()?;
    let failed = c.summary.errors + c.summary.timeouts > 0;
    Ok(if failed { ExitCode::from(EXIT_MEMBER_FAILED) } else { ExitCode::SUCCESS })
}

/// A connection without a request timeout again, for at most `patience`,
/// with the follower's backoff.
async fn reconnect_waiting(ctx: &Ctx, patience: Duration) -> Result<Client, ClientError> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut wait = follow::FIRST_BACKOFF;
    loop {
        match ctx.client_waiting().await {
            Ok(c) => return Ok(c),
            Err(e @ (ClientError::Protocol { .. } | ClientError::Untrusted { .. })) => return Err(e),
            Err(e) if tokio::time::Instant::now() + wait > deadline => return Err(e),
            Err(_) => {}
        }
        tokio::time::sleep(wait).await;
        wait = follow::backoff(wait);
    }
}

/// Every message a completion wrote.
fn completion_seqs(c: &Completion) -> impl Iterator<Item = u64> + '_ {
    let parts = c.parts.iter().chain(c.synthesis.iter()).filter_map(|p| p.seq);
    let tally = c.tally.iter().flat_map(|t| t.ballots.iter().filter_map(|b| b.seq).chain(t.seq));
    parts.chain(tally).chain(c.merged)
}

/// The completion whole, when it could not be followed live.
fn print_completion(c: &Completion, out: &mut impl Write) -> anyhow::Result<()> {
    use kd_proto::types::PartStatus;
    let safe = |s: &str| kd_client::terminal::safe(s).into_owned();
    for p in &c.parts {
        let status = match p.status {
            PartStatus::Done => String::new(),
            other => format!(" · {}", serde_json::to_value(other)?.as_str().unwrap_or_default()),
        };
        writeln!(out, "── {}{status} ──\n{}\n", p.member, safe(p.text.trim()))?;
    }
    if let Some(t) = &c.tally {
        writeln!(out, "── vote ──")?;
        for s in &t.scores {
            writeln!(out, "{:>3} points · {} first · {} ({})", s.points, s.firsts, s.member, s.label)?;
        }
        writeln!(out, "Vote: {}\n", safe(&t.verdict()))?;
    }
    if let Some(s) = &c.synthesis {
        writeln!(out, "── synthesis by {} ──\n{}", s.member, safe(s.text.trim()))?;
    }
    Ok(())
}

/// Where a question goes.
enum Target {
    Existing(Thread),
    /// A thread `council.send` creates with the question, once accepted.
    New(NewThread),
}

fn workspace_of(target: &Target) -> String {
    match target {
        Target::Existing(t) => t.workspace.clone(),
        Target::New(n) => n.workspace.clone(),
    }
}

/// The thread to ask in: named, new, or the current one (a new one made
/// current when there is none).
async fn resolve_thread(
    client: &Client,
    id: Option<String>,
    new: bool,
    context: Option<super::Context>,
    title: Option<String>,
) -> anyhow::Result<Target> {
    if let Some(id) = id {
        return Ok(Target::Existing(client.thread_get(id).await.map_err(ClientError::from)?));
    }
    let ws = workspace::current()?;
    let root = ws.root.display().to_string();
    if !new && let Some(t) = client.thread_current(root, ws.branch.clone()).await.map_err(ClientError::from)? {
        return Ok(Target::Existing(t));
    }
    Ok(Target::New(new_thread(ws, new, context, title)))
}

/// The thread a question in `ws` creates: a new one (`new`), or the
/// workspace's first.
fn new_thread(
    ws: workspace::Workspace,
    new: bool,
    context: Option<super::Context>,
    title: Option<String>,
) -> NewThread {
    NewThread {
        workspace: ws.root.display().to_string(),
        branch: ws.branch,
        title,
        context: context.map(Into::into),
        set_current: true,
        // Without --new, the workspace's first thread: questions asked at
        // the same time share it, whichever creates it.
        lineage: (!new).then_some(Lineage::Trunk),
    }
}

/// Whether `council.ask` of `question` is within the smallest request
/// limit a daemon takes, with room for the rest of the request.
fn fits_before_the_greeting(
    new: &NewThread,
    question: &str,
    to: &Option<Vec<String>>,
    mute: &Option<Vec<String>>,
    path: Option<&str>,
) -> bool {
    // The method, the id, the protocol, the thread's id, the numbers.
    const ENVELOPE: usize = 256;
    let params = serde_json::json!([new, question, to, mute, path]);
    let size = serde_json::to_vec(&params).map_or(usize::MAX, |p| p.len());
    size.saturating_add(ENVELOPE) <= kd_proto::SMALLEST_REQUEST_LIMIT as usize
}

/// `council.ask`: the question asked in the current thread of `new`'s
/// workspace and branch (or in `new`, made with it), subscribed to — the
/// thread, the seq its events follow, the subscription and what was sent.
async fn ask_in_one(
    rpc: &kd_client::WsClient,
    new: NewThread,
    question: String,
    to: Option<Vec<String>>,
    mute: Option<Vec<String>>,
    timeout: Option<u64>,
    rounds: Option<u32>,
) -> Result<(String, u64, Subscription<ThreadEvent>, Sent), ClientError> {
    let id = kd_client::new_thread_id();
    let mut sub = rpc
        .council_ask(kd_proto::PROTOCOL_VERSION, id, new, question, to, mute, timeout, rounds, kd_client::shell_path())
        .await?;
    match sub.next().await {
        Some(Ok(ThreadEvent::Asked { thread, since, sent })) => Ok((thread, since, sub, *sent)),
        Some(Ok(other)) => Err(ClientError::Transport(format!("council.ask began with {other:?}, not asked"))),
        Some(Err(e)) => Err(ClientError::Transport(format!("council.ask's first item: {e}"))),
        None => Err(ClientError::Transport("council.ask ended before its first item".into())),
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::*;

    use super::{caught, fits_before_the_greeting, print_completion};

    /// Asked whether a Ctrl+C came, `caught` answers at once: no timer is
    /// waited for (a zero timeout waits for the runtime's next
    /// millisecond tick).
    #[tokio::test]
    async fn whether_a_ctrl_c_came_is_answered_without_a_wait() {
        let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).unwrap();
        assert_eq!(futures_util::FutureExt::now_or_never(caught(&mut interrupt)), Some(false));
    }

    #[test]
    fn a_question_goes_beside_the_greeting_only_within_the_smallest_request_limit() {
        let new = NewThread {
            workspace: "/home/king/project".into(),
            branch: Some("main".into()),
            title: None,
            context: None,
            set_current: true,
            lineage: Some(Lineage::Trunk),
        };
        let path = Some("/usr/local/bin:/usr/bin:/bin");
        assert!(fits_before_the_greeting(&new, "What does this do?", &None, &None, path));
        assert!(!fits_before_the_greeting(&new, &"q".repeat(4096), &None, &None, path));
        // Counted as sent: 700 control characters are 4,200 bytes escaped.
        assert!(!fits_before_the_greeting(&new, &"\u{1}".repeat(700), &None, &None, path));
        assert!(fits_before_the_greeting(&new, &"q".repeat(600), &None, &None, path));
        // The PATH sent with it counts too.
        let long = "/opt/tool/bin:".repeat(280);
        assert!(!fits_before_the_greeting(&new, "What does this do?", &None, &None, Some(&long)));
    }

    #[test]
    fn a_completion_printed_whole_says_a_tie_is_a_tie() {
        let score =
            |member: &str, label: &str| Score { member: member.into(), label: label.into(), points: 0, firsts: 1 };
        let tally = Tally {
            labels: vec![],
            ballots: vec![],
            scores: vec![score("alpha", "Response A"), score("beta", "Response B")],
            winner: None,
            seq: Some(5),
            tie: Some(Tie { members: vec!["alpha".into(), "beta".into()], broken_by: TieBreak::King, chair: None }),
        };
        let summary = Summary { total: 2, completed: 2, errors: 0, timeouts: 0, cancelled: 0, cost_usd: 0.0 };
        let c = Completion {
            id: "c-1".into(),
            thread: "t".into(),
            seq: 1,
            wait: Wait::All,
            aggregation: Aggregation::Vote,
            parts: vec![],
            merged: None,
            tally: Some(tally),
            synthesis: None,
            summary,
        };
        let mut out = Vec::new();
        print_completion(&c, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("Vote: tie between alpha and beta on 0 points and 1 first place each: left to the King."),
            "{out}"
        );
        assert!(!out.contains("winner") && !out.contains("no ranking"), "{out}");
    }
}
