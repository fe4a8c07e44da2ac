//! Resume at start (F-J2): every exchange a previous daemon left open — cut
//! by kill -9, a graceful stop, a restart or an upgrade — is taken up
//! again, younger than its workspace's `council.resume_within`. A step
//! whose runs were cut `council.resume_attempts` times is left failed with
//! the reason said (a crash-looping agent cannot loop forever); the rest
//! go on in order, each asked once, by the same drivers that began them.
//! It sits above the drivers it dispatches to ([`crate::council`] and, for
//! completions and work, [`crate::coord`] and [`crate::work`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kd_proto::names::{KD, KING};
use kd_proto::types::{MessageKind, RoundState, ThreadEvent, ThreadStatus};

use crate::config::{self, Config};
use crate::coord::Coord;
use crate::coord::claims::Claim;
use crate::council::Launch;
use crate::council::exchange::{self, Journal};
use crate::council::exchanges::Exchange as Live;
use crate::db::exchanges::{Exchange, ExchangeState, Kind, Purpose, StepState};
use crate::db::messages::NewMessage;
use crate::db::{DbError, now_ms};

/// What a resume pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    pub resumed: usize,
    /// Stopped for good: too old, archived, resuming off, unreadable.
    pub stopped: usize,
    /// Steps left failed after too many attempts.
    pub given_up: usize,
}

/// What became of an exchange left open.
enum Fate {
    /// Driven again here — a council or work exchange by this one.
    Resumed(Option<Arc<Live>>),
    /// A newer exchange on its thread took its place, or it ended, while
    /// kdd was starting.
    Superseded,
    /// Stopped for good, with what kd would have told the King when what
    /// followed the exchange tells it instead (a rebase's outcome).
    Stopped(Option<String>),
}

/// An exchange the previous daemon left open — a rebase's request with
/// its work claimed for the follower.
pub struct Left {
    x: Exchange,
    claim: Option<Claim>,
}

/// The exchanges the previous daemon left open, oldest first: read before
/// this one serves, for what this one begins is its own (a `kd rebase` of
/// a work whose request was left open is refused until it is followed).
pub async fn left(co: &Arc<Coord>) -> Vec<Left> {
    // Not waited for when the registry is away: this daemon does not
    // listen yet (what a failed read leaves open, the next start resumes).
    let open = co.council.agents.db.unfinished_exchanges().await.unwrap_or_else(|e| {
        tracing::error!("cannot read the exchanges to resume: {e}");
        Vec::new()
    });
    let claim = |x: &Exchange| crate::work::rebase::member(x).and_then(|m| co.rebasing.take(&x.thread, &m));
    open.into_iter().map(|x| Left { claim: claim(&x), x }).collect()
}

/// Resumes the exchanges the previous daemon `left` open, oldest first.
pub async fn all(co: &Arc<Coord>, left: Vec<Left>) -> Resumed {
    let mut done = Resumed::default();
    for Left { x, claim } in left {
        let given_up = AtomicUsize::new(0);
        let result = resume(co, &x, &given_up).await;
        done.given_up += given_up.load(Ordering::Relaxed);
        let fate = match result {
            // Ended since it was read (cancelled while kdd committed what
            // the runs left): not driven again.
            Ok(Taken::Ended(now)) => {
                followed(co, &now, Fate::Superseded, claim).await;
                continue;
            }
            Ok(Taken::Fate(fate)) => fate,
            Err(e) => match failed(co, &x, e).await {
                Some(fate) => fate,
                None => continue,
            },
        };
        if matches!(fate, Fate::Stopped(_)) {
            done.stopped += 1;
        } else {
            done.resumed += 1;
        }
        followed(co, &x, fate, claim).await;
    }
    if done != Resumed::default() {
        tracing::info!(
            resumed = done.resumed,
            stopped = done.stopped,
            given_up = done.given_up,
            "resumed the exchanges the previous daemon left open"
        );
    }
    done
}

/// Drives exchange `x` of a node declared dead, taken by this one.
pub async fn taken(co: &Arc<Coord>, x: &Exchange) {
    let fate = match resume(co, x, &AtomicUsize::new(0)).await {
        Ok(Taken::Ended(now)) => return followed(co, &now, Fate::Superseded, None).await,
        Ok(Taken::Fate(fate)) => fate,
        Err(e) => match failed(co, x, e).await {
            Some(fate) => fate,
            None => return,
        },
    };
    followed(co, x, fate, None).await;
}

/// What a resume pass made of an exchange left open.
enum Taken {
    /// It had ended since it was read (as it now stands).
    Ended(Box<Exchange>),
    Fate(Fate),
}

