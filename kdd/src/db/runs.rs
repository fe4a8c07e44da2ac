//! Agent runs: their rows, the partial text saved while they stream, their
//! end (message, event, subscriber notice in one transaction), and the
//! recovery of runs a dead daemon left in flight.

use kd_proto::names::KING;
use kd_proto::types::{MessageKind, RouteType, RunInfo, RunMeta, RunStatus};

use super::messages::NewMessage;
use super::sessions::SessionEnd;
use super::{DbError, DbResult};

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
            run: Some(self.meta.clone()),
            correlation_id: Some(run.id.clone()),
            fence: None,
            replaces: run.replaces,
            refs: vec![],
            purpose: run.purpose,
            route,
        }
    }
}

/// A run's end is written once: a run whose row says it ended (a recovery,
/// or another node's reaper, wrote its end) writes nothing more.
pub(crate) fn refuse_ended(id: &str, status: &str) -> DbResult<()> {
    match status {
        "waiting" | "streaming" => Ok(()),
        _ => Err(DbError::RunEnded { run: id.to_string(), status: status.to_string() }),
    }
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
