//! A run as one CLI process (claude, codex exec, cursor, gemini, a plain
//! command): spawn it with the prompt, record its pid at once, stream its
//! deltas as they are read, append what is new to the saved partial text
//! about once a second, enforce the timeout and the answer's size cap,
//! honour cancellation (SIGINT for claude, which then reports its partial
//! result, SIGTERM for the others, SIGKILL after a grace period), and kill
//! whatever the agent left running.

use std::time::Duration;

use rustix::process::Signal;
use tokio::io::AsyncWriteExt;

use super::Runner;
use super::argv;
use super::lines::{Line, LineReader};
use super::mcp;
use super::outcome::{failed, outcome, spawn_error};
use super::parse::{self, Transcript};
use super::prepare::{Held, Prepared, record_deferred};
use super::process;
use super::registry::{Run, StopReason};
use super::spec::Spec;
use super::stream::{publish, record_start};
use crate::config::Backend;
use crate::db::runs::{Finish, Spawned};
use crate::prompt;
use kd_proto::types::RunStatus;

/// How often the text streamed so far (and, once, the backend's session) is
/// saved.
const SAVE_EVERY: Duration = Duration::from_secs(1);
/// How long output may keep coming after the agent exited (children that
/// inherited its stdout are killed after this).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// Bytes of stderr kept for error messages.
const STDERR_TAIL: usize = 8 * 1024;

