//! Before a run spawns its agent: the prompt it is given and the session it
//! holds. History mode gives the whole thread and records a fresh session
//! per run (so `kd sessions` shows what ran and can be resumed by hand);
//! resume mode resumes this thread's own session of the agent (never
//! another thread's, never twice at once) and sends only what that session
//! has not been given. The run is recorded as it takes its session, with
//! the inbox items its prompt gives, in one write ([`record`]) — on a
//! registry no other node shares, a run with a session it can do without
//! is recorded only once its agent is spawned, with its pid, in that one
//! write ([`Deferred`]).

use std::sync::Arc;

use kd_proto::types::{ContextMode, Message, RunStatus, Session, SessionStatus};

use super::Runner;
use super::outcome::failed;
use super::registry::Run;
use super::spec::Spec;
use crate::config::Backend;
use crate::db::messages::Page;
use crate::db::outage::Again;
use crate::db::runs::{Finish, RunStart, Spawned, TakeSession};
use crate::db::sessions::{NewSession, SessionEnd};
use crate::db::{DbError, DbResult};
use crate::prompt;

/// The prompt, the backend session to resume, and the registry session held
/// — or the run's record, left for its agent's spawn.
pub(super) struct Prepared {
    pub prompt: String,
    pub resume: Option<String>,
    pub session: Option<Held>,
    pub deferred: Option<Deferred>,
}

/// A run's record left for the moment its agent is spawned, to be written
/// with its pid in one write ([`record_deferred`]): one write a run fewer
/// (issue 31, item 17). Only where nothing can refuse the run's start (a
/// registry no other node shares) and its session is one it can do without
/// (history mode, a prompt of its own, a cut run asked again): a session
/// it needs decides whether the agent may run at all, so it is taken first.
/// Not while the registry is known to be away: the agent would run
/// unrecorded, unwatched, until it is back. Should the write still fail
/// (kdd stopping in an outage that began meanwhile, the run's journal step
/// taken by a cancel), the agent and all it started are killed.
pub(super) struct Deferred {
    take: TakeSession,
    given: Option<u64>,
    release_as: SessionStatus,
    seen_seq: u64,
}

/// Records the run left for its spawn, with `spawned`, its agent (`None`:
/// a transport that starts its agent otherwise records it first); the
/// session it holds, or none. The run cannot be recorded: its failure.
pub(super) async fn record_deferred(
    d: &Runner,
    run: &Run,
    deferred: Deferred,
    spawned: Option<Spawned>,
) -> Result<Option<Held>, Finish> {
    let Deferred { take, given, release_as, seen_seq } = deferred;
    let session = one_off(run, record(d, run, take, false, given, spawned).await?);
    Ok(session.map(|id| Held { id, release_as, seen_seq }))
}

/// The registry session a run holds, and how it is released.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub id: String,
    /// `idle` for a session to resume later, `completed` for a one-off.
    pub release_as: SessionStatus,
    /// The last message seq the prompt gives the agent.
    pub seen_seq: u64,
}

impl Held {
    /// The release of the session; `given` says whether the agent received
    /// the prompt (only then does the session remember what it saw).
    pub fn end(&self, given: bool) -> SessionEnd {
        SessionEnd {
            id: self.id.clone(),
            status: self.release_as,
            backend_session_id: None,
            seen_seq: given.then_some(self.seen_seq),
        }
    }
}

