//! Agent runs, as both engines record them: how a run ends ([`Finish`]:
//! the message it writes, how its journal step and session end, the event
//! it records and what subscribers hear), that it ends once
//! ([`refuse_ended`]), and how a run a dead daemon left in flight is
//! recorded interrupted ([`Orphan`], [`Cut`]).

use kd_proto::names::KING;
use kd_proto::types::{
    Message, MessageKind, Purpose, RouteType, RunInfo, RunMeta, RunStatus, Session, SessionStatus, ThreadEvent,
};
use serde_json::json;

use super::events::NewEvent;
use super::exchanges::RunEnd;
use super::exchanges::StepId;
use super::messages::NewMessage;
use super::outage::Again;
use super::sessions::{NewSession, SessionEnd, Taken};
use super::{DbError, DbResult, Outbox};

/// Runs another node is asked to stop on one of its threads (a King's
/// `kd cancel` or Ctrl+C on a node that is not the thread's).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cancel {
    pub thread: String,
    /// Only this member's runs.
    pub member: Option<String>,
    /// Only this run.
    pub run: Option<String>,
    /// The thread's pending auto-turns too (`council.interrupt`).
    pub turns: bool,
}

/// Why a run left in flight by a daemon that stopped is interrupted.
pub const STOPPED_IN_FLIGHT: &str = "the daemon stopped while the run was in flight";

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Finish {
    pub status: RunStatus,
    /// The message body: the answer, the reason of a failure, or the text a
    /// cancelled run had produced.
    pub body: String,
    /// The failure reason, for error and timed-out runs.
    pub error: Option<String>,
    pub meta: RunMeta,
    /// The session the run held, released as it says (its backend id, when
    /// not given, is the run's).
    pub session: Option<SessionEnd>,
    /// The members the answer is addressed to (a hand-off); the King when
    /// empty.
    pub to: Vec<String>,
}

impl Finish {
    /// The message a run's end writes: the member's answer (its error, or
    /// what it had said when cut), to the King or whom it addressed.
    /// Takes the body; the rest stays for the run's record.
    pub(crate) fn message(&mut self, run: &RunInfo) -> NewMessage {
        let kind = match self.status {
            RunStatus::Done => MessageKind::Agent,
            RunStatus::Cancelled | RunStatus::Interrupted => MessageKind::Interrupted,
            _ => MessageKind::Error,
        };
        let route = match self.to.len() {
            0 => None,
            1 => Some(RouteType::PointToPoint),
            _ => Some(RouteType::Multicast),
        };
        NewMessage {
            thread: run.thread.clone(),
            from: run.member.clone(),
            to: if self.to.is_empty() { vec![KING.to_string()] } else { self.to.clone() },
            cc: vec![],
            reply_to: run.reply_to,
            kind,
            body: std::mem::take(&mut self.body),
            round: run.round,
            run: Some(RunMeta { stopped: self.stopped().map(str::to_string), ..self.meta.clone() }),
            correlation_id: Some(run.id.clone()),
            fence: None,
            replaces: run.replaces,
            refs: vec![],
            purpose: run.purpose,
            route,
        }
    }
}

impl Finish {
    /// How the run's journal step ends with it: answered once (message
    /// `seq`), pending again after an interruption, or failed.
    pub(crate) fn step_end(&self, seq: u64) -> RunEnd {
        match self.status {
            RunStatus::Done => RunEnd::Done { seq },
            RunStatus::Interrupted => {
                RunEnd::Interrupted { seq, backend_session: self.meta.backend_session_id.clone() }
            }
            RunStatus::Cancelled => {
                RunEnd::Cancelled { reason: self.error.clone().unwrap_or_else(|| "cancelled".into()) }
            }
            _ => RunEnd::Failed { seq, reason: self.error.clone().unwrap_or_else(|| self.status.as_str().into()) },
        }
    }

    /// The end of the session the run held, its backend id the run's when
    /// the end names none.
    pub(crate) fn session_end(&self) -> Option<SessionEnd> {
        self.session.clone().map(|mut end| {
            end.backend_session_id = end.backend_session_id.or_else(|| self.meta.backend_session_id.clone());
            end
        })
    }

