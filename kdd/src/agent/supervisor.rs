//! One run, from start to its message (F-A3): build the prompt, spawn the
//! agent, record its pid at once, stream its deltas to subscribers as they
//! are read, append what is new to the saved partial text about once a
//! second, enforce the timeout and the answer's size cap, honour
//! cancellation (SIGINT for claude, which then reports its partial result,
//! SIGTERM for the others, SIGKILL after a grace period), kill whatever the
//! agent left running, and write the outcome as a message.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kd_proto::types::{ContextMode, RunMeta, RunStatus, Style};
use rustix::process::Signal;
use tokio::io::AsyncWriteExt;

use super::argv::{self, Invocation};
use super::lines::{Line, LineReader};
use super::parse::{self, Transcript};
use super::process;
use super::registry::{Run, StopReason};
use crate::config::{AgentDef, Backend};
use crate::db::runs::Finish;
use crate::prompt;

use super::Runner;
use super::prepare::{Held, prepare};

/// How often the text streamed so far is saved.
const SAVE_EVERY: Duration = Duration::from_secs(1);
/// How long output may keep coming after the agent exited (children that
/// inherited its stdout are killed after this).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// Bytes of stderr kept for error messages.
const STDERR_TAIL: usize = 8 * 1024;

/// What a run needs besides the run itself.
#[derive(Debug, Clone)]
pub struct Spec {
    pub agent: AgentDef,
    pub preamble: String,
    pub style: Style,
    pub context: ContextMode,
    pub workspace: PathBuf,
    pub timeout: Duration,
    /// Longest answer kept (`council.max_answer_bytes`).
    pub max_answer_bytes: u64,
    /// The thread's members: an answer naming them at the start of a line
    /// is addressed to them (a hand-off).
    pub members: Vec<String>,
    /// Given instead of the thread's history (see [`crate::council::Launch`]).
    pub prompt: Option<String>,
}

/// Runs `run` to its end and writes its message. Spawned by the council.
pub async fn supervise(d: Arc<Runner>, run: Arc<Run>, spec: Spec) {
    if let Err(e) = d.db.insert_run(run.info()).await {
        tracing::error!(run = run.id, "cannot record the run: {e}");
        run.set_status(RunStatus::Error);
        d.runs.remove(&run.id);
        run.mark_done();
        return;
    }
    let started = Instant::now();
    let mut finish = execute(&d, &run, &spec).await;
    finish.meta.duration_ms = Some(started.elapsed().as_millis() as u64);
    finish.meta.run_id = Some(run.id.clone());
    finish.meta.backend = Some(run.backend.clone());
    finish.meta.ordinal = Some(run.ordinal);
    run.set_status(finish.status);
    tracing::info!(run = run.id, member = run.member, status = finish.status.as_str(), "run ended");
    match d.db.finish_run(run.info(), finish).await {
        Ok(message) => run.set_message(message),
        Err(e) => tracing::error!(run = run.id, "cannot record the end of the run: {e}"),
    }
    d.runs.remove(&run.id);
    run.mark_done();
}

/// The run's agent is `pid` (started at `started`): said to subscribers
/// and recorded, with the session the run holds.
pub(super) async fn record_start(d: &Runner, run: &Run, pid: u32, started: Option<u64>, held: Option<&Held>) {
    run.set_started(pid);
    if let Err(e) = d.db.run_started(run.info(), pid, started, held.map(|h| h.id.clone())).await {
        tracing::error!(run = run.id, "cannot record the pid: {e}");
    }
}

pub(super) fn failed(member: &str, status: RunStatus, reason: String) -> Finish {
    let reason = format!("{member}: {reason}");
    Finish { status, body: reason.clone(), error: Some(reason), meta: RunMeta::default(), session: None, to: vec![] }
}