pub(super) async fn prepare(d: &Runner, run: &Run, spec: &Spec) -> Result<Prepared, Finish> {
    let member = &run.member;
    // The thread as of the message the run answers: members of a parallel
    // round do not see each other's answers. Read from where the session
    // the run resumes has seen, when that is all it is given.
    // Resume mode: the session the run is to take, read once.
    let resumes = spec.context != ContextMode::History && spec.prompt.is_none();
    let latest = if resumes { Some(latest_session(d, run).await?) } else { None };
    let from = read_from(run, spec, latest.as_ref().and_then(Option::as_ref));
    let read = read_thread(d, run, from).await?;
    // Asked again after a restart: what the cut run had written.
    let partial = spec.resume_from.as_ref().map(|_| {
        run.replaces.and_then(|seq| read.iter().find(|m| m.seq == seq)).map(|m| m.body.clone()).unwrap_or_default()
    });
    let messages = prompt::as_of(&read, run.reply_to);
    let seen_seq = given_up_to(&messages, from);
    let suffix = partial.as_deref().map(prompt::resumed::resumed_suffix).unwrap_or_default();
    let full = |messages: &[Message]| {
        let history = prompt::format_thread_history(messages, member, None);
        prompt::assemble(&spec.preamble, spec.agent.prompt(spec.style), &format!("{history}{suffix}"))
    };
    // A session the run can do without is taken as its agent is spawned,
    // where nothing can refuse the run.
    let at_spawn = !d.db.is_shared() && !run.recorded() && !d.db.is_away();
    let one_off_take = async |take, given, release_as| {
        let deferred = Deferred { take, given, release_as, seen_seq };
        match at_spawn {
            true => Ok((None, Some(deferred))),
            false => Ok((record_deferred(d, run, deferred, None).await?, None)),
        }
    };
    if let Some(own) = &spec.prompt {
        let (session, deferred) = one_off_take(one_off_session(run), None, SessionStatus::Completed).await?;
        let prompt = prompt::assemble(&spec.preamble, spec.agent.prompt(spec.style), &format!("{own}{suffix}"));
        return Ok(Prepared { prompt, resume: None, session, deferred });
    }
    // The cut run's own backend session, resumed where the backend can:
    // it holds the question, and is told what it had written.
    // (An ACP agent's session is loaded only in resume mode, where the
    // agent says it can: the session row knows it.)
    let cut = spec
        .resume_from
        .as_ref()
        .and_then(|r| r.backend_session.clone())
        .filter(|_| spec.agent.backend != Backend::Acp);
    if let (Some(backend_id), Some(partial)) = (cut.filter(|_| spec.agent.backend.resumes()), &partial) {
        let (release_as, take) = match spec.context {
            ContextMode::History => (SessionStatus::Completed, one_off_session(run)),
            _ => (SessionStatus::Idle, resumed_session(run, latest.flatten())),
        };
        let (session, deferred) = one_off_take(take, None, release_as).await?;
        return Ok(Prepared {
            prompt: prompt::resumed::resumed_turn(partial),
            resume: Some(backend_id),
            session,
            deferred,
        });
    }
    // What waited in the member's inbox reaches it in this prompt, once (a
    // ballot or synthesis, with a prompt of its own, leaves it waiting):
    // marked given as the session is taken.
    if spec.context == ContextMode::History {
        let (session, deferred) = one_off_take(one_off_session(run), Some(seen_seq), SessionStatus::Completed).await?;
        return Ok(Prepared { prompt: full(&messages), resume: None, session, deferred });
    }
    let session = record(d, run, resumed_session(run, latest.flatten()), true, Some(seen_seq), None).await?.map_err(
        |e| match e {
            DbError::SessionActive { .. } => failed(member, RunStatus::Error, e.to_string()),
            e => failed(member, RunStatus::Error, format!("cannot take the session: {e}")),
        },
    )?;
    let held = Some(Held { id: session.id.clone(), release_as: SessionStatus::Idle, seen_seq });
    // Read from a later seq than the session taken has seen, or for one
    // given the whole thread (another session was taken meanwhile): the
    // whole thread, then.
    let enough = from == 0 || (session.backend_session_id.is_some() && session.seen_seq.is_some_and(|s| s >= from));
    let whole;
    let messages = if enough {
        messages
    } else {
        whole = read_thread(d, run, 0).await?;
        prompt::as_of(&whole, run.reply_to)
    };
    match session.backend_session_id {
        Some(backend_id) => {
            let new: Vec<Message> = prompt::unseen(&messages, member, session.seen_seq);
            // A cut run's session (an ACP agent's, loaded) is told what it
            // had written too.
            let prompt = format!("{}{suffix}", prompt::format_new_messages(&new, member));
            Ok(Prepared { prompt, resume: Some(backend_id), session: held, deferred: None })
        }
        None => Ok(Prepared { prompt: full(&messages), resume: None, session: held, deferred: None }),
    }
}