pub(super) async fn execute(d: &Runner, run: &Run, spec: &Spec, prepared: Prepared) -> Finish {
    let member = run.member.clone();
    let agent = &spec.agent;
    let mut held = prepared.session.clone();
    // Before the agent runs, the session saw nothing new.
    let with_session = |held: &Option<Held>, mut f: Finish| {
        f.session = held.as_ref().map(|h| h.end(false));
        f
    };
    // kd's MCP server for the run (see super::mcp).
    let server = match (&spec.kd, run.token()) {
        (Some(kd), Some(token)) => Some(mcp::Server::new(kd, &d.socket, &token, &run.thread, &member, Some(&run.id))),
        _ => None,
    };
    // A run in the member's worktree: its backend's write mode, confined.
    let tmp = spec.work.as_ref().and_then(|w| match super::work::make_tmp_dir(w) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(run = run.id, "the worktree's TMPDIR: {e}");
            None
        }
    });
    let writable = spec
        .work
        .as_ref()
        .map(|_| argv::Writable { tmp: tmp.as_deref(), allowed_tools: &spec.work_settings.allowed_tools });
    let mut inv =
        argv::build_for(agent, &prepared.prompt, prepared.resume.as_deref(), server.as_ref(), writable.as_ref());
    // gemini takes the server from a settings file of the run's own; claude
    // and codex exec pass the token on to it from their environment.
    let _settings = match (&server, agent.backend) {
        (Some(server), Backend::Gemini) => gemini_settings(d, run, agent, server).inspect(|f| {
            inv.env.push((mcp::GEMINI_DEFAULTS_VAR.to_string(), f.path.display().to_string()));
        }),
        _ => None,
    };
    // Marks the agent and all it starts, wherever they go (see kill_tree).
    inv.env.push((process::RUN_MARKER.to_string(), run.id.clone()));
    // Where the agent is, for `kd send`, `kd inbox` and `kd ack` from its shell.
    inv.env.push(("KD_SOCKET".to_string(), d.socket.display().to_string()));
    inv.env.push(("KD_THREAD".to_string(), run.thread.clone()));
    inv.env.push(("KD_MEMBER".to_string(), member.clone()));
    // The run's capability: `kd send` & co. act as the member only by it
    // (KD_MEMBER and KD_THREAD are information; a name is no identity).
    inv.env.extend(run.token().map(|t| (process::TOKEN_VAR.to_string(), t)));
    let mut child = match process::spawn_off(&inv, spec.cwd()).await {
        Ok(c) => c,
        Err(e) => return with_session(&held, failed(&member, RunStatus::Error, spawn_error(&inv, agent, &e))),
    };
    let Some(pid) = child.id() else {
        let why = "the agent exited before it could be watched".into();
        return with_session(&held, failed(&member, RunStatus::Error, why));
    };
    let started = process::start_time(pid);
    let mut feed = || {
        if let (Some(input), Some(stdin)) = (inv.stdin.clone(), child.stdin.take()) {
            feed_input(stdin, input);
        }
    };
    // Only a shared registry can refuse the start (another node's run of
    // the member streams on the thread): there the agent is given nothing
    // before it is recorded. Elsewhere the prompt goes in at once, while
    // the start is written (issue 31, item 17).
    let refusable = d.db.is_shared();
    if !refusable {
        feed();
    }
    match prepared.deferred {
        // Recorded now, started (prepare::Deferred).
        Some(deferred) => match record_deferred(d, run, deferred, Some(Spawned { pid, start: started })).await {
            Ok(h) => {
                held = h;
                run.set_started(pid);
            }
            Err(f) => {
                // Unrecorded, so no later start can find what it left.
                process::signal_group(pid, Signal::KILL);
                let _ = child.wait().await;
                let marker = process::marker(process::RUN_MARKER, &run.id);
                let _ = tokio::task::spawn_blocking(move || process::kill_left(pid, started, &marker)).await;
                return f;
            }
        },
        None => {
            if let Err(busy) = record_start(d, run, pid, started, held.as_ref()).await {
                let _ = child.start_kill();
                return with_session(&held, failed(&member, RunStatus::Error, busy));
            }
        }
    }
    if refusable {
        feed();
    }
    let stderr = child.stderr.take().map(|err| super::lines::tail(err, STDERR_TAIL));
    let Some(stdout) = child.stdout.take() else {
        return with_session(&held, failed(&member, RunStatus::Error, "no stdout from the agent".into()));
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
    let mut session_seen = false;
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
                // The backend's session is saved with the text, before it,
                // so that a run cut by a crash is resumed in it (F-J2); a
                // run that ends sooner gives it with its end (kdd stopping
                // cuts it: its step keeps the session for the answer asked
                // again) — one write fewer a run (issue 31, item 17).
                if !session_seen && let Some(id) = &transcript.session_id {
                    session_seen = true;
                    d.session_seen(run, id).await;
                }
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
    // Nothing the agent started outlives its run. Once it is reaped, what
    // it left went to kdd's main thread.
    let marker = process::marker(process::RUN_MARKER, &run.id);
    let reaped = exit.is_some();
    let killed = if reaped && process::left_nothing(pid, started) {
        0
    } else {
        let kill = move || {
            if reaped { process::kill_left(pid, started, &marker) } else { process::kill_tree(pid, started, &marker) }
        };
        tokio::task::spawn_blocking(kill).await.unwrap_or(0)
    };
    if killed > 0 {
        tracing::debug!(run = run.id, "killed {killed} process(es) the agent left running");
    }
    let stderr = match stderr {
        Some(h) => tokio::time::timeout(Duration::from_secs(1), h).await.ok().and_then(Result::ok).unwrap_or_default(),
        None => String::new(),
    };
    // What claude refused silently in a worktree is said (F-W1).
    if spec.work.is_some()
        && let Some(line) = transcript.result.as_ref().and_then(|r| refusals(&agent.command, &r.denials))
    {
        run.note_work(line);
    }
    let mut finish = outcome(run, spec, &transcript, exit, &stderr);
    // The session remembers the prompt when the agent took it: it answered,
    // or its backend opened a session for it.
    let given = finish.status == RunStatus::Done || transcript.session_id.is_some();
    finish.session = held.as_ref().map(|h| h.end(given));
    finish
}

