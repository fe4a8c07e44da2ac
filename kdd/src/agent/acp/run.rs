//! One run as an ACP turn: `session/new` in the thread's workspace (or, in
//! resume mode, `session/load` of the session recorded for the thread),
//! then `session/prompt`, whose answer ends the turn. `agent_message_chunk`
//! updates stream to subscribers as they come; a stop sends
//! `session/cancel` and keeps the text streamed so far. A turn that fails
//! after a tool call was refused says why (`refused by policy read-only:
//! TITLE`, the King's message) instead of the agent's own error. A
//! permission the agent asks is decided beside the loop ([`Asking`]); a
//! stop answers it `cancelled`.

use std::sync::Arc;

use kd_proto::types::{ContextMode, RunStatus};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::protocol::{self, TurnEnd};
use crate::agent::Runner;
use crate::agent::asking::Asking;
use crate::agent::mcp::{self, Conversations};
use crate::agent::outcome::{cut_short, failed};
use crate::agent::parse::{Outcome, Parsed, Transcript};
use crate::agent::peer::Note;
use crate::agent::prepare::Prepared;
use crate::agent::registry::{Run, StopReason};
use crate::agent::spec::Spec;
use crate::agent::stream::record_start;
use crate::agent::turn::{self, Clocks, Streamed};
use crate::approvals::Answer;
use crate::db::runs::Finish;