/// Resumes `x` ([`one`]) unless it has ended since it was read — waiting
/// out an outage of the registry as a write kept does ([`crate::db::outage`]):
/// an exchange whose resume met one is resumed once the registry is back,
/// not left open, with nothing driving it, until the next start. Each try
/// begins again from the journal as it then stands, as the next start
/// would (a step given up is given up once; the resume is recorded last,
/// after every write that could fail).
async fn resume(co: &Arc<Coord>, x: &Exchange, given_up: &AtomicUsize) -> Result<Taken, DbError> {
    let db = &co.council.agents.db;
    let what = format!("resuming exchange {} of thread {}", x.seq, x.thread);
    db.until_back(
        &what,
        || co.council.agents.is_closed(),
        |_| async {
            match db.exchange(x.id).await {
                Ok(now) if now.state != ExchangeState::Open => Ok(Taken::Ended(Box::new(now))),
                Ok(now) => one(co, &now, given_up).await.map(Taken::Fate),
                Err(e) if e.is_outage() => Err(e),
                Err(_) => one(co, x, given_up).await.map(Taken::Fate),
            }
        },
    )
    .await
}

/// `x` could not be resumed for `e` (not an outage, or kdd is stopping):
/// left open for the next start — but
/// a rebase's request, whose follower would wait on it, is stopped when
/// the registry lets it be, and the follower told why.
async fn failed(co: &Arc<Coord>, x: &Exchange, e: DbError) -> Option<Fate> {
    tracing::error!(thread = x.thread, exchange = x.seq, "cannot resume the exchange: {e}");
    if !crate::work::rebase::is_request(x) {
        return None;
    }
    // Not stopped (the registry failing still): the next start resumes it.
    if let Err(e) = co.council.agents.db.stop_exchange(x.id, "not resumed".into()).await {
        tracing::warn!(thread = x.thread, exchange = x.seq, "cannot stop the exchange: {e}");
        return None;
    }
    stopped(co, x);
    Some(Fate::Stopped(Some(format!("kd restarted and could not resume this request: {e}"))))
}

/// What followed `x` in memory (a rebase's request) follows it again, as
/// its `fate` has it, holding `claim` when one was taken for it.
async fn followed(co: &Arc<Coord>, x: &Exchange, fate: Fate, claim: Option<Claim>) {
    let (live, said) = match fate {
        Fate::Resumed(live) => (live, None),
        Fate::Superseded => (None, None),
        Fate::Stopped(said) => (None, said),
    };
    crate::work::rebase::restarted(co, x, live, said, claim).await;
}

/// Resumes `x`, or stops it for good when it may not be.
async fn one(co: &Arc<Coord>, x: &Exchange, given_up: &AtomicUsize) -> Result<Fate, DbError> {
    let db = &co.council.agents.db;
    // A question routed here is not begun yet: it begins (as it would have
    // on the node that has the workspace).
    if crate::council::send::Routed::of(&x.plan).is_some() {
        let begun = crate::council::send::take_routed(&co.council, x).await?;
        return Ok(if begun { Fate::Resumed(None) } else { Fate::Stopped(None) });
    }
    let thread = match db.thread(x.thread.clone()).await {
        Ok(t) => t,
        Err(DbError::NotFound(_)) => return Ok(Fate::Stopped(None)),
        Err(e) => return Err(e),
    };
    if thread.status == ThreadStatus::Archived {
        return stop(co, x, "the thread is archived".into()).await;
    }
    // Its agents are found as when it was asked: on the asking client's PATH.
    let config = match config::load_for(std::path::Path::new(&thread.workspace), x.path.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let why = format!("kd restarted and could not resume this exchange: configuration: {e}");
            return stop_saying(co, x, "configuration", why, "").await;
        }
    };
    let within = config.council.resume_within;
    if within.is_zero() {
        return stop(co, x, "resuming is off (council.resume_within is 0)".into()).await;
    }
    let age = Duration::from_millis(now_ms().saturating_sub(x.created_at_ms).max(0) as u64);
    if age > within {
        let why = format!(
            "kd restarted: this exchange (begun {} ago) is older than council.resume_within ({}) and was not \
             resumed",
            human(age),
            human(within)
        );
        return stop_saying(co, x, "expired", why, "; `kd retry` asks failed members again").await;
    }
    given_up.fetch_add(give_up_cut_steps(co, x, &config).await?, Ordering::Relaxed);
    let work = crate::council::work_runs(db, &thread.id).await?;
    // Each driver sets the style and timeout its plan keeps.
    let launch = Launch { thread, config, style: Default::default(), timeout: None, client: None, prompt: None, work };
    db.exchange_resumed(x.clone()).await?;
    let driven = |resumed: bool| if resumed { Some(Fate::Resumed(None)) } else { None };
    let fate = match x.kind {
        Kind::Council => rounds(exchange::resume(co.council.clone(), x, launch).await),
        // The rounds' replay, then the vote over the work when one is due.
        Kind::Work => {
            let vote = Journal::from_plan(&x.plan).is_some_and(|j| j.vote);
            let fate = rounds(exchange::resume(co.council.clone(), x, launch).await);
            if vote && fate.is_some() {
                crate::work::vote::after_rounds(co, &x.thread, x.seq);
            }
            fate
        }
        // Its drive reads its own plan and the workspace's configuration.
        Kind::Completion => driven(crate::coord::completion::resume(co, x)),
        Kind::Retry => driven(crate::council::retry::resume(&co.council, x, launch).await),
        Kind::Route => driven(crate::council::deliver::resume(&co.council, x, launch).await),
        Kind::Review => None,
    };
    match fate {
        Some(fate) => Ok(fate),
        None => stop(co, x, format!("kd cannot resume this {} exchange", x.kind.as_str())).await,
    }
}

