//! What is worth the King's attention, from the thread events published on
//! this node: [`glance`] picks the few that may be (on the publisher's
//! path: it only matches and copies a few fields), [`Attention`] decides,
//! off that path, what is sent — at most once per exchange and kind.
//!
//! | kind | when |
//! |---|---|
//! | `approval` | a member's CLI asks a permission the King must give |
//! | `done` | an exchange ended, every round run (`Round` `done`) |
//! | `work` | the same, on a thread with members' work (`kd work`) |
//! | `failed` | a member's run failed |
//! | `timeout` | a member's run timed out |
//! | `budget` | `council.budget_usd` stopped an exchange |
//! | `emergency` | an emergency broadcast is still unacknowledged after `notify.ack_within` |
//!
//! An exchange stopped by the King is not notified: the King is there.
//! That is one interrupted (`Round` `stopped`), and one that ended because
//! the King cancelled its last run to end (`run.cancel`: Ctrl+C of `kd
//! ask` or `kd work`, `kd cancel`); one whose other members answered after
//! a cancelled run is notified, and so is one a member's emergency
//! broadcast stopped (its runs' `reason`).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use kd_proto::approval::ApprovalState;
use kd_proto::names::KD;
use kd_proto::notify::NotifyKind;
use kd_proto::types::{MessageKind, RoundState, ThreadEvent};

use crate::council::budget::NOTICE as BUDGET_NOTICE;

/// How many runs, threads, keys and broadcasts [`Attention`] remembers
/// (the oldest forgotten first).
const REMEMBERED: usize = 4096;
/// Longest title, in characters.
const TITLE_CHARS: usize = 160;
/// Longest text, in characters.
const TEXT_CHARS: usize = 1000;

/// What [`glance`] kept of an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// A run was accepted: which exchange it belongs to.
    Run {
        run: String,
        exchange: Option<u64>,
    },
    Failed {
        run: String,
        member: String,
        error: String,
        timed_out: bool,
    },
    /// A run ended with an answer, or was cancelled by the King (not cut
    /// by kdd stopping).
    Ended {
        run: String,
        cancelled: bool,
    },
    /// An exchange ended with every round run.
    Done {
        exchange: u64,
        expected: Vec<String>,
    },
    /// Members' work moved on the thread.
    Work {
        task: String,
    },
    Budget {
        exchange: Option<u64>,
        text: String,
    },
    Emergency {
        broadcast: String,
        from: String,
        pending: Vec<String>,
    },
    /// An approval waits for the King.
    Approval {
        id: String,
        run: Option<String>,
        member: String,
        what: String,
    },
}

/// The events that may call for the King, and what of them is needed.
pub fn glance(e: &ThreadEvent) -> Option<Seen> {
    Some(match e {
        ThreadEvent::RunWaiting { run } => Seen::Run { run: run.id.clone(), exchange: run.exchange },
        ThreadEvent::RunError { run, member, error, timed_out, .. } => Seen::Failed {
            run: run.clone(),
            member: member.clone(),
            error: clip(error, TEXT_CHARS),
            timed_out: *timed_out,
        },
        ThreadEvent::RunFinished { run, .. } => Seen::Ended { run: run.clone(), cancelled: false },
        // Cancelled by a client (no reason), not by a member's emergency.
        ThreadEvent::RunCancelled { run, interrupted: false, reason, .. } => {
            Seen::Ended { run: run.clone(), cancelled: reason.is_none() }
        }
        ThreadEvent::Round { exchange, state: RoundState::Done, expected, .. } => {
            Seen::Done { exchange: *exchange, expected: expected.clone() }
        }
        ThreadEvent::Work { worktree } => Seen::Work { task: clip(&worktree.task, TITLE_CHARS) },
        ThreadEvent::Message { message }
            if message.from == KD && message.kind == MessageKind::System && message.body.starts_with(BUDGET_NOTICE) =>
        {
            Seen::Budget { exchange: message.reply_to, text: clip(&message.body, TEXT_CHARS) }
        }
        ThreadEvent::ApprovalRequested { approval } if approval.state == ApprovalState::Pending => Seen::Approval {
            id: approval.id.clone(),
            run: approval.run.clone(),
            member: approval.member.clone(),
            what: clip(&approval.tool.title, TITLE_CHARS),
        },
        ThreadEvent::Emergency { broadcast, from, pending, .. } => {
            Seen::Emergency { broadcast: broadcast.clone(), from: from.clone(), pending: pending.clone() }
        }
        _ => return None,
    })
}