async fn execute(d: &Arc<Runner>, run: &Arc<Run>, spec: &Spec) -> Finish {
    let member = run.member.clone();
    let agent = &spec.agent;
    if run.stop_reason().is_some() {
        // Stopped while queued: it takes no session and reads nothing.
        return stopped_early(run);
    }
    let prepared = match prepare(d, run, spec).await {
        Ok(p) => p,
        Err(f) => return f,
    };
    let held = prepared.session.clone();
    // Before the agent runs, the session saw nothing new.
    let with_session = |mut f: Finish| {
        f.session = held.as_ref().map(|h| h.end(false));
        f
    };
    if !spec.workspace.is_dir() {
        let reason = format!("the thread's workspace {} does not exist", spec.workspace.display());
        return with_session(failed(&member, RunStatus::Error, reason));
    }
    if run.stop_reason().is_some() {
        return with_session(stopped_early(run));
    }
    if agent.transport == crate::config::Transport::AppServer {
        return super::appserver::execute(d, run, spec, prepared).await;
    }
    if agent.backend == Backend::Acp {
        return super::acp::execute(d, run, spec, prepared).await;
    }
    let mut inv = argv::build(agent, &prepared.prompt, prepared.resume.as_deref());
    // Marks the agent and all it starts, wherever they go (see kill_tree).
    inv.env.push((process::RUN_MARKER.to_string(), run.id.clone()));
    // Where the agent is, for `kd send`, `kd inbox` and `kd ack` from its shell.
    inv.env.push(("KD_SOCKET".to_string(), d.socket.display().to_string()));
    inv.env.push(("KD_THREAD".to_string(), run.thread.clone()));
    inv.env.push(("KD_MEMBER".to_string(), member.clone()));
    let mut child = match process::spawn(&inv, &spec.workspace) {
        Ok(c) => c,
        Err(e) => return with_session(failed(&member, RunStatus::Error, spawn_error(&inv, agent, &e))),
    };
    let Some(pid) = child.id() else {
        return with_session(failed(&member, RunStatus::Error, "the agent exited before it could be watched".into()));
    };
    let started = process::start_time(pid);
    record_start(d, run, pid, started, held.as_ref()).await;
    if let (Some(input), Some(mut stdin)) = (inv.stdin.clone(), child.stdin.take()) {
        tokio::spawn(async move {
            // An agent that exits without reading its input is not an error here.
            let _ = stdin.write_all(input.as_bytes()).await;
        });
    }
    let stderr = child.stderr.take().map(|err| super::lines::tail(err, STDERR_TAIL));
    let Some(stdout) = child.stdout.take() else {
        return with_session(failed(&member, RunStatus::Error, "no stdout from the agent".into()));
    };

    let mut label = prompt::LabelStripper::new(&member);
    let mut reader =
        if agent.format == crate::config::Format::Text { LineReader::raw(stdout) } else { LineReader::new(stdout) };
    let mut transcript = Transcript::new();
    let timeout = tokio::time::sleep(spec.timeout);
    tokio::pin!(timeout);
    let far = Duration::from_secs(365 * 24 * 3600);
    let kill_at = tokio::time::sleep(far);
    tokio::pin!(kill_at);
    let drain_until = tokio::time::sleep(far);
    tokio::pin!(drain_until);
    let mut save = tokio::time::interval(SAVE_EVERY);
    save.tick().await;
    let mut saved_bytes = 0usize;
    let cap = usize::try_from(spec.max_answer_bytes).unwrap_or(usize::MAX);
    let mut over_cap = false;
    let mut exit: Option<std::process::ExitStatus> = None;
    let mut signalled = false;
    loop {
        tokio::select! {
            line = reader.next() => match line {
                Ok(Some(_)) if over_cap => {
                    // Past the cap: read on (the agent is being stopped) but keep nothing.
                    while reader.next_buffered().is_some() {}
                }
                Ok(Some(first)) => {
                    // Everything this read brought becomes one delta.
                    let mut delta = String::new();
                    let mut next = Some(first);
                    while let Some(line) = next {
                        take_line(line, agent.format, &mut transcript, &mut delta, &run.id);
                        next = reader.next_buffered();
                    }
                    over_cap = !publish(d, run, &label.push(&delta), cap);
                }
                Ok(None) | Err(_) => break,
            },
            status = child.wait(), if exit.is_none() => {
                exit = status.ok();
                drain_until.as_mut().reset(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = &mut drain_until => {
                // The agent is gone but something it started holds stdout.
                process::signal_group(pid, Signal::KILL);
                break;
            }
            _ = &mut timeout, if !signalled => {
                run.stop(StopReason::TimedOut);
            }
            _ = run.stopped(), if !signalled => {
                signalled = true;
                let signal = if agent.backend == Backend::Claude { Signal::INT } else { Signal::TERM };
                process::signal_group(pid, signal);
                kill_at.as_mut().reset(tokio::time::Instant::now() + d.kill_grace);
            }
            _ = &mut kill_at => {
                process::signal_group(pid, Signal::KILL);
                kill_at.as_mut().reset(tokio::time::Instant::now() + far);
            }
            _ = save.tick() => {
                // Only what is new since the last save.
                let (new, len) = run.text_since(saved_bytes);
                if !new.is_empty() {
                    saved_bytes = len;
                    if let Err(e) = d.db.append_run_partial(run.id.clone(), new).await {
                        tracing::warn!(run = run.id, "cannot save partial text: {e}");
                    }
                }
            }
        }
    }
    if !over_cap {
        publish(d, run, &label.finish(), cap);
    }
    let exit = match exit {
        Some(e) => Some(e),
        None => match tokio::time::timeout(d.kill_grace, child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                process::signal_group(pid, Signal::KILL);
                child.wait().await.ok()
            }
        },
    };
    // Nothing the agent started outlives its run.
    let run_id = run.id.clone();
    let killed = tokio::task::spawn_blocking(move || process::kill_tree(pid, started, &run_id)).await.unwrap_or(0);
    if killed > 0 {
        tracing::debug!(run = run.id, "killed {killed} process(es) the agent left running");
    }
    let stderr = match stderr {
        Some(h) => tokio::time::timeout(Duration::from_secs(1), h).await.ok().and_then(Result::ok).unwrap_or_default(),
        None => String::new(),
    };
    let mut finish = outcome(run, spec, &transcript, exit, &stderr);
    // The session remembers the prompt when the agent took it: it answered,
    // or its backend opened a session for it.
    let given = finish.status == RunStatus::Done || transcript.session_id.is_some();
    finish.session = held.as_ref().map(|h| h.end(given));
    finish
}

/// Folds one line of output into the transcript, collecting its text.
fn take_line(line: Line, format: crate::config::Format, transcript: &mut Transcript, delta: &mut String, run: &str) {
    let items = match line {
        Line::Chunk(c) => vec![parse::Parsed::Delta(c)],
        Line::Text(l) => match parse::parse_line(format, &l) {
            Ok(items) => items,
            Err(e) => {
                tracing::debug!(run, "skipped a line: {e}");
                transcript.malformed_line();
                return;
            }
        },
        Line::NotUtf8 | Line::TooLong => {
            transcript.malformed_line();
            return;
        }
    };
    for p in items {
        if let Some(text) = transcript.apply(p) {
            delta.push_str(&text);
        }
    }
}

/// Streams `text` to subscribers as far as the answer's cap allows. Past
/// the cap the rest is dropped, the run is stopped, and false is returned.
pub(super) fn publish(d: &Runner, run: &Run, text: &str, cap: usize) -> bool {
    let room = cap.saturating_sub(run.text_len());
    let (kept, fits) =
        if text.len() <= room { (text, true) } else { (&text[..floor_char_boundary(text, room)], false) };
    if !kept.is_empty() {
        run.push_delta(&d.hub, kept);
    }
    if !fits {
        run.stop(StopReason::TooLong);
    }
    fits
}

/// The largest char boundary of `s` at or before `at`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    (0..=at.min(s.len())).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0)
}