/// The last seq up to which the prompt gives every message: what a
/// resumed session has seen (a later message left out, such as another
/// member's answer in a parallel round, is given next time). `messages`
/// are those after `from`, every one up to which is in the thread (its
/// seqs are dense and the run answers a later one).
fn given_up_to(messages: &[Message], from: u64) -> u64 {
    let mut seqs: Vec<u64> = messages.iter().map(|m| m.seq).filter(|s| *s > from).collect();
    seqs.sort_unstable();
    seqs.iter().zip(from + 1..).take_while(|(seq, n)| **seq == *n).last().map(|(seq, _)| *seq).unwrap_or(from)
}

/// The seq after which the thread is read for `run`: what `latest`, the
/// session it is to resume, has seen, where the run gives that session
/// only what it has not (resume mode, a session the backend resumes, no
/// prompt of the run's own, not a cut run asked again); else 0, the whole
/// thread. A thread of thousands of messages is then not read again by
/// each run (issue 31, item 17).
fn read_from(run: &Run, spec: &Spec, latest: Option<&Session>) -> u64 {
    if spec.prompt.is_some() || spec.resume_from.is_some() || spec.context == ContextMode::History {
        return 0;
    }
    let seen = latest.filter(|s| s.backend_session_id.is_some()).and_then(|s| s.seen_seq).unwrap_or(0);
    // A run answering an earlier message than the session has seen (a
    // retry) is given the thread as of that message: read it all.
    if run.reply_to.is_some_and(|r| r < seen) { 0 } else { seen }
}

/// The thread after `from`, as the run answering `run.reply_to` reads it:
/// one read for the members of a round ([`super::shared_read`]), the whole
/// thread from what is kept of it ([`super::thread_cache`]), waiting while
/// the registry is away.
async fn read_thread(d: &Runner, run: &Run, from: u64) -> Result<Arc<Vec<Message>>, Finish> {
    use futures_util::FutureExt;
    let (db, closed, thread, cache) = (d.db.clone(), d.closed_flag(), run.thread.clone(), d.thread_cache.clone());
    let what = format!("the prompt and session of the run {}", run.id);
    let read = async move {
        let stop = || closed.load(std::sync::atomic::Ordering::SeqCst);
        let read = match from {
            // The whole thread: what is kept of it, and what came since.
            0 => db.until_back(&what, stop, |_| cache.whole(&db, &thread)).await,
            _ => db.until_back(&what, stop, |_| db.messages(thread.clone(), Page::all_after(from))).await.map(Arc::new),
        };
        read.map_err(|e| Arc::from(e.to_string()))
    };
    d.shared_reads
        .read(&run.thread, from, run.reply_to, read.boxed())
        .await
        .map_err(|e| failed(&run.member, RunStatus::Error, format!("cannot read the thread: {e}")))
}

/// `op`, a read or write of the registry before the agent starts (or, for
/// a run recorded at its spawn, as it starts: [`Deferred`]), waiting while
/// the registry is away (`db::outage`).
async fn waiting<T, F, Fut>(d: &Runner, run: &Run, op: F) -> crate::db::DbResult<T>
where
    F: FnMut(Again) -> Fut,
    Fut: Future<Output = crate::db::DbResult<T>>,
{
    d.db.until_back(&format!("the prompt and session of the run {}", run.id), || d.is_closed(), op).await
}

