//! One run as a turn of a codex thread: `thread/start` (or `thread/resume`
//! of the thread recorded for the session), `turn/start` with the prompt,
//! then the turn's notifications until `turn/completed`. Deltas stream to
//! subscribers as they come; tool calls start a new paragraph; a stop sends
//! `turn/interrupt` and keeps the text streamed so far (codex keeps none of
//! an interrupted message). If the process dies mid-turn, the run is an
//! error with its partial text, and the next run starts a new process.
//! An approval codex asks is decided beside the loop ([`Asking`]): the
//! turn's other notifications keep streaming, a stop answers it `cancel`.

use std::sync::Arc;

use kd_proto::types::{ContextMode, RunStatus};
use tokio::time::Instant;

use super::AppServer;
use super::approval;
use super::protocol::{self, Event};
use crate::agent::Runner;
use crate::agent::asking::Asking;
use crate::agent::mcp;
use crate::agent::outcome::{cut_short, failed, stopped_early};
use crate::agent::parse::{Parsed, Transcript};
use crate::agent::prepare::Prepared;
use crate::agent::registry::{Run, StopReason};
use crate::agent::spec::Spec;
use crate::agent::stream::record_start;
use crate::agent::turn::{self, Clocks, Streamed};
use crate::config::CodexPolicy;
use crate::db::runs::Finish;