    /// Why a cancelled run was stopped, when neither a client's cancel nor
    /// kdd stopping did it (a member's emergency broadcast): kept on its
    /// message's run and told with `run_cancelled`.
    fn stopped(&self) -> Option<&str> {
        (self.status == RunStatus::Cancelled).then_some(self.error.as_deref()).flatten()
    }

    /// The event a run's end records (`run.finish`, `run.timeout`, …), its
    /// message being `seq`.
    pub(crate) fn event<'a>(&'a self, run: &'a RunInfo, seq: u64) -> NewEvent<'a> {
        let kind = match self.status {
            RunStatus::Done => "run.finish",
            RunStatus::TimedOut => "run.timeout",
            RunStatus::Cancelled => "run.cancel",
            RunStatus::Interrupted => "run.interrupted",
            _ => "run.error",
        };
        NewEvent {
            kind,
            thread: Some(&run.thread),
            agent: Some(&run.member),
            correlation_id: Some(&run.id),
            data: json!({"run": run.id, "seq": seq, "error": self.error, "duration_ms": self.meta.duration_ms,
                         "exit_status": self.meta.exit_status}),
            ..Default::default()
        }
    }

    /// Whether `m`, the message of the run's row found ended by an end
    /// tried again ([`Again::Retry`]), is this end's own — written by its
    /// first try, whose commit's answer was lost: from this run, with the
    /// body and time this end writes (a recovery's or another node's end
    /// of the run has no time, whatever its text). Then the try answers it and tells what the
    /// first try could not ([`Finish::tell_again`]); else the end written
    /// stands ([`refuse_ended`]).
    pub(crate) fn wrote(&self, run: &RunInfo, m: &Message) -> bool {
        let meta = m.run.as_ref();
        m.from == run.member
            && m.body == self.body
            && self.meta.duration_ms.is_some()
            && meta.is_some_and(|r| r.run_id == self.meta.run_id && r.duration_ms == self.meta.duration_ms)
    }

    /// What the first try of the end that wrote `m` told subscribers, told
    /// again: the message and the run's end (its events went out only had
    /// its commit answered). Not told again: an emergency broadcast's
    /// progress (`kd ack` reads it) and the thread's waking from idle (its
    /// status reads it).
    pub(crate) fn tell_again(self, run: &RunInfo, m: &Message, out: &mut Outbox) {
        out.publish(&run.thread, ThreadEvent::Message { message: Box::new(m.clone()) });
        out.publish(&run.thread, self.told(run, m.seq));
    }

    /// What subscribers of the thread hear of the run's end.
    pub(crate) fn told(self, run: &RunInfo, seq: u64) -> ThreadEvent {
        let (id, member) = (run.id.clone(), run.member.clone());
        match self.status {
            RunStatus::Done => ThreadEvent::RunFinished { run: id, member, seq },
            RunStatus::Cancelled | RunStatus::Interrupted => {
                let interrupted = self.status == RunStatus::Interrupted;
                let reason = self.stopped().map(str::to_string);
                ThreadEvent::RunCancelled { run: id, member, seq, interrupted, reason }
            }
            status => ThreadEvent::RunError {
                run: id,
                member,
                error: self.error.unwrap_or_default(),
                timed_out: status == RunStatus::TimedOut,
                seq,
            },
        }
    }
}

/// What the registry kept of a run left in flight, read back to record it
/// interrupted ([`Cut::interrupted`]).
pub(crate) struct Cut {
    pub backend: String,
    pub reply_to: Option<i64>,
    pub round: Option<u32>,
    pub session: Option<String>,
    pub exchange: Option<i64>,
    pub replaces: Option<i64>,
    pub ordinal: Option<i64>,
    pub purpose: Option<String>,
}