fn holder(run: &Run) -> Option<String> {
    Some(format!("run {}", run.id))
}

/// Records `run` (unless it is already: a work run) with the session it
/// takes (`take`, which it `needs_session` or can do without), the inbox
/// items up to `given` given to it, and its agent's start when it was
/// `spawned` — one write ([`crate::db::runs::RunStart`]) — waiting while
/// the registry is away.
/// The session, or why it was refused; the run cannot be recorded: the
/// run's failure (its supervisor then records it alone, or finds its step
/// taken).
async fn record(
    d: &Runner,
    run: &Run,
    take: TakeSession,
    needs_session: bool,
    given: Option<u64>,
    spawned: Option<Spawned>,
) -> Result<DbResult<Session>, Finish> {
    let recorded = run.recorded();
    let first = RunStart {
        run: run.info(),
        step: run.step,
        recorded,
        session: take,
        needs_session,
        given,
        spawned,
        again: Again::First,
    };
    // A try after a failure may follow a commit whose answer was lost.
    match waiting(d, run, |again| d.db.record_run(RunStart { again, ..first.clone() })).await {
        Ok(session) => {
            run.set_recorded();
            Ok(session)
        }
        Err(e) => Err(failed(&run.member, RunStatus::Error, format!("cannot record the run: {e}"))),
    }
}

/// A session a run can do without (history mode, a prompt of its own, a
/// cut run asked again): its id, or none.
fn one_off(run: &Run, session: DbResult<Session>) -> Option<String> {
    match session {
        Ok(s) => Some(s.id),
        Err(e) => {
            tracing::warn!(run = run.id, "runs without a session record: {e}");
            None
        }
    }
}

/// History mode: a session of its own for this run, to record the
/// backend's session id.
fn one_off_session(run: &Run) -> TakeSession {
    TakeSession::New(NewSession {
        thread: run.thread.clone(),
        agent: run.member.clone(),
        backend_session_id: None,
        holder: holder(run),
        pid: None,
        metadata: serde_json::json!({"context": "history", "run": run.id}),
    })
}

/// The thread's latest session of the run's member that is not archived:
/// the one a resume-mode run takes.
async fn latest_session(d: &Runner, run: &Run) -> Result<Option<Session>, Finish> {
    let sessions = waiting(d, run, |_| d.db.sessions(Some(run.thread.clone()), Some(run.member.clone()), None))
        .await
        .map_err(|e| failed(&run.member, RunStatus::Error, format!("cannot read sessions: {e}")))?;
    Ok(sessions.into_iter().find(|s| s.status != SessionStatus::Archived))
}

/// Resume mode: `latest` (see [`latest_session`]) taken under the
/// single-resume rule, or a new session where there is none.
fn resumed_session(run: &Run, latest: Option<Session>) -> TakeSession {
    match latest {
        Some(s) => TakeSession::Resume { id: s.id, holder: holder(run) },
        None => TakeSession::New(NewSession {
            thread: run.thread.clone(),
            agent: run.member.clone(),
            backend_session_id: None,
            holder: holder(run),
            pid: None,
            metadata: serde_json::json!({"context": "resume"}),
        }),
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::Message;

    use super::given_up_to;

    fn at(seqs: &[u64]) -> Vec<Message> {
        seqs.iter().map(|&seq| Message::new("t", seq, "king", "m")).collect()
    }

    #[test]
    fn what_is_given_runs_up_to_the_first_message_left_out() {
        assert_eq!(given_up_to(&at(&[1, 2, 3, 5]), 0), 3);
        assert_eq!(given_up_to(&at(&[]), 0), 0);
        // Read after 10 (the session saw up to 10): counted on from 11.
        assert_eq!(given_up_to(&at(&[11, 12, 14]), 10), 12);
        assert_eq!(given_up_to(&at(&[12, 13]), 10), 10);
        assert_eq!(given_up_to(&at(&[]), 10), 10);
    }
}
