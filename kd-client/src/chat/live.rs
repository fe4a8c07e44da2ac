//! How the thread's live events change the log: a message, a run waiting,
//! streaming, finishing; the rounds of an exchange, with a waiting panel
//! for whoever speaks next; and this chat's own send coming back. Every
//! entry is kept in its place in the thread (`kd_proto::order`), so the
//! live log is the log a reopened chat shows.

use kd_proto::order::{Place, run_place};
use kd_proto::types::{Message, MessageKind, RoundState, RunStatus, Sent, ThreadEvent};

use super::app::{App, Entry, Kind, Round};

impl App {
    /// Members currently writing.
    pub fn streaming(&self) -> Vec<&str> {
        self.entries.iter().filter(|e| e.kind == Kind::Streaming).map(|e| e.member.as_str()).collect()
    }

    pub(super) fn index_of_run(&self, run: &str) -> Option<usize> {
        self.entries
            .iter()
            .rposition(|e| e.run.as_deref() == Some(run) && matches!(e.kind, Kind::Streaming | Kind::Waiting))
    }

    pub(super) fn index_of_seq(&self, seq: u64) -> Option<usize> {
        self.entries.iter().rposition(|e| e.seq == Some(seq))
    }

    pub(super) fn placeholder_for(&self, member: &str) -> Option<usize> {
        self.entries.iter().rposition(|e| e.kind == Kind::Waiting && e.run.is_none() && e.member == member)
    }

    /// Content changed: follow it if at the bottom, else say so.
    pub(super) fn grew(&mut self) {
        self.dirty = true;
        if self.scroll > 0 {
            self.new_below = true;
        }
    }

    pub(super) fn push(&mut self, e: Entry) {
        self.entries.push(e);
        self.sort();
        self.grew();
    }

    /// Puts every entry in its place (a stable sort: equal places keep
    /// their order).
    pub(super) fn sort(&mut self) {
        if !self.entries.is_sorted_by_key(|e| e.place) {
            self.entries.sort_by_key(|e| e.place);
        }
    }

    /// The place of a member expected to answer whose run has not started:
    /// after what the thread holds, `nth` among those waiting.
    pub(super) fn waiting_place(&self, nth: u64) -> Place {
        let last = self.entries.iter().filter_map(|e| e.seq).max().unwrap_or(0);
        Place { anchor: last, class: 2, ordinal: nth, seq: u64::MAX }
    }

    /// Applies an event from the thread's subscription.
    pub fn apply(&mut self, event: &ThreadEvent) {
        self.own_completion_runs(event);
        self.attention.see(event);
        self.apply_event(event);
        // A new panel of a member may now carry its work, and show an
        // approval its run asked.
        self.place_work();
        self.place_approvals();
    }

    fn apply_event(&mut self, event: &ThreadEvent) {
        match event {
            ThreadEvent::Message { message } => self.on_message(message),
            ThreadEvent::RunWaiting { run } => {
                let queued = run.status == RunStatus::Queued;
                if let Some(i) = self.index_of_run(&run.id) {
                    // Its deltas came first, or it left the queue; now its
                    // place is known.
                    self.entries[i].purpose = run.purpose;
                    self.entries[i].queued = queued;
                    self.entries[i].changed();
                    if run.replaces.is_none() {
                        self.entries[i].place = run_place(run);
                        self.sort();
                    }
                    return;
                }
                let at =
                    run.replaces.and_then(|seq| self.index_of_seq(seq)).or_else(|| self.placeholder_for(&run.member));
                match at {
                    Some(i) => {
                        let e = &mut self.entries[i];
                        e.kind = Kind::Waiting;
                        e.queued = queued;
                        e.run = Some(run.id.clone());
                        e.round = run.round;
                        e.purpose = run.purpose;
                        e.text.clear();
                        e.chars = 0;
                        e.approvals.clear();
                        // A retry stands where the failure stood.
                        if run.replaces.is_none() {
                            e.place = run_place(run);
                        }
                        e.changed();
                        self.sort();
                        self.dirty = true;
                    }
                    None => {
                        let mut e = Entry::new(Kind::Waiting, &run.member, String::new());
                        e.queued = queued;
                        e.run = Some(run.id.clone());
                        e.round = run.round;
                        e.purpose = run.purpose;
                        e.place = run_place(run);
                        self.push(e);
                    }
                }
            }
            ThreadEvent::RunStarted { run, .. } => {
                if let Some(i) = self.index_of_run(run).filter(|i| self.entries[*i].queued) {
                    self.entries[i].queued = false;
                    self.entries[i].changed();
                    self.dirty = true;
                }
            }
            ThreadEvent::Work { worktree } => self.on_work(worktree),
            ThreadEvent::ApprovalRequested { approval } | ThreadEvent::ApprovalDecided { approval } => {
                self.on_approval(approval)
            }
            ThreadEvent::Status { status, .. } => {
                self.thread.status = *status;
                if *status == kd_proto::types::ThreadStatus::Archived {
                    self.notice =
                        Some(format!("this thread is archived: `kd unarchive {}` opens it again", self.thread.id));
                }
                self.dirty = true;
            }
            ThreadEvent::Emergency { from, pending, .. } => {
                self.emergency = (!pending.is_empty()).then(|| (from.clone(), pending.clone()));
                self.dirty = true;
            }
            ThreadEvent::Delta { run, member, text, chars } => {
                let i = match self.index_of_run(run) {
                    Some(i) => i,
                    None => {
                        let mut e = Entry::new(Kind::Streaming, member, String::new());
                        e.run = Some(run.clone());
                        e.place = self.waiting_place(u64::MAX);
                        self.push(e);
                        self.index_of_run(run).unwrap_or(self.entries.len() - 1)
                    }
                };
                let e = &mut self.entries[i];
                e.kind = Kind::Streaming;
                e.queued = false;
                e.text.push_str(text);
                e.chars = *chars;
                e.changed();
                self.grew();
            }
            ThreadEvent::Activity { run, what, .. } => {
                if let Some(i) = self.index_of_run(run) {
                    self.entries[i].activity = Some(what.clone());
                    self.entries[i].changed();
                    self.dirty = true;
                }
            }
            ThreadEvent::RunFinished { run, .. }
            | ThreadEvent::RunError { run, .. }
            | ThreadEvent::RunCancelled { run, .. } => {
                self.my_runs.remove(run);
            }
            ThreadEvent::Round { exchange, round, rounds, state, expected } => {
                let running = *state == RoundState::Running;
                self.round = Some(Round {
                    exchange: *exchange,
                    round: *round,
                    rounds: *rounds,
                    running,
                    expected: expected.clone(),
                });
                if running && *round > 1 {
                    // Sequential turns: show who speaks next.
                    self.expect_next(None);
                }
                if !running {
                    // The exchange is over: nobody else is coming.
                    self.entries.retain(|e| !(e.kind == Kind::Waiting && e.run.is_none()));
                }
                self.dirty = true;
            }
            ThreadEvent::Lagged { .. } => {
                self.notice = Some("some live output was skipped (the view fell behind)".into());
                self.dirty = true;
            }
            // `kd ask`'s alone (council.ask), never a chat's subscription.
            ThreadEvent::Asked { .. } => {}
        }
    }