impl Cut {
    /// The run `o` as it is recorded interrupted at `now`, with what it had
    /// said (`partial`) and `why`, releasing `session` (its session, when
    /// still active).
    pub(crate) fn interrupted(
        self,
        o: &Orphan,
        now: i64,
        partial: String,
        why: &str,
        session: Option<String>,
    ) -> (RunInfo, Finish) {
        let ordinal = self.ordinal.map(|o| o as u64);
        let info = RunInfo {
            id: o.id.clone(),
            thread: o.thread.clone(),
            member: o.member.clone(),
            backend: self.backend.clone(),
            status: RunStatus::Interrupted,
            pid: o.pid,
            started_at_ms: now,
            chars: partial.chars().count() as u64,
            reply_to: self.reply_to.map(|r| r as u64),
            round: self.round,
            exchange: self.exchange.map(|r| r as u64),
            replaces: self.replaces.map(|r| r as u64),
            ordinal: ordinal.unwrap_or(0),
            purpose: self.purpose.as_deref().and_then(Purpose::parse),
            approval: None,
        };
        let body = if partial.is_empty() { "(interrupted before it said anything)".to_string() } else { partial };
        let finish = Finish {
            status: RunStatus::Interrupted,
            body,
            error: Some(why.to_string()),
            meta: RunMeta { run_id: Some(o.id.clone()), backend: Some(self.backend), ordinal, ..RunMeta::default() },
            session: session.map(|id| SessionEnd {
                id,
                status: SessionStatus::Idle,
                backend_session_id: None,
                seen_seq: None,
            }),
            to: vec![],
        };
        (info, finish)
    }
}

/// Subscribers told of a run recorded waiting.
pub(crate) fn tell_waiting(run: &RunInfo, out: &mut Outbox) {
    out.publish(&run.thread, ThreadEvent::RunWaiting { run: run.clone() });
}

/// Subscribers told of a run's agent started.
pub(crate) fn tell_started(run: &RunInfo, pid: u32, out: &mut Outbox) {
    out.publish(&run.thread, ThreadEvent::RunStarted { run: run.id.clone(), member: run.member.clone(), pid });
}

/// Whether a run's row — its `status` and `pid` — says its agent's start
/// (`pid`), tried again ([`Again::Retry`]), was written by its first try,
/// whose commit's answer was lost: then the start is told, not recorded a
/// second time.
pub(crate) fn start_written(status: &str, row_pid: Option<i64>, pid: u32) -> bool {
    status == "streaming" && row_pid == Some(i64::from(pid))
}

/// A run's end is written once: a run whose row says it ended (a recovery,
/// or another node's reaper, wrote its end) writes nothing more.
pub(crate) fn refuse_ended(id: &str, status: &str) -> DbResult<()> {
    match is_ended(status) {
        false => Ok(()),
        true => Err(DbError::RunEnded { run: id.to_string(), status: status.to_string() }),
    }
}

/// Whether a run whose row says `status` has ended.
pub(crate) fn is_ended(status: &str) -> bool {
    !matches!(status, "waiting" | "streaming")
}

/// A run recorded as it is about to start, with what it takes then, in
/// one transaction (issue 31 item 17: one commit, not three): its row
/// waiting (and its journal step, or [`DbError::StepTaken`] and nothing
/// written), the session it holds — taken, or refused and the refusal
/// recorded, the run all the same — and its member's inbox items of the
/// thread its prompt gives it.
#[derive(Debug, Clone)]
pub struct RunStart {
    pub run: RunInfo,
    pub step: Option<StepId>,
    /// Its row is written already (a work run: recorded before its
    /// worktree is marked working): only what it takes here.
    pub recorded: bool,
    pub session: TakeSession,
    /// The run fails without its session (resume mode): then its inbox
    /// items are given only with the session. Else (history mode, a prompt
    /// of its own, a cut run asked again) a session refused, gone or
    /// archived leaves the run without one, its items given all the same.
    pub needs_session: bool,
    /// The member's pending inbox items of the thread up to this seq are
    /// given to the run.
    pub given: Option<u64>,
    /// The run's agent, spawned already: recorded as started in the same
    /// write (a CLI agent on a registry no other node shares, where nothing
    /// can refuse the run: one write a run fewer, issue 31, item 17).
    pub spawned: Option<Spawned>,
    /// The write is tried again after a failure that may have come after
    /// its commit ([`Again`]).
    pub again: Again,
}