/// A notification to send, before the thread's facts are added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    pub kind: NotifyKind,
    pub exchange: Option<u64>,
    pub member: Option<String>,
    /// One line; the thread's title is added after it.
    pub title: String,
    pub text: String,
    /// The approval that waits (kind `approval`).
    pub approval: Option<String>,
}

/// What to do after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Nothing,
    Send(Draft),
    /// An emergency broadcast waits for acknowledgements: ask again with
    /// [`Attention::due`] after `notify.ack_within`.
    Arm {
        broadcast: String,
    },
}

/// Of what it saw, what the notifier remembers to decide.
#[derive(Default)]
pub struct Attention {
    /// Each run's exchange.
    runs: Bounded<String, Option<u64>>,
    /// Threads that have members' work, and its task.
    work: Bounded<String, String>,
    /// Notifications sent: (thread, what, kind).
    sent: Bounded<(String, Key, NotifyKind), ()>,
    /// Exchanges (thread, exchange) whose last run to end the King
    /// cancelled.
    cut: Bounded<(String, u64), ()>,
    /// Emergency broadcasts waiting: (thread, from, pending).
    emergencies: Bounded<String, (String, String, Vec<String>)>,
}

/// What a notification is about, for "at most once".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Exchange(u64),
    Run(String),
    Broadcast(String),
    Approval(String),
}

impl Attention {
    pub fn see(&mut self, thread: &str, seen: Seen) -> Next {
        match seen {
            Seen::Run { run, exchange } => {
                self.runs.put(run, exchange);
                Next::Nothing
            }
            Seen::Work { task } => {
                self.work.put(thread.to_string(), task);
                Next::Nothing
            }
            Seen::Ended { run, cancelled } => {
                if let Some(exchange) = self.runs.get(&run).copied().flatten() {
                    let key = (thread.to_string(), exchange);
                    if cancelled {
                        self.cut.put(key, ());
                    } else {
                        self.cut.take(&key);
                    }
                }
                Next::Nothing
            }
            Seen::Failed { run, member, error, timed_out } => {
                let exchange = self.runs.get(&run).copied().flatten();
                if let Some(x) = exchange {
                    self.cut.take(&(thread.to_string(), x));
                }
                let key = exchange.map_or(Key::Run(run), Key::Exchange);
                let (kind, title) = if timed_out {
                    (NotifyKind::Timeout, format!("{member} timed out"))
                } else {
                    (NotifyKind::Failed, format!("{member} failed"))
                };
                self.once(
                    thread,
                    key,
                    Draft { kind, exchange, member: Some(member), title, text: error, approval: None },
                )
            }
            Seen::Done { exchange, expected } => {
                if self.cut.take(&(thread.to_string(), exchange)).is_some() {
                    return Next::Nothing;
                }
                let (kind, title, text) = match self.work.get(&thread.to_string()) {
                    Some(task) => (NotifyKind::Work, "work done".to_string(), format!("Task: {task}")),
                    None => (
                        NotifyKind::Done,
                        "the council answered".to_string(),
                        if expected.is_empty() {
                            "The exchange ended.".to_string()
                        } else {
                            format!("The exchange ended; answered: {}.", expected.join(", "))
                        },
                    ),
                };
                self.once(
                    thread,
                    Key::Exchange(exchange),
                    Draft { kind, exchange: Some(exchange), member: None, title, text, approval: None },
                )
            }
            Seen::Budget { exchange, text } => {
                let key = exchange.map_or_else(|| Key::Run(thread.to_string()), Key::Exchange);
                let title = "the budget stopped an exchange".to_string();
                self.once(
                    thread,
                    key,
                    Draft { kind: NotifyKind::Budget, exchange, member: None, title, text, approval: None },
                )
            }
            Seen::Emergency { broadcast, from, pending } => {
                let known = self.emergencies.get(&broadcast).is_some();
                self.emergencies.put(broadcast.clone(), (thread.to_string(), from, pending));
                if known { Next::Nothing } else { Next::Arm { broadcast } }
            }
            Seen::Approval { id, run, member, what } => {
                let exchange = run.as_ref().and_then(|r| self.runs.get(r).copied().flatten());
                let draft = Draft {
                    kind: NotifyKind::Approval,
                    exchange,
                    member: Some(member.clone()),
                    title: format!("{member} asks: {what}"),
                    text: format!("{member} asks: {what}. Answer: kd approve {id}, or kd deny {id}."),
                    approval: Some(id.clone()),
                };
                self.once(thread, exchange.map_or(Key::Approval(id), Key::Exchange), draft)
            }
        }
    }