pub(in crate::agent) async fn execute(d: &Arc<Runner>, run: &Arc<Run>, spec: &Spec, prepared: Prepared) -> Finish {
    let member = run.member.clone();
    let held = prepared.session.clone();
    let with_session = |mut f: Finish, given: bool| {
        f.session = held.as_ref().map(|h| h.end(given));
        f
    };
    let fail = |reason: String| failed(&member, RunStatus::Error, reason);
    // Every wait for the agent ends by the run's timeout or its stop.
    let deadline = Instant::now() + spec.timeout;
    let cut = |waiting_for: &str| with_session(cut_short(run, spec, waiting_for), false);
    let worktree = spec.work.as_ref().map(|w| w.dir.as_path());
    let agent =
        match turn::bounded(run, deadline, d.acp.get(&spec.agent, &spec.workspace, &d.socket, &d.grants, worktree))
            .await
        {
            Some(Ok(a)) => a,
            Some(Err(e)) => return with_session(fail(e), false),
            None => return cut("the ACP agent to start"),
        };
    let peer = &agent.peer;
    if let Err(busy) = record_start(d, run, peer.pid, peer.started, held.as_ref()).await {
        return with_session(fail(busy), false);
    }
    let cwd = spec.cwd().display().to_string();
    // kd's MCP server for the session: a session loaded again keeps its
    // token; a new one gets a new token, the session's once it is named.
    let grant = || mcp::conversation_grant(&run.thread, &member, &spec.workspace);
    let token = spec.kd.as_ref().and_then(|_| match prepared.resume.as_deref() {
        Some(id) => agent.sessions.token(id, grant()),
        None => d.grants.issue(grant()),
    });
    let server = match (&spec.kd, &token) {
        (Some(kd), Some(token)) => Some(mcp::Server::new(kd, &d.socket, token, &run.thread, &member, None)),
        _ => None,
    };
    let server = server.as_ref();
    // Whatever happens next, a new session's token is the session's or nobody's.
    let new_token = token.filter(|_| prepared.resume.is_none());
    let adopt = |session: Option<&str>| {
        if let Some(token) = &new_token {
            match session {
                Some(id) => agent.sessions.keep(id, token.clone()),
                None => d.grants.revoke(token),
            }
        }
    };
    let session = match prepared.resume.as_deref() {
        Some(id) if agent.can_load => {
            match turn::bounded(run, deadline, peer.request(|n| protocol::session_load(n, id, &cwd, server))).await {
                Some(Ok(_)) => id.to_string(),
                Some(Err(e)) => return with_session(fail(format!("cannot load its ACP session {id}: {e}")), false),
                None => return cut("the ACP agent to answer session/load"),
            }
        }
        Some(_) => {
            let reason = "the agent cannot load a session (agentCapabilities.loadSession is false); give the \
                          thread context history";
            return with_session(fail(reason.into()), false);
        }
        None => {
            let opened = turn::bounded(run, deadline, peer.request(|n| protocol::session_new(n, &cwd, server))).await;
            let id = opened.as_ref().and_then(|r| r.as_ref().ok()).and_then(protocol::session_id);
            adopt(id.as_deref());
            match opened {
                Some(Ok(_)) => match id {
                    Some(id) => id,
                    None => return with_session(fail("session/new gave no sessionId".into()), false),
                },
                Some(Err(e)) => return with_session(fail(format!("cannot open a session: {e}")), false),
                None => return cut("the ACP agent to answer session/new"),
            }
        }
    };
    // A session no later run loads again (history mode, a prompt of its
    // own) keeps its server, which ACP cannot close, but not its token.
    let _one_off = (spec.context != ContextMode::Resume || spec.prompt.is_some())
        .then(|| Forget { sessions: &agent.sessions, session: session.clone() });
    // Saved at once, so that a run cut by a crash loads its session (F-J2).
    d.session_seen(run, &session).await;
    let mut transcript = Transcript::new();
    transcript.apply(Parsed::SessionId(session.clone()));
    let mut following = match peer.follow(&session) {
        Ok(f) => f,
        Err(e) => return with_session(fail(e), true),
    };
    if let Err(e) = peer.begin_turn(&session) {
        return with_session(fail(format!("the turn did not start: {e}")), true);
    }
    // The turn runs in a task of its own, so that its end is seen (and the
    // session freed) even after the run stopped waiting for it.
    let (ended_tx, mut ended_rx) = oneshot::channel();
    {
        let (agent, session, prompt) = (agent.clone(), session.clone(), prepared.prompt.clone());
        tokio::spawn(async move {
            let answer = agent.peer.request_within(None, |n| protocol::session_prompt(n, &session, &prompt)).await;
            agent.peer.end_turn(&session);
            let _ = ended_tx.send(answer);
        });
    }

    let mut streamed = Streamed::new(d, run, spec);
    let mut clocks = Clocks::new(deadline).await;
    let mut cancelled = false;
    let mut ended: Option<TurnEnd> = None;
    // The last tool call the member's policy refused: why the turn failed,
    // if it then did (claude-code-acp ends it with an internal error).
    let mut refused: Option<String> = None;
    // The permissions the agent asks, decided beside this loop.
    let mut asking = Asking::default();
    loop {
        tokio::select! {
            note = following.notes.recv() => match note {
                Some(mut note) => match note.question.take() {
                    Some(question) => {
                        let waiting = format!("waiting for approval: {}", question.tool.title);
                        streamed.take(&mut transcript, vec![Parsed::Activity(waiting)]);
                        asking.ask(d, run, spec, question);
                    }
                    None => take(note, &mut streamed, &mut transcript, &mut refused),
                },
                None => break,
            },
            (answer, tool) = asking.next() => {
                // A denial is why the turn fails, if it then does
                // (claude-code-acp ends it with an internal error).
                if let Answer::Deny { message } = answer {
                    tracing::debug!(run = run.id, tool = tool.title, "denied: {message}");
                    refused = Some(message);
                }
            }
            answer = &mut ended_rx => {
                ended = Some(protocol::turn_end(answer.unwrap_or_else(|_| Err(peer.gone_reason()))));
                break;
            }
            _ = &mut clocks.timeout, if !cancelled => run.stop(StopReason::TimedOut),
            _ = run.stopped(), if !cancelled => {
                cancelled = true;
                // `session/cancel`, then every permission pending answered
                // `cancelled`, as ACP asks of a client that cancels. Queued
                // at once: this loop keeps reading the agent's updates.
                agent.peer.notify_now(protocol::session_cancel(&session));
                asking.stop();
                clocks.stopping(d.kill_grace);
            }
            _ = &mut clocks.give_up => break,
            _ = clocks.save.tick() => streamed.save().await,
        }
    }
    // Updates sent before the answer are already queued: take them too.
    while let Ok(note) = following.notes.try_recv() {
        take(note, &mut streamed, &mut transcript, &mut refused);
    }
    drop(following);
    streamed.finish();
    let stopped = run.stop_reason().is_some();
    match ended {
        Some(TurnEnd::Completed) => {
            transcript.apply(Parsed::Result(Outcome::default()));
        }
        Some(TurnEnd::Cancelled) if !stopped => {
            let message = refused.unwrap_or_else(|| "the agent cancelled the turn".into());
            transcript.apply(Parsed::Error { message, fatal: true });
        }
        Some(TurnEnd::Failed(why)) if !stopped => {
            if refused.is_some() {
                tracing::debug!(run = run.id, "the turn failed after a refusal: {why}");
            }
            transcript.apply(Parsed::Error { message: refused.unwrap_or(why), fatal: true });
        }
        None if !stopped => {
            transcript.apply(Parsed::Error { message: peer.gone_reason(), fatal: true });
        }
        _ => {}
    }
    turn::finish(run, spec, &transcript, held.as_ref())
}

/// Takes one note of the run's session: text and activity for the
/// transcript, or a refusal by the member's policy.
fn take(note: Note, streamed: &mut Streamed<'_>, transcript: &mut Transcript, refused: &mut Option<String>) {
    match protocol::refusal(&note) {
        Some(reason) => *refused = Some(reason),
        None => streamed.take(transcript, protocol::interpret(&note.method, &note.params)),
    }
}

/// Revokes a session's token when dropped (the run ended).
struct Forget<'a> {
    sessions: &'a Conversations,
    session: String,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.sessions.forget(&self.session);
    }
}
