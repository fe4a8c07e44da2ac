//! One run as a turn of a codex thread: `thread/start` (or `thread/resume`
//! of the thread recorded for the session), `turn/start` with the prompt,
//! then the turn's notifications until `turn/completed`. Deltas stream to
//! subscribers as they come; tool calls start a new paragraph; a stop sends
//! `turn/interrupt` and keeps the text streamed so far (codex keeps none of
//! an interrupted message). If the process dies mid-turn, the run is an
//! error with its partial text, and the next run starts a new process.

use std::sync::Arc;

use kd_proto::types::RunStatus;
use tokio::time::Instant;

use super::protocol::{self, Event};
use crate::agent::Runner;
use crate::agent::outcome::{cut_short, failed, stopped_early};
use crate::agent::parse::{Parsed, Transcript};
use crate::agent::prepare::Prepared;
use crate::agent::registry::{Run, StopReason};
use crate::agent::spec::Spec;
use crate::agent::stream::record_start;
use crate::agent::turn::{self, Clocks, Streamed};
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
    let server = match turn::bounded(run, deadline, d.appservers.get(&spec.agent, &spec.workspace, &d.socket)).await {
        Some(Ok(s)) => s,
        Some(Err(e)) => return with_session(failed(&member, RunStatus::Error, e), false),
        None => return cut("the codex app-server to start", false),
    };
    record_start(d, run, server.pid, server.started, held.as_ref()).await;
    let cwd = spec.workspace.display().to_string();
    let model = spec.agent.model.as_deref();
    let policy = &spec.agent.policy;
    let (opening, opened) = match prepared.resume.as_deref() {
        Some(id) => (
            "thread/resume",
            turn::bounded(run, deadline, server.request(|n| protocol::thread_resume(n, id, &cwd, model, policy))).await,
        ),
        None => (
            "thread/start",
            turn::bounded(run, deadline, server.request(|n| protocol::thread_start(n, &cwd, model, policy))).await,
        ),
    };
    let Some(opened) = opened else {
        return cut(&format!("the codex app-server to answer {opening}"), false);
    };
    let thread = match opened.map(|r| protocol::thread_id(&r)) {
        Ok(Some(t)) => t,
        Ok(None) => return with_session(failed(&member, RunStatus::Error, "codex gave no thread id".into()), false),
        Err(e) => {
            let what =
                if prepared.resume.is_some() { "cannot resume its codex thread" } else { "cannot start a thread" };
            return with_session(failed(&member, RunStatus::Error, format!("{what}: {e}")), false);
        }
    };
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
    loop {
        tokio::select! {
            note = following.notes.recv() => {
                let Some(note) = note else { break };
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
            _ = run.stopped(), if !interrupted => {
                interrupted = true;
                if let Some(turn) = &turn {
                    let (server, thread, turn) = (server.clone(), thread.clone(), turn.clone());
                    tokio::spawn(async move {
                        if let Err(e) = server.request(|n| protocol::turn_interrupt(n, &thread, &turn)).await {
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
