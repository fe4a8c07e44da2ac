//! One run, from start to its message (F-A3): prepare its prompt and
//! session (recording the run with them, or as its agent is spawned —
//! [`super::prepare::Deferred`]; alone, where it ends before),
//! check the workspace and an early stop, hand it to
//! its transport — a CLI process per run ([`super::cli`]), a turn of a
//! codex app-server ([`super::appserver`]) or of an ACP agent
//! ([`super::acp`]) — and write the outcome as a message. Transports are
//! peers below it and never call back into it.

use std::sync::Arc;
use std::time::Instant;

use kd_proto::types::RunStatus;

use super::Runner;
use super::grants::Grant;
use super::outcome::{failed, stopped_early};
use super::prepare::prepare;
use super::registry::Run;
pub use super::spec::Spec;
use crate::config::{Backend, Transport};
use crate::db::runs::Finish;

/// Runs `run` to its end and writes its message. Spawned by the council.
pub async fn supervise(d: Arc<Runner>, run: Arc<Run>, spec: Spec) {
    // The run's capability: by it, and only by it, its agent acts through
    // kd as its member on its thread (F-B6).
    let grant = Grant {
        thread: run.thread.clone(),
        member: run.member.clone(),
        run: Some(run.id.clone()),
        workspace: spec.workspace.display().to_string(),
    };
    if let Some(token) = d.grants.issue(grant) {
        run.set_token(token);
    }
    let started = Instant::now();
    // The run is recorded as it takes its session (`prepare`; a CLI agent's
    // on a registry no other node shares, as its agent is spawned), or
    // alone where it ends before, or first when it works in a worktree
    // (which is then marked working, so its work cannot be settled
    // meanwhile); while the registry is away it waits to be recorded
    // (nothing of it has started: no run is recorded at its spawn in a
    // known outage), and its end, once it has one, is kept until it is
    // written (`db::outage`).
    if spec.work.is_some() {
        if !record_alone(&d, &run).await {
            return not_recorded(&d, &run);
        }
        super::work::started(&d, &run).await;
    }
    let mut finish = execute(&d, &run, &spec).await;
    if !run.recorded() && !record_alone(&d, &run).await {
        return not_recorded(&d, &run);
    }
    // Whatever the outcome, what the member changed is committed before
    // anything else (F-W1, F-W6).
    let committed = match &spec.work {
        Some(work) => super::work::finish(&d, &run, work, &mut finish, spec.work_settings.check.is_some()).await,
        None => false,
    };
    d.grants.revoke_run(&run.id);
    finish.meta.duration_ms = Some(started.elapsed().as_millis() as u64);
    finish.meta.run_id = Some(run.id.clone());
    finish.meta.backend = Some(run.backend.clone());
    finish.meta.ordinal = Some(run.ordinal);
    run.set_status(finish.status);
    tracing::info!(run = run.id, member = run.member, status = finish.status.as_str(), "run ended");
    let end = format!("the end of the run {}", run.id);
    // A try after a failure may follow a commit whose answer was lost.
    let write = |again| d.db.finish_run(run.info(), finish.clone(), again);
    match d.db.until_back(&end, || d.is_closed(), write).await {
        Ok(message) => run.set_message(message),
        // Recorded by another node while this one was away (it was
        // declared dead): its end stands.
        Err(e @ crate::db::DbError::RunEnded { .. }) => tracing::info!(run = run.id, "{e}"),
        // kdd is stopping with the registry away: the next start records
        // the run interrupted and asks its member again.
        Err(e) if e.is_outage() => {
            tracing::warn!(run = run.id, "the end of the run is not written ({e}): the next start asks again")
        }
        Err(e) => tracing::error!(run = run.id, "cannot record the end of the run: {e}"),
    }
    d.runs.remove(&run.id);
    run.mark_done();
    // Then what follows committed work: its check, a fix.
    if committed {
        super::work::after::committed(&d, &run, &spec, finish.status);
    }
}

/// A run that could not be recorded: it leaves no trace.
fn not_recorded(d: &Runner, run: &Run) {
    d.grants.revoke_run(&run.id);
    run.set_status(RunStatus::Error);
    d.runs.remove(&run.id);
    run.mark_done();
}

/// Records a run that ended before it took its session, or before the
/// record left for its spawn was written (stopped while queued, its thread
/// unreadable, its workspace gone, its agent not started): whether it is
/// recorded. Not when its
/// journal step was answered, or is being answered, by another run.
async fn record_alone(d: &Runner, run: &Run) -> bool {
    let start = format!("the start of the run {}", run.id);
    // A try after a failure may follow a commit whose answer was lost.
    let insert = |again| d.db.insert_run(run.info(), run.step, again);
    match d.db.until_back(&start, || d.is_closed(), insert).await {
        Ok(()) => {
            run.set_recorded();
            true
        }
        Err(e @ crate::db::DbError::StepTaken(_)) => {
            tracing::info!(run = run.id, "not started: {e}");
            false
        }
        Err(e) => {
            tracing::error!(run = run.id, "cannot record the run: {e}");
            false
        }
    }
}

async fn execute(d: &Arc<Runner>, run: &Arc<Run>, spec: &Spec) -> Finish {
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
        return with_session(failed(&run.member, RunStatus::Error, reason));
    }
    if let Some(work) = &spec.work {
        if !work.dir.is_dir() {
            let reason = format!("its worktree {} does not exist", work.dir.display());
            return with_session(failed(&run.member, RunStatus::Error, reason));
        }
        if let Some(refused) = super::argv::unconfined(spec.agent.backend) {
            return with_session(failed(&run.member, RunStatus::Error, refused.to_string()));
        }
        if work.fresh
            && let Err(reason) = super::work::set_up(d, run, spec, work).await
        {
            return with_session(failed(&run.member, RunStatus::Error, reason));
        }
    }
    if run.stop_reason().is_some() {
        return with_session(stopped_early(run));
    }
    let cli = spec.agent.transport != Transport::AppServer && spec.agent.backend != Backend::Acp;
    let mut prepared = prepared;
    // Only a CLI agent's spawn records a run left for it.
    if !cli && let Some(deferred) = prepared.deferred.take() {
        prepared.session = match super::prepare::record_deferred(d, run, deferred, None).await {
            Ok(held) => held,
            Err(f) => return f,
        };
    }
    if spec.agent.transport == Transport::AppServer {
        return super::appserver::execute(d, run, spec, prepared).await;
    }
    if spec.agent.backend == Backend::Acp {
        return super::acp::execute(d, run, spec, prepared).await;
    }
    super::cli::execute(d, run, spec, prepared).await
}