    fn on_message(&mut self, m: &Message) {
        if self.index_of_seq(m.seq).is_some() {
            return;
        }
        if let Some(run) = m.run.as_ref().filter(|r| r.run_id.is_some()) {
            self.cost_usd += run.cost_usd.unwrap_or(0.0);
        }
        let run = m.run.as_ref().and_then(|r| r.run_id.clone());
        let at = run
            .as_deref()
            .and_then(|r| self.index_of_run(r))
            .or_else(|| m.replaces.and_then(|r| self.index_of_seq(r)))
            .or_else(|| if m.from == "king" { None } else { self.placeholder_for(&m.from) });
        let mut entry = Entry::from_message(m);
        match at {
            Some(i) => {
                if m.replaces.is_some() {
                    entry.place = self.entries[i].place;
                }
                // What its run asked stays in the panel, decided.
                entry.approvals = std::mem::take(&mut self.entries[i].approvals);
                self.entries[i] = entry;
                self.sort();
                self.dirty = true;
            }
            None => self.push(entry),
        }
        // In a sequential round the next member's turn comes now.
        if m.kind != MessageKind::King
            && m.round.is_some()
            && self.round.as_ref().is_some_and(|r| r.running && r.round > 1)
        {
            self.expect_next(Some(&m.from));
        }
    }

    /// Adds a waiting panel for the member after `after` in this round's
    /// order (the first one when `after` is None), unless it already has one.
    fn expect_next(&mut self, after: Option<&str>) {
        let Some(round) = &self.round else { return };
        let next = match after {
            None => round.expected.first(),
            Some(a) => round.expected.iter().skip_while(|m| m.as_str() != a).nth(1),
        };
        let Some(next) = next.cloned() else { return };
        let busy = self.entries.iter().any(|e| e.member == next && matches!(e.kind, Kind::Waiting | Kind::Streaming));
        if !busy {
            let mut e = Entry::new(Kind::Waiting, &next, String::new());
            e.place = self.waiting_place(0);
            self.push(e);
        }
    }

    /// Our own send came back: waiting panels for those who will answer.
    pub fn on_sent(&mut self, sent: &Sent) {
        for r in &sent.runs {
            self.my_runs.insert(r.run.id.clone());
        }
        self.on_message(&sent.message);
        let starting: Vec<String> = if sent.mode == kd_proto::types::Mode::Broadcast {
            sent.members.clone()
        } else {
            sent.members.iter().take(1).cloned().collect()
        };
        for (nth, member) in starting.into_iter().enumerate() {
            let started = sent.runs.iter().find(|r| r.run.member == member);
            // A fast run may have answered (or failed) before this reply came.
            let seen =
                started.is_some_and(|r| self.entries.iter().any(|e| e.run.as_deref() == Some(r.run.id.as_str())));
            let known = seen
                || self.entries.iter().any(|e| {
                    e.member == member
                        && matches!(e.kind, Kind::Waiting | Kind::Streaming)
                        && (started.is_none() || e.run == started.map(|r| r.run.id.clone()))
                });
            if !known {
                let mut e = Entry::new(Kind::Waiting, &member, String::new());
                e.run = started.map(|r| r.run.id.clone());
                e.queued = started.is_some_and(|r| r.run.status == RunStatus::Queued);
                e.place = match started {
                    Some(r) => run_place(&r.run),
                    None => self.waiting_place(nth as u64),
                };
                self.push(e);
            }
        }
        if let Some(notice) = &sent.notice {
            self.notice = Some(notice.clone());
        }
        self.place_work();
    }
}
