//! `kd chat`: the streaming group-chat TUI (ratatui + crossterm).
//!
//! A view and input layer over the daemon: [`app`] holds the state,
//! [`live`] is how the thread's events change it, [`view`] draws it,
//! [`keys`] maps input, [`input`] is what a submitted line does,
//! [`commands`] parses slash commands, [`council`] is what the chat asks of
//! the council beyond a message (votes, syntheses, `/cancel`, `/cost`) and
//! whose runs are in flight, [`requests`] the requests made without waiting
//! and what their answers do, [`diff`] shows members' work, [`ship`] takes
//! it on to shipping (`/check`, `/rebase`, `/pr`, `/review`), [`approvals`]
//! asks the King what members' CLIs ask permission for, [`wrap`] wraps
//! styled text. This module runs the loop: one `select!` over terminal
//! input, the thread's subscription, answers to requests, signals and a
//! capped redraw deadline — nothing runs while nothing happens.

pub mod app;
pub mod approvals;
pub mod attention;
pub mod commands;
pub mod council;
pub mod diff;
pub mod input;
pub mod keys;
pub mod live;
pub mod requests;
pub mod ship;
pub mod view;
pub mod wrap;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use futures_util::StreamExt;
use jsonrpsee::core::client::Subscription;
use kd_client::prelude::*;
use kd_client::{Client, ClientError, workspace};
use kd_proto::types::{ContextMode, Message, NewThread, Thread, ThreadEvent};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture, EventStream,
    KeyboardEnhancementFlags, PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode, supports_keyboard_enhancement,
};
use tokio::sync::mpsc;

use crate::cmd::Ctx;
use app::{App, Effect, Overlay};
use requests::{Reply, complete, on_reply, request};

/// Shortest time between two frames.
const FRAME: Duration = Duration::from_millis(33);
/// Pause between reconnection attempts.
const RECONNECT: Duration = Duration::from_millis(500);

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Thread id [default: the current thread of this workspace and branch]
    thread: Option<String>,
    /// Start a new thread
    #[arg(long, conflicts_with = "thread")]
    new: bool,
    /// How the new thread gives agents the conversation
    #[arg(long, value_enum, requires = "new", value_name = "MODE")]
    context: Option<crate::cmd::Context>,
}