    /// An emergency broadcast's time is up: a notification when members
    /// still have not acknowledged it. Returns its thread too.
    pub fn due(&mut self, broadcast: &str) -> Option<(String, Draft)> {
        let (thread, from, pending) = self.emergencies.take(&broadcast.to_string())?;
        if pending.is_empty() {
            return None;
        }
        let draft = Draft {
            kind: NotifyKind::Emergency,
            exchange: None,
            member: Some(from.clone()),
            title: format!("emergency from {from} not acknowledged"),
            text: format!("Not acknowledged by: {}.", pending.join(", ")),
            approval: None,
        };
        match self.once(&thread, Key::Broadcast(broadcast.to_string()), draft) {
            Next::Send(d) => Some((thread, d)),
            _ => None,
        }
    }

    fn once(&mut self, thread: &str, key: Key, draft: Draft) -> Next {
        let k = (thread.to_string(), key, draft.kind);
        if self.sent.get(&k).is_some() {
            return Next::Nothing;
        }
        self.sent.put(k, ());
        Next::Send(draft)
    }
}

/// A map that forgets its oldest entries past [`REMEMBERED`].
struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded { map: HashMap::new(), order: VecDeque::new() }
    }
}

impl<K: Eq + Hash + Clone, V> Bounded<K, V> {
    fn put(&mut self, k: K, v: V) {
        if self.map.insert(k.clone(), v).is_none() {
            self.order.push_back(k);
            while self.order.len() > REMEMBERED {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    fn take(&mut self, k: &K) -> Option<V> {
        let v = self.map.remove(k)?;
        self.order.retain(|o| o != k);
        Some(v)
    }
}

/// `s` on one line (control characters, escapes included, made spaces) and
/// at most `max` characters: safe in a terminal's title or a desktop popup.
pub fn clip(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut n = 0;
    let mut space = false;
    for c in s.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if c == ' ' && (space || out.is_empty()) {
            continue;
        }
        space = c == ' ';
        if n == max {
            out.pop_if_space();
            out.push('…');
            return out;
        }
        out.push(c);
        n += 1;
    }
    out.pop_if_space();
    out
}

trait PopSpace {
    fn pop_if_space(&mut self);
}

impl PopSpace for String {
    fn pop_if_space(&mut self) {
        if self.ends_with(' ') {
            self.pop();
        }
    }
}

/// The seen set's size, for a test that it stays bounded.
#[cfg(test)]
impl Attention {
    fn remembered(&self) -> usize {
        self.sent.map.len() + self.runs.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::registry::EMERGENCY_STOP;
    use kd_proto::types::{Message, RunInfo};

    fn run(id: &str, exchange: u64) -> ThreadEvent {
        ThreadEvent::RunWaiting {
            run: RunInfo {
                reply_to: Some(exchange),
                round: Some(1),
                exchange: Some(exchange),
                ..RunInfo::new(id, "t", "claude")
            },
        }
    }

    fn error(run: &str, member: &str, timed_out: bool) -> ThreadEvent {
        ThreadEvent::RunError { run: run.into(), member: member.into(), error: "boom\x1b[2J".into(), timed_out, seq: 3 }
    }

    fn see(a: &mut Attention, e: ThreadEvent) -> Next {
        match glance(&e) {
            Some(s) => a.see("t", s),
            None => Next::Nothing,
        }
    }

    fn kind(n: &Next) -> Option<NotifyKind> {
        match n {
            Next::Send(d) => Some(d.kind),
            _ => None,
        }
    }

    #[test]
    fn failures_are_told_once_per_exchange_and_kind() {
        let mut a = Attention::default();
        assert_eq!(see(&mut a, run("r1", 1)), Next::Nothing);
        assert_eq!(see(&mut a, run("r2", 1)), Next::Nothing);
        assert_eq!(see(&mut a, run("r3", 5)), Next::Nothing);
        let first = see(&mut a, error("r1", "claude", false));
        let Next::Send(d) = &first else { panic!("{first:?}") };
        assert_eq!((d.kind, d.exchange, d.title.as_str()), (NotifyKind::Failed, Some(1), "claude failed"));
        assert_eq!(d.text, "boom [2J", "escapes are not passed on");
        assert_eq!(see(&mut a, error("r2", "codex", false)), Next::Nothing, "the same exchange and kind");
        assert_eq!(kind(&see(&mut a, error("r2", "codex", true))), Some(NotifyKind::Timeout));
        assert_eq!(kind(&see(&mut a, error("r3", "codex", false))), Some(NotifyKind::Failed), "another exchange");
        assert_eq!(kind(&see(&mut a, error("unknown", "codex", false))), Some(NotifyKind::Failed));
        assert_eq!(see(&mut a, error("unknown", "codex", false)), Next::Nothing);
    }

    #[test]
    fn an_exchange_done_is_told_once_and_a_stopped_one_never() {
        let mut a = Attention::default();
        let round = |state, round| ThreadEvent::Round {
            exchange: 4,
            round,
            rounds: 2,
            state,
            expected: vec!["claude".into(), "codex".into()],
        };
        assert_eq!(see(&mut a, round(RoundState::Running, 1)), Next::Nothing);
        assert_eq!(see(&mut a, round(RoundState::Stopped, 2)), Next::Nothing);
        let done = see(&mut a, round(RoundState::Done, 2));
        let Next::Send(d) = &done else { panic!("{done:?}") };
        assert_eq!((d.kind, d.exchange), (NotifyKind::Done, Some(4)));
        assert!(d.text.contains("claude, codex"), "{}", d.text);
        assert_eq!(see(&mut a, round(RoundState::Done, 2)), Next::Nothing);
        // On a thread with members' work, it is the work that is done.
        let mut m = Message::new("t", 9, KD, "x");
        m.kind = MessageKind::System;
        assert!(glance(&ThreadEvent::Message { message: Box::new(m) }).is_none());
        a.see("w", Seen::Work { task: "fix the\nbug".into() });
        let Next::Send(d) = a.see("w", Seen::Done { exchange: 4, expected: vec![] }) else { panic!() };
        assert_eq!((d.kind, d.text.as_str()), (NotifyKind::Work, "Task: fix the\nbug"));
    }

    #[test]
    fn an_exchange_whose_last_run_the_king_cancelled_is_not_told() {
        let mut a = Attention::default();
        let waiting = |run: &str| Seen::Run { run: run.into(), exchange: Some(4) };
        let ended = |run: &str, cancelled| Seen::Ended { run: run.into(), cancelled };
        let done = || Seen::Done { exchange: 4, expected: vec![] };
        a.see("t", waiting("r1"));
        a.see("t", waiting("r2"));
        // claude answered, codex was cancelled last: stopped by the King.
        a.see("t", ended("r1", false));
        a.see("t", ended("r2", true));
        assert_eq!(a.see("t", done()), Next::Nothing);
        // codex cancelled, then claude answered: the King may be away.
        a.see("u", waiting("r1"));
        a.see("u", waiting("r2"));
        a.see("u", ended("r2", true));
        a.see("u", ended("r1", false));
        assert_eq!(kind(&a.see("u", done())), Some(NotifyKind::Done));
        // A run cut by kdd stopping is not the King's cancel.
        let cut =
            ThreadEvent::RunCancelled { run: "r".into(), member: "m".into(), seq: 1, interrupted: true, reason: None };
        assert!(glance(&cut).is_none());
        let cancelled =
            ThreadEvent::RunCancelled { run: "r".into(), member: "m".into(), seq: 1, interrupted: false, reason: None };
        assert_eq!(glance(&cancelled), Some(Seen::Ended { run: "r".into(), cancelled: true }));
        // Nor is a member's emergency broadcast that stopped it.
        let stopped = ThreadEvent::RunCancelled {
            run: "r".into(),
            member: "m".into(),
            seq: 1,
            interrupted: false,
            reason: Some(EMERGENCY_STOP.into()),
        };
        assert_eq!(glance(&stopped), Some(Seen::Ended { run: "r".into(), cancelled: false }));
    }

    #[test]
    fn a_budget_stop_is_read_from_kds_notice() {
        let mut a = Attention::default();
        let mut m = Message::new("t", 9, KD, &format!("{BUDGET_NOTICE} $0.5000, which reaches"));
        m.kind = MessageKind::System;
        m.reply_to = Some(7);
        let e = ThreadEvent::Message { message: Box::new(m) };
        let Next::Send(d) = see(&mut a, e.clone()) else { panic!() };
        assert_eq!((d.kind, d.exchange), (NotifyKind::Budget, Some(7)));
        assert_eq!(see(&mut a, e), Next::Nothing);
    }

    #[test]
    fn an_emergency_is_told_only_if_still_unacknowledged_when_due() {
        let mut a = Attention::default();
        let e = |pending: Vec<&str>| ThreadEvent::Emergency {
            broadcast: "b1".into(),
            seq: 2,
            from: "claude".into(),
            pending: pending.into_iter().map(String::from).collect(),
        };
        assert_eq!(see(&mut a, e(vec!["codex", "gemini"])), Next::Arm { broadcast: "b1".into() });
        assert_eq!(see(&mut a, e(vec!["gemini"])), Next::Nothing, "armed once");
        let (thread, d) = a.due("b1").unwrap();
        assert_eq!(
            (thread.as_str(), d.kind, d.text.as_str()),
            ("t", NotifyKind::Emergency, "Not acknowledged by: gemini.")
        );
        assert!(a.due("b1").is_none());
        assert_eq!(see(&mut a, e(vec!["codex"])), Next::Arm { broadcast: "b1".into() });
        assert_eq!(see(&mut a, e(vec![])), Next::Nothing);
        assert!(a.due("b1").is_none(), "acknowledged by all in time");
    }

    fn approval(id: &str, run: &str, state: ApprovalState) -> ThreadEvent {
        use kd_proto::approval::{Approval, ApprovalTool, Scope, ToolKind};
        ThreadEvent::ApprovalRequested {
            approval: Box::new(Approval {
                id: id.into(),
                thread: "t".into(),
                member: "claude".into(),
                run: Some(run.into()),
                tool: ApprovalTool {
                    kind: ToolKind::Execute,
                    name: Some("Bash".into()),
                    title: "npm test\u{1b}]0;x\u{7}".into(),
                    command: Some("npm test".into()),
                    paths: vec![],
                    input: serde_json::json!({"command": "npm test"}),
                    reason: None,
                },
                scopes: vec![Scope::Once],
                state,
                decided_by: None,
                scope: None,
                message: None,
                requested_at_ms: 0,
                decided_at_ms: None,
                expires_at_ms: None,
            }),
        }
    }

    #[test]
    fn a_waiting_approval_is_told_once_per_exchange() {
        let mut a = Attention::default();
        see(&mut a, run("r1", 3));
        let Next::Send(d) = see(&mut a, approval("ap-1", "r1", ApprovalState::Pending)) else { panic!() };
        assert_eq!((d.kind, d.exchange, d.approval.as_deref()), (NotifyKind::Approval, Some(3), Some("ap-1")));
        assert_eq!(d.title, "claude asks: npm test ]0;x");
        assert!(d.text.contains("kd approve ap-1"), "{}", d.text);
        assert_eq!(see(&mut a, approval("ap-2", "r1", ApprovalState::Pending)), Next::Nothing);
        assert_eq!(see(&mut a, approval("ap-3", "r9", ApprovalState::Approved)), Next::Nothing, "decided already");
        assert_eq!(kind(&see(&mut a, approval("ap-4", "r9", ApprovalState::Pending))), Some(NotifyKind::Approval));
    }

    #[test]
    fn what_it_remembers_is_bounded() {
        let mut a = Attention::default();
        for i in 0..(3 * REMEMBERED as u64) {
            see(&mut a, run(&format!("r{i}"), i));
            see(&mut a, error(&format!("r{i}"), "claude", false));
        }
        assert!(a.remembered() <= 2 * REMEMBERED);
    }

    #[test]
    fn clip_makes_one_bounded_line() {
        assert_eq!(clip("  a\n\tb\x07c  ", 10), "a b c");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("ab cdef", 3), "ab…");
        assert_eq!(clip("", 3), "");
    }
}