/// The fate of an exchange of rounds [`exchange::resume`] took up (none:
/// it could not).
fn rounds(resumed: exchange::Resumed) -> Option<Fate> {
    match resumed {
        exchange::Resumed::Driving(ex) => Some(Fate::Resumed(Some(ex))),
        exchange::Resumed::Superseded => Some(Fate::Superseded),
        exchange::Resumed::Not => None,
    }
}

/// Leaves failed each step cut `council.resume_attempts` times: its
/// member's error message, replacing what it had said, says why.
async fn give_up_cut_steps(co: &Arc<Coord>, x: &Exchange, config: &Config) -> Result<usize, DbError> {
    let db = &co.council.agents.db;
    let attempts = config.council.resume_attempts;
    let mut n = 0;
    for s in db.exchange_steps(x.id).await? {
        if s.state != StepState::Pending || s.replaces_seq.is_none() || s.attempts < attempts {
            continue;
        }
        let member = &s.key.member;
        let body = format!(
            "{member} was cut {} times by kd stopping while it answered (council.resume_attempts is {attempts}); \
             it is not asked again — `kd retry` asks it",
            s.attempts
        );
        let error = NewMessage {
            reply_to: s.reply_to,
            round: Some(s.key.round),
            replaces: s.replaces_seq,
            correlation_id: Some(format!("x-{}", x.seq)),
            purpose: match s.key.purpose {
                Purpose::Ballot => Some(kd_proto::types::Purpose::Ballot),
                Purpose::Synthesis => Some(kd_proto::types::Purpose::Synthesis),
                _ => None,
            },
            ..NewMessage::new(&x.thread, member, vec![KING.to_string()], MessageKind::Error, body)
        };
        let reason = format!("cut {} times (council.resume_attempts)", s.attempts);
        if db.give_up_step(s.id, error, reason).await?.is_some() {
            n += 1;
        }
    }
    Ok(n)
}

/// Stops `x` for good with `reason`, telling the King `why` (and what to
/// do `then`) in a message from kd — or, when what followed it says how
/// it ended (a rebase's request), leaving that to say why.
async fn stop_saying(co: &Arc<Coord>, x: &Exchange, reason: &str, why: String, then: &str) -> Result<Fate, DbError> {
    if crate::work::rebase::is_request(x) {
        co.council.agents.db.stop_exchange(x.id, reason.into()).await?;
        stopped(co, x);
        return Ok(Fate::Stopped(Some(why)));
    }
    let notice = NewMessage {
        reply_to: Some(x.seq),
        correlation_id: Some(format!("x-{}", x.seq)),
        ..NewMessage::new(&x.thread, KD, vec![KING.to_string()], MessageKind::System, format!("{why}{then}"))
    };
    co.council.agents.db.stop_exchange_with_notice(x.id, reason.into(), notice).await?;
    stopped(co, x);
    Ok(Fate::Stopped(None))
}

/// Stops `x` for good with `reason` (which what followed it, a rebase's
/// request, says).
async fn stop(co: &Arc<Coord>, x: &Exchange, reason: String) -> Result<Fate, DbError> {
    let said =
        crate::work::rebase::is_request(x).then(|| format!("kd restarted and did not resume this request: {reason}"));
    co.council.agents.db.stop_exchange(x.id, reason).await?;
    stopped(co, x);
    Ok(Fate::Stopped(said))
}

/// Tells the thread's subscribers that `x` is over — a client that waited
/// on it through the restart (`kd ask`) may have asked before it was
/// stopped, and hears it now.
fn stopped(co: &Arc<Coord>, x: &Exchange) {
    let rounds = Journal::from_plan(&x.plan).map_or(1, |j| j.rounds);
    let event = ThreadEvent::Round { exchange: x.seq, round: 1, rounds, state: RoundState::Stopped, expected: vec![] };
    co.council.agents.hub.publish(&x.thread, event);
}

/// `3 h 20 min`, `45 s`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_said_in_their_largest_units() {
        assert_eq!(human(Duration::from_secs(45)), "45 s");
        assert_eq!(human(Duration::from_secs(125)), "2 min");
        assert_eq!(human(Duration::from_secs(3 * 3600 + 20 * 60)), "3 h 20 min");
        assert_eq!(human(Duration::from_secs(2 * 86_400 + 3600)), "2 d 1 h");
    }
}