/// Gives the agent its input: what the pipe takes at once is written here,
/// so that the agent finds its prompt as soon as it reads, not after what
/// this worker does next (the run's start is written meanwhile: issue 31,
/// item 17); the rest by a task of its own as the agent reads. An agent
/// that exits without reading its input is not an error here.
fn feed_input(mut stdin: tokio::process::ChildStdin, input: String) {
    // The pipe is non-blocking: a write takes what fits and never waits.
    let taken = match rustix::io::write(&stdin, input.as_bytes()) {
        Ok(n) => n,
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => 0,
        Err(_) => return,
    };
    if taken < input.len() {
        tokio::spawn(async move {
            let _ = stdin.write_all(&input.as_bytes()[taken..]).await;
        });
    }
}

/// The run's gemini system-defaults file: the user's own defaults with kd's
/// server added, in the daemon's directory. `None` (the run goes without
/// kd's tools, said in the log) when the user's defaults cannot be read or
/// the file cannot be written.
fn gemini_settings(
    d: &Runner,
    run: &Run,
    agent: &crate::config::AgentDef,
    server: &mcp::Server,
) -> Option<mcp::SettingsFile> {
    let defaults = match mcp::gemini_defaults(&agent.env) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(run = run.id, "gemini runs without kd's MCP server: its system defaults: {e}");
            return None;
        }
    };
    let dir = d.socket.parent()?;
    match mcp::SettingsFile::create(dir, &format!("gemini-{}.json", run.id), &server.gemini_settings(defaults)) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(run = run.id, "gemini runs without kd's MCP server: cannot write its settings: {e}");
            None
        }
    }
}

/// The line saying what a run was refused: `claude: refused 2 writes
/// outside its worktree: Write /path, Bash touch /tmp/x`.
fn refusals(_command: &str, denials: &[String]) -> Option<String> {
    if denials.is_empty() {
        return None;
    }
    let n = denials.len();
    let what = if n == 1 { "1 write".to_string() } else { format!("{n} writes") };
    Some(format!("{}claude: refused {what} outside its worktree: {}", super::work::SAID, denials.join(", ")))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    /// `cat`, its input and its output piped.
    // No reaper runs in unit tests: a child spawned directly is safe here.
    #[allow(clippy::disallowed_methods)]
    fn cat() -> tokio::process::Child {
        tokio::process::Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap()
    }

    /// The prompt is in the agent's pipe when `feed_input` returns: this
    /// thread then blocks without polling any task, and `cat` echoes it.
    #[tokio::test(flavor = "current_thread")]
    async fn an_agents_prompt_is_in_its_pipe_before_the_worker_goes_on() {
        let mut child = cat();
        let out = child.stdout.take().unwrap().into_owned_fd().unwrap();
        feed_input(child.stdin.take().unwrap(), "the prompt".into());
        let fds = &mut [rustix::event::PollFd::new(&out, rustix::event::PollFlags::IN)];
        let ready = rustix::event::poll(fds, Some(&rustix::event::Timespec { tv_sec: 10, tv_nsec: 0 })).unwrap();
        assert_eq!(ready, 1, "nothing reached the agent while no task ran");
        let mut got = [0u8; 64];
        let n = rustix::io::read(&out, &mut got).unwrap();
        assert_eq!(&got[..n], b"the prompt");
        let _ = child.kill().await;
    }

    /// A prompt larger than the pipe goes in whole: the rest by a task as the
    /// agent reads, then the pipe is closed.
    #[tokio::test(flavor = "current_thread")]
    async fn a_prompt_larger_than_the_pipe_reaches_the_agent_whole() {
        let mut child = cat();
        let prompt: String = (0..300_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        feed_input(child.stdin.take().unwrap(), prompt.clone());
        let waited = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await;
        let out = waited.expect("the pipe was closed once all was written").unwrap();
        assert_eq!(out.stdout.len(), prompt.len());
        assert!(out.stdout == prompt.as_bytes(), "the prompt, in order");
    }
}