pub async fn run(ctx: &Ctx, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        anyhow::bail!(
            "kd chat draws on a terminal, and its output is not one (kd ask and kd watch print to a pipe or a file)"
        );
    }
    let client = Arc::new(ctx.client().await?);
    let ws = workspace::current()?;
    let root = ws.root.display().to_string();
    let mut pending = None;
    let opening: Option<Thread> = match (args.thread, args.new) {
        (Some(id), _) => Some(client.thread_get(id).await.map_err(ClientError::from)?),
        (None, true) => {
            let (thread, spec) = pending_thread(&root, ws.branch.clone(), args.context.map(Into::into));
            pending = Some(spec);
            Some(thread)
        }
        (None, false) => client.thread_current(root.clone(), ws.branch.clone()).await.map_err(ClientError::from)?,
    };
    let recent = client.thread_list(Some(root.clone()), None, Some(20)).await.map_err(ClientError::from)?;
    let guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout())).context("cannot open the terminal")?;
    let placeholder = || pending_thread(&root, ws.branch.clone(), None).0;
    let mut app = App::new(opening.clone().unwrap_or_else(placeholder));
    let mut client = client;
    let mut sub: Option<Subscription<ThreadEvent>> = None;
    match opening {
        Some(t) => sub = open(&client, &mut app, t, pending).await.ok(),
        // No current thread: pick one of the recent ones or start anew.
        None => app.overlay = Some(Overlay::Threads { threads: recent, selected: 0 }),
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Reply>();
    let mut input = EventStream::new();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut last_frame = Instant::now() - FRAME;
    let mut first_paint = true;
    let mut reconnect_at: Option<tokio::time::Instant> = None;
    // The connection of this chat's completion in flight: it has no request
    // timeout, and Esc interrupts the runs it started.
    let mut completion: Option<Arc<Client>> = None;
    let mut exit = false;
    let mut terminated = false;
    while !exit {
        if app.dirty {
            let due = last_frame + FRAME;
            if Instant::now() >= due {
                terminal.draw(|f| view::draw(f, &mut app)).context("cannot draw")?;
                last_frame = Instant::now();
                if first_paint {
                    first_paint = false;
                    note_first_paint(started.elapsed());
                }
            }
        }
        let redraw_at = tokio::time::Instant::from_std(last_frame + FRAME);
        let effects: Vec<Effect> = tokio::select! {
            ev = input.next() => match ev {
                Some(Ok(ev)) => {
                    // The King is here: the title no longer calls them.
                    if app.attention.flagged {
                        app.attention.flagged = false;
                        let plain = attention::title(None, app.thread.title.as_deref().unwrap_or(&app.thread.id));
                        let _ = execute!(std::io::stdout(), ratatui::crossterm::terminal::SetTitle(plain));
                    }
                    keys::on_event(&mut app, ev)
                }
                Some(Err(_)) | None => vec![Effect::Exit],
            },
            ev = next_event(&mut sub) => {
                match ev {
                    Some(e) => {
                        app.apply(&e);
                        if let Some(what) = app.attention.take() {
                            // The bell, and the title says what needs the King.
                            let about = attention::title(Some(&what), app.thread.title.as_deref().unwrap_or(&app.thread.id));
                            let _ = execute!(
                                std::io::stdout(),
                                ratatui::crossterm::style::Print("\x07"),
                                ratatui::crossterm::terminal::SetTitle(about)
                            );
                        }
                    }
                    None => {
                        sub = None;
                        app.connected = false;
                        app.dirty = true;
                        reconnect_at = Some(tokio::time::Instant::now() + RECONNECT);
                    }
                }
                if app.quitting && app.my_runs_in_flight() == 0 {
                    vec![Effect::Exit]
                } else {
                    vec![]
                }
            }
            Some(reply) = rx.recv() => {
                if matches!(reply, Reply::Completed(_)) {
                    completion = None;
                }
                on_reply(&mut app, reply)
            }
            _ = tokio::time::sleep_until(redraw_at), if app.dirty => vec![],
            _ = sleep_until(reconnect_at) => {
                reconnect_at = None;
                match Client::connect_or_start(client.socket()).await {
                    Ok(c) => {
                        client = Arc::new(c);
                        let thread = app.thread.clone();
                        let pending = app.pending_new.clone();
                        match open(&client, &mut app, thread, pending).await {
                            Ok(s) => {
                                sub = Some(s);
                                app.connected = true;
                                app.set_notice("reconnected to kdd");
                            }
                            Err(_) => reconnect_at = Some(tokio::time::Instant::now() + RECONNECT),
                        }
                    }
                    Err(_) => reconnect_at = Some(tokio::time::Instant::now() + RECONNECT),
                }
                app.dirty = true;
                vec![]
            }
            _ = term.recv() => {
                terminated = true;
                vec![Effect::Exit]
            }
        };
        let leaving = effects.contains(&Effect::Exit);
        for effect in effects {
            match effect {
                Effect::Exit => exit = true,
                // Esc during /quit: the runs are stopped before the process goes.
                Effect::Interrupt if leaving => {
                    let thread = app.thread.id.clone();
                    let side = completion.clone();
                    let stop = async {
                        if let Some(side) = side {
                            let _ = side.council_interrupt(thread.clone(), None).await;
                        }
                        client.council_interrupt(thread, None).await
                    };
                    // Leaving anyway: a daemon too slow to answer is not waited for.
                    let _ = tokio::time::timeout(Duration::from_secs(2), stop).await;
                }
                // The runs of this chat's completion are its connection's:
                // both are interrupted, and the reply counts both.
                Effect::Interrupt => {
                    let (side, main, thread, tx) =
                        (completion.clone(), client.clone(), app.thread.id.clone(), tx.clone());
                    tokio::spawn(async move {
                        let mut n = 0;
                        if let Some(side) = side
                            && let Ok(i) = side.council_interrupt(thread.clone(), None).await
                        {
                            n = i.runs.len();
                        }
                        let r = main.council_interrupt(thread, None).await.map(|i| n + i.runs.len());
                        let _ = tx.send(Reply::Interrupted(r.map_err(ClientError::from)));
                    });
                }
                Effect::Complete { question, vote, chair } => {
                    match Client::connect_with(client.socket(), kd_client::NO_REQUEST_TIMEOUT).await {
                        Ok(c) => {
                            let c = Arc::new(c);
                            completion = Some(c.clone());
                            complete(c, &app, question, vote, chair, tx.clone());
                        }
                        Err(e) => {
                            app.completing = None;
                            app.set_notice(e.to_string());
                        }
                    }
                }
                Effect::Open(id) => switch(&client, &mut app, id, &mut sub).await,
                Effect::OpenAt(id, seq) => {
                    if id != app.thread.id {
                        switch(&client, &mut app, id, &mut sub).await;
                    }
                    app.jump_to(seq);
                }
                // A summary made at the fork is a member's run: asked on a
                // connection without a request timeout.
                // So is a push and gh's pull request (each bounded by kdd).
                effect @ (Effect::Fork { carry: Some(kd_proto::types::Carry::Summary), .. } | Effect::Pr { .. }) => {
                    match Client::connect_with(client.socket(), kd_client::NO_REQUEST_TIMEOUT).await {
                        Ok(c) => request(&Arc::new(c), &app, effect, tx.clone()),
                        Err(e) => app.set_notice(e.to_string()),
                    }
                }
                // A new thread is made by its first message (a refused one
                // leaves none behind); /new keeps the context mode.
                Effect::NewThread => {
                    let (t, spec) =
                        pending_thread(&app.thread.workspace, app.thread.branch.clone(), Some(app.thread.context));
                    sub = open(&client, &mut app, t, Some(spec)).await.ok();
                }
                other => request(&client, &app, other, tx.clone()),
            }
        }
    }
    drop(terminal);
    drop(guard);
    // Killed by SIGTERM: the shell's usual 128 + 15, after a clean restore.
    Ok(if terminated { ExitCode::from(143) } else { ExitCode::SUCCESS })
}

