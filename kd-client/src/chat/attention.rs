//! The chat calls the King (issue 33): when an exchange ends, a member's
//! run fails or times out, or a member's CLI asks an approval, the
//! terminal's bell rings and its title says what needs them, at most once
//! per exchange and kind (an approval: once each). Any key the King presses
//! puts the title back.

use std::collections::{BTreeMap, BTreeSet};

use kd_proto::approval::ApprovalState;
use kd_proto::types::{RoundState, ThreadEvent};

/// Runs and rings remembered (the oldest forgotten first).
const REMEMBERED: usize = 1024;

#[derive(Debug, Default)]
pub struct Attention {
    /// Each run's exchange.
    runs: BTreeMap<String, Option<u64>>,
    /// What rang: (kind, exchange or approval).
    rung: BTreeSet<(&'static str, String)>,
    /// What to say at the next ring, taken by the chat's loop.
    due: Option<String>,
    /// The title says something needs the King.
    pub flagged: bool,
}

impl Attention {
    pub fn see(&mut self, event: &ThreadEvent) {
        let (kind, key, what) = match event {
            ThreadEvent::RunWaiting { run } => {
                if self.runs.len() >= REMEMBERED {
                    self.runs.pop_first();
                }
                self.runs.insert(run.id.clone(), run.exchange);
                return;
            }
            ThreadEvent::Round { exchange, state: RoundState::Done, .. } => {
                ("done", exchange.to_string(), "the council answered".to_string())
            }
            ThreadEvent::RunError { run, member, timed_out, .. } => {
                let key = match self.runs.get(run) {
                    Some(Some(x)) => x.to_string(),
                    _ => run.clone(),
                };
                let (kind, what) = if *timed_out { ("timeout", "timed out") } else { ("failed", "failed") };
                (kind, key, format!("{member} {what}"))
            }
            ThreadEvent::ApprovalRequested { approval } if approval.state == ApprovalState::Pending => {
                ("approval", approval.id.clone(), format!("{} asks: {}", approval.member, approval.tool.title))
            }
            _ => return,
        };
        if self.rung.len() >= REMEMBERED {
            self.rung.pop_first();
        }
        if self.rung.insert((kind, key)) {
            self.due = Some(what);
        }
    }

    /// What to ring for, once.
    pub fn take(&mut self) -> Option<String> {
        let due = self.due.take();
        if due.is_some() {
            self.flagged = true;
        }
        due
    }
}

/// The terminal's title: `kd: WHAT — THREAD` (control characters dropped,
/// bounded), or `kd chat — THREAD`.
pub fn title(what: Option<&str>, thread: &str) -> String {
    let clean = |s: &str, max: usize| -> String {
        let one: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        one.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(max).collect()
    };
    match what {
        Some(w) => format!("kd: {} — {}", clean(w, 80), clean(thread, 60)),
        None => format!("kd chat — {}", clean(thread, 60)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::types::RunInfo;

    fn waiting(id: &str, exchange: u64) -> ThreadEvent {
        ThreadEvent::RunWaiting {
            run: RunInfo {
                reply_to: Some(exchange),
                round: Some(1),
                exchange: Some(exchange),
                ..RunInfo::new(id, "t", "codex")
            },
        }
    }

    fn failed(run: &str, member: &str) -> ThreadEvent {
        ThreadEvent::RunError { run: run.into(), member: member.into(), error: "x".into(), timed_out: false, seq: 2 }
    }

    fn done(exchange: u64, state: RoundState) -> ThreadEvent {
        ThreadEvent::Round { exchange, round: 1, rounds: 1, state, expected: vec![] }
    }

    #[test]
    fn it_rings_once_per_exchange_and_kind() {
        let mut a = Attention::default();
        a.see(&waiting("r1", 1));
        a.see(&waiting("r2", 1));
        assert_eq!(a.take(), None);
        assert!(!a.flagged);
        a.see(&failed("r1", "codex"));
        assert_eq!(a.take().as_deref(), Some("codex failed"));
        assert!(a.flagged);
        a.see(&failed("r2", "gemini"));
        assert_eq!(a.take(), None, "the same exchange failed already");
        a.see(&done(1, RoundState::Running));
        a.see(&done(1, RoundState::Stopped));
        assert_eq!(a.take(), None, "a running or stopped exchange does not ring");
        a.see(&done(1, RoundState::Done));
        assert_eq!(a.take().as_deref(), Some("the council answered"));
        a.see(&done(1, RoundState::Done));
        assert_eq!(a.take(), None);
        a.see(&done(2, RoundState::Done));
        assert_eq!(a.take().as_deref(), Some("the council answered"));
    }

    #[test]
    fn the_title_is_one_clean_line() {
        assert_eq!(
            title(Some("codex\x1b]0;owned\x07 failed"), "Release\nplan"),
            "kd: codex ]0;owned failed — Release plan"
        );
        assert_eq!(title(None, "t-1"), "kd chat — t-1");
    }
}