/// A byte count as people say it: `16 MiB`, `512 KiB`, `1000 bytes`.
fn size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    match bytes {
        b if b >= KIB * KIB && b.is_multiple_of(KIB * KIB) => format!("{} MiB", b / (KIB * KIB)),
        b if b >= KIB && b.is_multiple_of(KIB) => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

pub(super) fn stopped_early(run: &Run) -> Finish {
    let status = match run.stop_reason() {
        Some(StopReason::Shutdown) => RunStatus::Interrupted,
        Some(StopReason::TimedOut) => RunStatus::TimedOut,
        _ => RunStatus::Cancelled,
    };
    Finish {
        status,
        body: "(stopped before it started)".into(),
        error: None,
        meta: RunMeta::default(),
        session: None,
        to: vec![],
    }
}

/// Why `inv` could not be spawned, and what to do about it.
pub(super) fn spawn_error(inv: &Invocation, agent: &AgentDef, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "{} not found{} — install it or set agents.{}.command",
            inv.program,
            if inv.program.contains('/') { "" } else { " in PATH" },
            agent.name
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("{} is not executable — check agents.{}.command", inv.program, agent.name)
        }
        _ => format!("cannot start {}: {e}", inv.program),
    }
}

/// What the run comes to, from how it stopped and what it said.
pub(super) fn outcome(
    run: &Run,
    spec: &Spec,
    t: &Transcript,
    exit: Option<std::process::ExitStatus>,
    stderr: &str,
) -> Finish {
    let member = &run.member;
    let result = t.result.as_ref();
    let meta = RunMeta {
        backend_session_id: t.session_id.clone(),
        cost_usd: result.and_then(|r| r.cost_usd),
        usage: result.and_then(|r| r.usage.clone()),
        exit_status: exit.and_then(|e| e.code()),
        ..RunMeta::default()
    };
    let shown = run.text();
    let with_partial = |reason: String| {
        let text = shown.trim();
        if text.is_empty() { reason } else { format!("{reason}\n\n---\n{text}") }
    };
    let answer = prompt::strip_label(member, &t.answer()).to_string();
    let (status, body, error) = match run.stop_reason() {
        Some(StopReason::TimedOut) => {
            let reason = format!("{member}: timed out after {} s", spec.timeout.as_secs());
            (RunStatus::TimedOut, with_partial(reason.clone()), Some(reason))
        }
        Some(StopReason::TooLong) => {
            let reason = format!(
                "{member}: the answer passed council.max_answer_bytes ({}); it was stopped there and the text up \
                 to it is kept",
                size(spec.max_answer_bytes)
            );
            (RunStatus::Error, with_partial(reason.clone()), Some(reason))
        }
        Some(reason) => {
            let status = if reason == StopReason::Shutdown { RunStatus::Interrupted } else { RunStatus::Cancelled };
            let text = if answer.trim().is_empty() { shown.clone() } else { answer };
            let body = if text.trim().is_empty() { "(cancelled before it said anything)".to_string() } else { text };
            (status, body, None)
        }
        None => match failure(member, t, exit, stderr) {
            Some(reason) => (RunStatus::Error, with_partial(reason.clone()), Some(reason)),
            None if answer.trim().is_empty() => {
                let reason = format!("{member}: no answer{}", unreadable(t, stderr));
                (RunStatus::Error, reason.clone(), Some(reason))
            }
            None => (RunStatus::Done, answer, None),
        },
    };
    let to = if status == RunStatus::Done { prompt::mentions::addressed(&body, &spec.members, member) } else { vec![] };
    Finish { status, body, error, meta, session: None, to }
}