/// Opens thread `id` in place of the current one, or says why not.
async fn switch(client: &Client, app: &mut App, id: String, sub: &mut Option<Subscription<ThreadEvent>>) {
    match client.thread_get(id).await {
        Ok(t) => *sub = open(client, app, t, None).await.ok(),
        Err(e) => app.set_notice(ClientError::from(e).to_string()),
    }
}

/// A thread of the workspace not created yet, and how its first message
/// creates it (made current).
fn pending_thread(root: &str, branch: Option<String>, context: Option<ContextMode>) -> (Thread, NewThread) {
    let thread = Thread {
        id: kd_client::new_thread_id(),
        workspace: root.to_string(),
        branch: branch.clone(),
        title: None,
        status: kd_proto::types::ThreadStatus::Active,
        lineage: kd_proto::types::Lineage::Trunk,
        parent: None,
        members: vec![],
        context: context.unwrap_or_default(),
        created_at_ms: 0,
        last_activity_at_ms: 0,
        last_seq: 0,
        origin: None,
        summary: None,
    };
    let spec =
        NewThread { workspace: root.to_string(), branch, title: None, context, set_current: true, lineage: None };
    (thread, spec)
}

/// Loads a thread's history and subscribes to what follows it. A pending
/// thread (`new`) has no history yet: the subscription waits for it.
async fn open(
    client: &Client,
    app: &mut App,
    thread: Thread,
    new: Option<NewThread>,
) -> Result<Subscription<ThreadEvent>, ClientError> {
    let messages: Vec<Message> = match new {
        Some(_) => Vec::new(),
        // The newest page: a thread may be longer than one answer can hold.
        None => client.thread_messages(thread.id.clone(), None, None, Some(i64::MAX as u64), None).await?.into_vec(),
    };
    let mut thread = match new {
        Some(_) => thread,
        None => client.thread_get(thread.id.clone()).await.unwrap_or(thread),
    };
    let config = client.config_get(thread.workspace.clone(), kd_client::shell_path()).await.ok();
    if thread.members.is_empty() {
        // A new thread learns its members at the first message: show the council's now.
        let members = config
            .as_ref()
            .and_then(|view| view.entries.iter().find(|e| e.key == "council.members"))
            .and_then(|e| e.value.as_array().cloned());
        thread.members = members.unwrap_or_default().iter().filter_map(|m| m.as_str().map(str::to_string)).collect();
    }
    let senders: Vec<String> = messages.iter().map(|m| m.from.clone()).collect();
    app.palette = kd_client::style::Palette::from_config(config.as_ref(), &[thread.members.clone(), senders].concat());
    let last = messages.last().map(|m| m.seq).unwrap_or(0);
    // What the thread cost so far; the answers that come add to it.
    app.cost_usd = match new {
        Some(_) => 0.0,
        None => {
            client.cost_report(Some(thread.id.clone()), None, None, None).await.map(|r| r.total.cost_usd).unwrap_or(0.0)
        }
    };
    app.load(thread.clone(), &messages);
    // The members' work on it, shown under their panels (a daemon without
    // work, or a thread without any, shows none).
    if new.is_none()
        && let Ok(trees) = client.work_list(None, Some(thread.id.clone())).await
    {
        app.set_work(trees);
    }
    let pending = new.is_some().then_some(true);
    app.pending_new = new;
    app.connected = true;
    let sub = client.thread_subscribe(thread.id.clone(), Some(last), pending).await?;
    // The approvals waiting on this thread, read after subscribing: one
    // asked meanwhile comes by the subscription too (the same id, once).
    if pending.is_none()
        && let Ok(waiting) = client.approval_list(None, Some(thread.id), None).await
    {
        app.set_approvals(&waiting);
    }
    Ok(sub)
}