/// A run's agent process: its pid and start time (clock ticks after boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spawned {
    pub pid: u32,
    pub start: Option<u64>,
}

impl RunStart {
    /// What the session's take comes to: its outcome for the run (a
    /// refusal, or an error of a session it can do without), or an error
    /// of the whole write.
    pub(crate) fn took(needs_session: bool, taken: DbResult<Taken>) -> DbResult<DbResult<Session>> {
        match taken {
            Ok(t) => Ok(t.into()),
            Err(e @ (DbError::NotFound(_) | DbError::Invalid(_))) if !needs_session => Ok(Err(e)),
            Err(e) => Err(e),
        }
    }

    /// Whether the inbox items are given, the session having come to `session`.
    pub(crate) fn gives(needs_session: bool, session: &DbResult<Session>) -> bool {
        session.is_ok() || !needs_session
    }

    /// Who holds the session the run takes.
    pub(crate) fn holder(&self) -> Option<&str> {
        match &self.session {
            TakeSession::New(s) => s.holder.as_deref(),
            TakeSession::Resume { holder, .. } => holder.as_deref(),
        }
    }

    /// Of the member's active session on the thread (`active`), the one
    /// this run took: held by the run's holder.
    pub(crate) fn own(&self, active: Option<Session>) -> Option<Session> {
        active.filter(|s| self.holder().is_some() && s.holder.as_deref() == self.holder())
    }

    /// What a start tried again answers when its first try was written
    /// ([`Again`]): the session that try took (`held`, [`RunStart::own`]),
    /// or, without one, that the run has none — as the first try answered
    /// a refusal, or a session the run could do without gone. `None`: the
    /// first try was not written (no row of the run; for a run recorded
    /// before, no session of its), and the write goes on as a first try.
    pub(crate) fn written(&self, row: bool, held: Option<Session>) -> Option<DbResult<Session>> {
        match (self.recorded, row, held) {
            (_, _, Some(s)) => Some(Ok(s)),
            (false, true, None) => Some(Err(DbError::NotFound(format!(
                "a session of the run {}: its start was written without one",
                self.run.id
            )))),
            _ => None,
        }
    }

    /// What the first try told subscribers, told again by a second try
    /// that found it written: its events went out only had its commit
    /// answered.
    pub(crate) fn tell_again(&self, out: &mut Outbox) {
        if !self.recorded {
            tell_waiting(&self.run, out);
        }
        if let Some(Spawned { pid, .. }) = self.spawned {
            tell_started(&self.run, pid, out);
        }
    }
}

/// The session a starting run holds.
#[derive(Debug, Clone)]
pub enum TakeSession {
    /// A new one.
    New(NewSession),
    /// The thread's session of its member (the single-resume rule: refused
    /// while another holds it).
    Resume { id: String, holder: Option<String> },
}

/// A run a previous daemon left in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub id: String,
    pub thread: String,
    pub member: String,
    pub pid: Option<u32>,
    pub pid_start: Option<u64>,
}

/// What recording `run`, waiting to start, records.
pub(crate) fn waiting(run: &RunInfo) -> NewEvent<'_> {
    NewEvent {
        kind: "run.start",
        thread: Some(&run.thread),
        agent: Some(&run.member),
        correlation_id: Some(&run.id),
        data: json!({"run": run.id, "backend": run.backend, "reply_to": run.reply_to, "round": run.round,
                     "exchange": run.exchange, "replaces": run.replaces}),
        ..Default::default()
    }
}

/// What `run`'s process starting as `pid` (holding `session`) records.
pub(crate) fn spawned<'a>(run: &'a RunInfo, pid: u32, session: Option<&'a str>) -> NewEvent<'a> {
    NewEvent {
        kind: "run.spawn",
        thread: Some(&run.thread),
        agent: Some(&run.member),
        session,
        correlation_id: Some(&run.id),
        data: json!({"run": run.id, "pid": pid}),
        ..Default::default()
    }
}
