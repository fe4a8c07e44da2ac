//! Resume at start (F-J2): every exchange a previous daemon left open — cut
//! by kill -9, a graceful stop, a restart or an upgrade — is taken up
//! again, younger than its workspace's `council.resume_within`. A step
//! whose runs were cut `council.resume_attempts` times is left failed with
//! the reason said (a crash-looping agent cannot loop forever); the rest
//! go on in order, each asked once, by the same drivers that began them.
//! It sits above the drivers it dispatches to ([`crate::council`] and, for
//! completions and work, [`crate::coord`] and [`crate::work`]).

use std::sync::Arc;
use std::time::Duration;

use kd_proto::names::{KD, KING};
use kd_proto::types::{MessageKind, RoundState, ThreadEvent, ThreadStatus};

use crate::config::{self, Config};
use crate::coord::Coord;
use crate::council::Launch;
use crate::council::exchange::{self, Journal};
use crate::db::exchanges::{Exchange, Kind, Purpose, StepState};
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

/// Resumes every unfinished exchange, oldest first.
pub async fn all(co: &Arc<Coord>) -> Resumed {
    let db = &co.council.agents.db;
    let mut done = Resumed::default();
    let open = match db.unfinished_exchanges().await {
        Ok(open) => open,
        Err(e) => {
            tracing::error!("cannot read the exchanges to resume: {e}");
            return done;
        }
    };
    for x in open {
        let resumed = match one(co, &x, &mut done).await {
            Ok(resumed) => resumed,
            Err(e) => {
                tracing::error!(thread = x.thread, exchange = x.seq, "cannot resume the exchange: {e}");
                continue;
            }
        };
        if resumed {
            done.resumed += 1;
        } else {
            done.stopped += 1;
        }
        // What followed it in memory (a rebase's request) follows it again.
        crate::work::rebase::restarted(co, &x, resumed).await;
    }
    if done != Resumed::default() {
        tracing::info!(
            resumed = done.resumed,
            stopped = done.stopped,
            given_up = done.given_up,
            "exchanges left open by the previous daemon"
        );
    }
    done
}

/// Drives exchange `x`, which this node just took from the registry: a
/// question routed here from another node, or an exchange a dead node
/// left, resumed as a restart resumes its own ([`crate::cluster`]).
pub async fn taken(co: &Arc<Coord>, x: &Exchange) {
    let mut done = Resumed::default();
    match one(co, x, &mut done).await {
        Ok(resumed) => crate::work::rebase::restarted(co, x, resumed).await,
        Err(e) => tracing::error!(thread = x.thread, exchange = x.seq, "cannot drive the exchange taken: {e}"),
    }
}

/// Resumes `x`, or stops it for good when it may not be; true if resumed.
async fn one(co: &Arc<Coord>, x: &Exchange, done: &mut Resumed) -> Result<bool, DbError> {
    let db = &co.council.agents.db;
    // A question routed here is not begun yet: it begins (as it would have
    // on the node that has the workspace).
    if crate::council::send::Routed::of(&x.plan).is_some() {
        return crate::council::send::take_routed(&co.council, x).await;
    }
    let thread = match db.thread(x.thread.clone()).await {
        Ok(t) => t,
        Err(DbError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    if thread.status == ThreadStatus::Archived {
        stop(co, x, "the thread is archived".into()).await?;
        return Ok(false);
    }
    // Its agents are found as when it was asked: on the asking client's PATH.
    let config = match config::load_for(std::path::Path::new(&thread.workspace), x.path.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let why = format!("kd restarted and could not resume this exchange: configuration: {e}");
            stop_saying(co, x, "configuration", why).await?;
            return Ok(false);
        }
    };
    let within = config.council.resume_within;
    if within.is_zero() {
        stop(co, x, "resuming is off (council.resume_within is 0)".into()).await?;
        return Ok(false);
    }
    let age = Duration::from_millis(now_ms().saturating_sub(x.created_at_ms).max(0) as u64);
    if age > within {
        let why = format!(
            "kd restarted: this exchange (begun {} ago) is older than council.resume_within ({}) and was not \
             resumed; `kd retry` asks failed members again",
            human(age),
            human(within)
        );
        stop_saying(co, x, "expired", why).await?;
        return Ok(false);
    }
    done.given_up += give_up_cut_steps(co, x, &config).await?;
    let work = crate::council::work_runs(db, &thread.id).await?;
    // Each driver sets the style and timeout its plan keeps.
    let launch = Launch { thread, config, style: Default::default(), timeout: None, client: None, prompt: None, work };
    db.exchange_resumed(x.clone()).await?;
    let resumed = match x.kind {
        Kind::Council => exchange::resume(co.council.clone(), x, launch).await,
        // The rounds' replay, then the vote over the work when one is due.
        Kind::Work => {
            let vote = Journal::from_plan(&x.plan).is_some_and(|j| j.vote);
            let resumed = exchange::resume(co.council.clone(), x, launch).await;
            if resumed && vote {
                crate::work::vote::after_rounds(co, &x.thread, x.seq);
            }
            resumed
        }
        // Its drive reads its own plan and the workspace's configuration.
        Kind::Completion => crate::coord::completion::resume(co, x),
        Kind::Retry => crate::council::retry::resume(&co.council, x, launch).await,
        Kind::Route => crate::council::deliver::resume(&co.council, x, launch).await,
        Kind::Review => false,
    };
    if !resumed {
        stop(co, x, format!("kd cannot resume this {} exchange", x.kind.as_str())).await?;
    }
    Ok(resumed)
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

/// Stops `x` for good with `reason`, telling the King why in a message
/// from kd.
async fn stop_saying(co: &Arc<Coord>, x: &Exchange, reason: &str, why: String) -> Result<(), DbError> {
    let notice = NewMessage {
        reply_to: Some(x.seq),
        correlation_id: Some(format!("x-{}", x.seq)),
        ..NewMessage::new(&x.thread, KD, vec![KING.to_string()], MessageKind::System, why)
    };
    co.council.agents.db.stop_exchange_with_notice(x.id, reason.into(), notice).await?;
    stopped(co, x);
    Ok(())
}

/// Stops `x` for good with `reason`.
async fn stop(co: &Arc<Coord>, x: &Exchange, reason: String) -> Result<(), DbError> {
    co.council.agents.db.stop_exchange(x.id, reason).await?;
    stopped(co, x);
    Ok(())
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