async fn next_event(sub: &mut Option<Subscription<ThreadEvent>>) -> Option<ThreadEvent> {
    match sub {
        Some(s) => loop {
            match s.next().await {
                Some(Ok(e)) => return Some(e),
                // An item this client cannot read is skipped, not fatal.
                Some(Err(_)) => continue,
                None => return None,
            }
        },
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes the time to the first full paint where `KD_CHAT_TIMINGS` says (for the bench).
fn note_first_paint(elapsed: Duration) {
    if let Some(path) = std::env::var_os("KD_CHAT_TIMINGS")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(f, "first_paint_ms {:.3}", elapsed.as_secs_f64() * 1000.0);
    }
}

/// Raw mode, the alternate screen, mouse and paste capture — undone on drop,
/// on panic and (through the loop) on SIGTERM.
struct TerminalGuard {
    enhanced: bool,
}

impl TerminalGuard {
    fn enter() -> anyhow::Result<TerminalGuard> {
        enable_raw_mode().context("kd chat needs a terminal to read keys from: cannot put it in raw mode")?;
        let enhanced = supports_keyboard_enhancement().unwrap_or(false);
        let mut out = std::io::stdout();
        execute!(out, EnterAlternateScreen, EnableMouseCapture, EnableBracketedPaste)
            .context("cannot set up the terminal")?;
        if enhanced {
            // Lets terminals that can report Shift+Enter apart from Enter.
            let _ = execute!(out, PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES));
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore(enhanced);
            previous(info);
        }));
        Ok(TerminalGuard { enhanced })
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore(self.enhanced);
    }
}

fn restore(enhanced: bool) {
    let mut out = std::io::stdout();
    if enhanced {
        let _ = execute!(out, PopKeyboardEnhancementFlags);
    }
    let _ = execute!(
        out,
        DisableBracketedPaste,
        DisableMouseCapture,
        LeaveAlternateScreen,
        ratatui::crossterm::cursor::Show
    );
    let _ = disable_raw_mode();
}

#[cfg(test)]
mod approval_tests;
#[cfg(test)]
mod ship_tests;
#[cfg(test)]
mod tests;