pub(in crate::agent) async fn execute(d: &Arc<Runner>, run: &Arc<Run>, spec: &Spec, prepared: Prepared) -> Finish {
    let member = run.member.clone();
    let held = prepared.session.clone();
    let with_session = |mut f: Finish, given: bool| {
        f.session = held.as_ref().map(|h| h.end(given));
        f
    };
    // Every wait for codex ends by the run's timeout or its stop.
    let deadline = Instant::now() + spec.timeout;
    let cut = |waiting_for: &str, given: bool| with_session(cut_short(run, spec, waiting_for), given);
    let started =
        turn::bounded(run, deadline, d.appservers.get(&spec.agent, &spec.workspace, &d.socket, &d.grants)).await;
    let app = match started {
        Some(Ok(s)) => s,
        Some(Err(e)) => return with_session(failed(&member, RunStatus::Error, e), false),
        None => return cut("the codex app-server to start", false),
    };
    let server = &app.peer;
    if let Err(busy) = record_start(d, run, server.pid, server.started, held.as_ref()).await {
        return with_session(failed(&member, RunStatus::Error, busy), false);
    }
    let cwd = spec.cwd().display().to_string();
    // kd's MCP server for the thread: a thread already loaded keeps the
    // server (and token) it was opened with; a new one gets a new token,
    // which is the thread's once codex names it.
    let grant = || mcp::conversation_grant(&run.thread, &member, &spec.workspace);
    let token = spec.kd.as_ref().and_then(|_| match prepared.resume.as_deref() {
        Some(id) => app.threads.token(id, grant()),
        None => d.grants.issue(grant()),
    });
    let config = match (&spec.kd, &token) {
        (Some(kd), Some(token)) => {
            Some(mcp::Server::new(kd, &d.socket, token, &run.thread, &member, None).codex_config())
        }
        _ => None,
    };
    // A run in the member's worktree: its thread is opened writable there
    // (the sandbox is the thread's; the member's other threads read).
    let work_policy = CodexPolicy { sandbox: "workspace-write".into(), approval: "never".into() };
    let config = match &spec.work {
        Some(w) => Some(protocol::work_config(config, crate::agent::work::make_tmp_dir(w).ok().as_deref())),
        None => config,
    };
    let opening = protocol::Opening {
        cwd: &cwd,
        model: spec.agent.model.as_deref(),
        policy: if spec.work.is_some() { &work_policy } else { &spec.agent.policy },
        config: config.as_ref(),
    };
    let (method, opened) = match prepared.resume.as_deref() {
        Some(id) => (
            "thread/resume",
            turn::bounded(run, deadline, server.request(|n| protocol::thread_resume(n, id, &opening))).await,
        ),
        None => (
            "thread/start",
            turn::bounded(run, deadline, server.request(|n| protocol::thread_start(n, &opening))).await,
        ),
    };
    let opened = opened.map(|o| o.map(|r| protocol::thread_id(&r)));
    // The token of a new thread is the thread's (or nobody's).
    if prepared.resume.is_none()
        && let Some(token) = &token
    {
        match &opened {
            Some(Ok(Some(thread))) => app.threads.keep(thread, token.clone()),
            _ => d.grants.revoke(token),
        }
    }
    let Some(opened) = opened else {
        return cut(&format!("the codex app-server to answer {method}"), false);
    };
    let thread = match opened {
        Ok(Some(t)) => t,
        Ok(None) => return with_session(failed(&member, RunStatus::Error, "codex gave no thread id".into()), false),
        Err(e) => {
            let what =
                if prepared.resume.is_some() { "cannot resume its codex thread" } else { "cannot start a thread" };
            return with_session(failed(&member, RunStatus::Error, format!("{what}: {e}")), false);
        }
    };
    // A thread no later run resumes (each run of history mode, or of a
    // prompt of its own, has a fresh one) is let go when the run ends:
    // codex unloads it and ends its MCP server, whose token goes.
    let _one_off = (spec.context != ContextMode::Resume || spec.prompt.is_some())
        .then(|| LetGo { app: app.clone(), thread: thread.clone() });
    // Saved at once, so that a run cut by a crash resumes its thread (F-J2).
    d.session_seen(run, &thread).await;
    let mut transcript = Transcript::new();
    transcript.apply(Parsed::SessionId(thread.clone()));
    let mut following = match server.follow(&thread) {
        Ok(f) => f,
        Err(e) => return with_session(failed(&member, RunStatus::Error, e), true),
    };
    if run.stop_reason().is_some() {
        return with_session(stopped_early(run), true);
    }
    let not_started = |e: String| failed(&member, RunStatus::Error, format!("the turn did not start: {e}"));
    if let Err(e) = server.begin_turn(&thread) {
        return with_session(not_started(e), true);
    }
    let turn = match turn::bounded(
        run,
        deadline,
        server.request(|n| protocol::turn_start(n, &thread, &prepared.prompt)),
    )
    .await
    {
        Some(Ok(r)) => protocol::turn_id(&r),
        Some(Err(e)) => {
            server.end_turn(&thread);
            return with_session(not_started(e), true);
        }
        // codex may yet start the turn: it stays busy until codex ends it.
        None => return cut("the codex app-server to answer turn/start", true),
    };

    let mut streamed = Streamed::new(d, run, spec);
    let mut clocks = Clocks::new(deadline).await;
    let mut interrupted = false;
    let mut ended: Option<(String, Option<String>)> = None;
    let mut usage: Option<protocol::Usage> = None;
    // The approvals codex asks, decided beside this loop.
    let mut asking = Asking::default();
    loop {
        tokio::select! {
            note = following.notes.recv() => {
                let Some(mut note) = note else { break };
                if let Some(question) = note.question.take() {
                    let waiting = format!("waiting for approval: {}", question.tool.title);
                    streamed.take(&mut transcript, vec![Parsed::Activity(waiting)]);
                    asking.ask(d, run, spec, question);
                    continue;
                }
                match protocol::interpret(&note.method, &note.params, turn.as_deref()) {
                    Event::Items(items) => streamed.take(&mut transcript, items),
                    Event::Usage(u) => usage.get_or_insert_with(Default::default).add(u),
                    Event::TurnDone { status, error } => {
                        ended = Some((status, error));
                        break;
                    }
                    Event::Nothing => {}
                }
            }
            _ = &mut clocks.timeout, if !interrupted => run.stop(StopReason::TimedOut),
            (answer, tool) = asking.next() => {
                tracing::debug!(run = run.id, tool = tool.title, "answered codex: {}", approval::decision(&answer));
            }
            _ = run.stopped(), if !interrupted => {
                interrupted = true;
                // What codex waits on is answered `cancel` (the turn is interrupted).
                asking.stop();
                if let Some(turn) = &turn {
                    let (app, thread, turn) = (app.clone(), thread.clone(), turn.clone());
                    tokio::spawn(async move {
                        if let Err(e) = app.peer.request(|n| protocol::turn_interrupt(n, &thread, &turn)).await {
                            tracing::debug!("turn/interrupt: {e}");
                        }
                    });
                }
                clocks.stopping(d.kill_grace);
            }
            _ = &mut clocks.give_up => break,
            _ = clocks.save.tick() => streamed.save().await,
        }
    }
    drop(following);
    streamed.finish();
    match &ended {
        Some((status, error)) => {
            transcript.apply(Parsed::Result(protocol::outcome(status, error.clone(), usage)));
            if status == "interrupted" && run.stop_reason().is_none() {
                transcript.apply(Parsed::Error { message: "codex interrupted the turn".into(), fatal: true });
            }
        }
        None if run.stop_reason().is_none() => {
            transcript.apply(Parsed::Error { message: server.gone_reason(), fatal: true });
        }
        None => {}
    }
    turn::finish(run, spec, &transcript, held.as_ref())
}

/// Lets a codex thread go when dropped (the run ended): its token is
/// revoked and codex is asked to unload it (`thread/unsubscribe`, answered
/// or not: a codex without it keeps the thread, whose server's token no
/// longer acts).
struct LetGo {
    app: Arc<AppServer>,
    thread: String,
}

impl Drop for LetGo {
    fn drop(&mut self) {
        self.app.threads.forget(&self.thread);
        let (app, thread) = (self.app.clone(), std::mem::take(&mut self.thread));
        tokio::spawn(async move {
            if let Err(e) = app.peer.request(|n| protocol::thread_unsubscribe(n, &thread)).await {
                tracing::debug!(thread, "thread/unsubscribe: {e}");
            }
        });
    }
}