/// Why a run that stopped on its own failed, if it did. Judged by fatal
/// errors, the backend's own `is_error`, and the exit status.
fn failure(member: &str, t: &Transcript, exit: Option<std::process::ExitStatus>, stderr: &str) -> Option<String> {
    if let Some(f) = &t.fatal {
        return Some(format!("{member}: {f}"));
    }
    if let Some(r) = t.result.as_ref().filter(|r| r.is_error) {
        let why = r.text.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("the agent reported an error");
        return Some(format!("{member}: {why}"));
    }
    match exit {
        Some(e) if e.success() => None,
        Some(e) => {
            let how = match e.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".to_string(),
            };
            Some(format!("{member}: {how}{}", last_line(stderr).map(|l| format!(": {l}")).unwrap_or_default()))
        }
        None => Some(format!("{member}: its exit status could not be read")),
    }
}

fn unreadable(t: &Transcript, stderr: &str) -> String {
    let mut why = String::new();
    if t.malformed > 0 {
        why.push_str(&format!(
            " ({} unreadable line{} of output)",
            t.malformed,
            if t.malformed == 1 { "" } else { "s" }
        ));
    }
    if let Some(l) = last_line(stderr) {
        why.push_str(&format!(": {l}"));
    }
    why
}

fn last_line(s: &str) -> Option<String> {
    s.lines().map(str::trim).rfind(|l| !l.is_empty()).map(|l| l.chars().take(300).collect())
}
