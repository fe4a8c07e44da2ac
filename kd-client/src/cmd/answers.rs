//! How answers reach a terminal (`kd ask`, `kd watch`): one member at a
//! time, so they never interleave. The first member to say something
//! streams live; the others are kept and shown, whole, as soon as the live
//! one is done, after which the next one streams live. Labels are in the
//! member's colour on a terminal, plain when piped. `kd ask` follows the
//! runs of its own exchange until it ends; `kd watch` follows every run of
//! the thread, and the King's messages, until it is stopped.
//!
//! Across a restart of `kdd` (issue 24) the view is fed again from the
//! last message it saw: a run's message ends the run (the backlog carries
//! no run events), a snapshot delta re-sends what streamed already (only
//! what is new past the daemon's `chars` counter is shown), and a run cut
//! by the restart and asked again (`replaces` its message) is no failure.
//!
//! The view writes; its caller flushes, when the next event is not there
//! yet ([`super::burst`]), and before anything is said on stderr.

use std::io::Write;

use kd_client::style::{Palette, bold, dim, paint};
use kd_client::terminal::safe;
use kd_proto::names::KD;
use kd_proto::types::{Message, MessageKind, Purpose, RoundState, Sent, ThreadEvent};

mod run;

use run::{RunView, Status};

/// What the terminal shows: one exchange's runs, round after round,
/// until the exchange ends; or (watching) everything said on the thread.
pub struct View {
    runs: Vec<RunView>,
    /// The King message's seq, which names the exchange; `None` when
    /// watching the whole thread.
    exchange: Option<u64>,
    rounds: u32,
    exchange_over: bool,
    /// Over, as `exchange.get` said after a reconnect, once the backlog up
    /// to this message is shown.
    ends_at: Option<u64>,
    /// Since a gap in what the view heard — kdd went away and it
    /// reconnected, or it fell behind (`lagged`) — answers of runs this
    /// view never saw start (they ran meanwhile) are shown from their
    /// messages.
    after_gap: bool,
    live: Option<usize>,
    color: bool,
    /// The members' colours.
    pub palette: Palette,
    json: bool,
    /// Whether the output is at the start of a line.
    at_line_start: bool,
    /// Whether a header was printed yet (the next one is set apart by a blank line).
    printed: bool,
    /// Whether the King's messages are shown (watching; not when following
    /// one's own completion).
    show_king: bool,
    /// The highest message seq seen.
    last_seq: u64,
    /// What kd said about the exchange (a budget stop, the hop limit), to
    /// show when no answer is streaming.
    notes: Vec<String>,
    /// The seqs of the exchange's answers (kd's word on one is about it).
    answers: std::collections::HashSet<u64>,
    /// A run its message ended whose end is not shown yet: the run's own
    /// end event, when it follows, says how it ended exactly.
    unclosed: Option<String>,
    /// Runs cut short whose partial answer was shown and forgotten
    /// (watching), by their message: a run asked again in their place says so.
    cut: std::collections::HashMap<u64, String>,
    /// Messages a run asked again replaces before the view heard of them
    /// (the cut one's message comes later, relayed from another node).
    replaced_early: std::collections::HashSet<u64>,
}

impl View {
    pub fn new(sent: &Sent, color: bool, json: bool) -> View {
        let runs = sent
            .runs
            .iter()
            .map(|r| RunView::new(r.run.id.clone(), r.run.member.clone(), r.run.round, r.run.purpose))
            .collect();
        View {
            runs,
            exchange: Some(sent.message.seq),
            rounds: sent.rounds,
            exchange_over: false,
            ends_at: None,
            after_gap: false,
            live: None,
            color,
            palette: Palette::new(&sent.members, vec![]),
            json,
            at_line_start: true,
            printed: false,
            show_king: false,
            last_seq: 0,
            notes: Vec::new(),
            answers: Default::default(),
            unclosed: None,
            cut: Default::default(),
            replaced_early: Default::default(),
        }
    }

    /// A view of everything the members say on a thread from now on, with
    /// the tallies and merges of completions, but not the King's messages:
    /// `kd ask --vote` follows its own completion so.
    pub fn following(color: bool, palette: Palette) -> View {
        View { show_king: false, ..View::watching(color, palette) }
    }

    /// Whether every message up to `seq` has been seen and shown, and no
    /// run is still going.
    pub fn settled(&self, seq: u64) -> bool {
        self.last_seq >= seq && self.live.is_none() && self.runs.iter().all(|r| r.shown && r.status != Status::Running)
    }

    /// A view of everything said on a thread from now on.
    pub fn watching(color: bool, palette: Palette) -> View {
        View {
            runs: Vec::new(),
            exchange: None,
            rounds: 1,
            exchange_over: false,
            ends_at: None,
            after_gap: false,
            live: None,
            color,
            palette,
            json: false,
            at_line_start: true,
            printed: false,
            show_king: true,
            last_seq: 0,
            notes: Vec::new(),
            answers: Default::default(),
            unclosed: None,
            cut: Default::default(),
            replaced_early: Default::default(),
        }
    }

    fn ours(&self, exchange: Option<u64>) -> bool {
        self.exchange.is_none() || exchange == self.exchange
    }

    /// Whether a message is kd's word on this exchange (or, watching, on
    /// the thread): a notice, not a completion's tally or merge.
    fn is_note(&self, m: &Message) -> bool {
        let about_ours = match self.exchange {
            None => true,
            Some(x) => m.reply_to.is_some_and(|r| r == x || self.answers.contains(&r)),
        };
        m.kind == MessageKind::System && m.from == KD && m.purpose.is_none() && about_ours
    }

    /// The view came back after kdd went away.
    pub fn reconnected(&mut self) {
        self.after_gap = true;
    }

    /// The exchange is over, as `exchange.get` said after a reconnect, its
    /// last message `seq`: done once the backlog up to it is shown.
    pub fn exchange_ends_at(&mut self, seq: u64) {
        self.ends_at = Some(seq);
    }

    /// An answer of a run of this exchange (or, watching, of the thread)
    /// the view never saw start: it ran while kdd was out of reach or the
    /// view behind, or (watching) it began and ended as the view
    /// subscribed — kdd sends no run's events after its message.
    fn adopt(&mut self, m: &Message) -> Option<RunView> {
        // A member's answer given up after its cuts is an error no run
        // wrote, in the place of the cut answer.
        let given_up = || (m.kind == MessageKind::Error && m.replaces.is_some()).then(|| format!("message {}", m.seq));
        let run = m.run.as_ref().and_then(|r| r.run_id.clone()).or_else(given_up)?;
        // Following one exchange, an answer of a run never seen is another
        // exchange's but after a gap (a message does not say its exchange).
        if (self.exchange.is_some() && !self.after_gap) || m.from == kd_proto::names::KING {
            return None;
        }
        // Following one exchange: an answer from its question on.
        if let Some(x) = self.exchange
            && m.reply_to.is_none_or(|r| r < x)
        {
            return None;
        }
        let status = match m.kind {
            MessageKind::Agent => Status::Done,
            MessageKind::Interrupted => Status::Interrupted,
            MessageKind::Error => Status::Failed(failure(&m.from, &m.body)),
            _ => return None,
        };
        let mut view = RunView::new(run, m.from.clone(), m.round, m.purpose);
        match m.replaces {
            Some(cut) => view.after_cut = self.replace(cut),
            None => self.lost(&view),
        }
        view.body = Some(m.body.clone());
        view.seq = Some(m.seq);
        view.status = status;
        self.answers.insert(m.seq);
        Some(view)
    }

    /// Shows what is left to show (the end of a run its message ended);
    /// a run that never said a word is interrupted.
    pub fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.after_gap {
            for r in self.runs.iter_mut().filter(|r| r.status == Status::Running && r.seq.is_none()) {
                if r.streamed.is_empty() {
                    r.status = Status::Interrupted;
                    r.shown = true;
                }
            }
        }
        self.close_unclosed(None, out)
    }

    pub fn all_done(&self) -> bool {
        let over = self.exchange_over || self.ends_at.is_some_and(|seq| self.last_seq >= seq);
        // After a reconnect, a run with no word of its own once the exchange
        // is over never had one: kdd stopped before it was recorded.
        let silent = |r: &RunView| self.after_gap && over && r.seq.is_none() && r.streamed.is_empty();
        // A run its message ended but no later event has shown yet is shown
        // by `finish` (no event may follow it: the exchange is over), and
        // with it every other ended run still waiting behind it.
        let shown = |r: &RunView| self.json || r.shown || self.unclosed.is_some();
        over && self.runs.iter().all(|r| silent(r) || (r.status != Status::Running && shown(r)))
    }

    pub fn pending(&self) -> Vec<String> {
        self.runs.iter().filter(|r| r.status == Status::Running).map(|r| r.id.clone()).collect()
    }

    /// One line per member that did not answer (its first failure's
    /// reason), in the order the members first appeared.
    pub fn failures(&self) -> Vec<String> {
        let mut seen: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for r in self.runs.iter().filter(|r| !r.replaced) {
            let line = match &r.status {
                Status::Failed(why) => why.clone(),
                Status::Cancelled(None) => format!("{}: cancelled", r.member),
                Status::Cancelled(Some(why)) => format!("{}: {}", r.member, safe(why)),
                Status::Interrupted => format!("{}: interrupted (kdd stopped)", r.member),
                _ => continue,
            };
            if !seen.contains(&r.member.as_str()) {
                seen.push(&r.member);
                out.push(line);
            }
        }
        out
    }

    fn index(&self, run: &str) -> Option<usize> {
        self.runs.iter().position(|r| r.id == run)
    }

    /// Whether `run` is one the view follows.
    pub fn owns(&self, run: &str) -> bool {
        self.index(run).is_some()
    }

    /// Ends the line an answer streams on, so that what is said beside
    /// the answers (on stderr, to the same terminal) starts a line.
    pub fn break_line(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if !self.at_line_start {
            writeln!(out)?;
            self.at_line_start = true;
        }
        out.flush()
    }

    pub fn on_event(&mut self, e: &ThreadEvent, out: &mut impl Write) -> std::io::Result<()> {
        if self.json {
            let ours = match e {
                ThreadEvent::Delta { run, .. }
                | ThreadEvent::Activity { run, .. }
                | ThreadEvent::RunStarted { run, .. }
                | ThreadEvent::RunFinished { run, .. }
                | ThreadEvent::RunError { run, .. }
                | ThreadEvent::RunCancelled { run, .. } => self.index(run).is_some(),
                ThreadEvent::RunWaiting { run } => self.index(&run.id).is_some() || self.ours(run.exchange),
                ThreadEvent::ApprovalRequested { approval } | ThreadEvent::ApprovalDecided { approval } => {
                    approval.run.as_deref().is_some_and(|id| self.index(id).is_some())
                }
                ThreadEvent::Round { exchange, .. } => self.ours(Some(*exchange)),
                ThreadEvent::Message { message } => {
                    message.run.as_ref().and_then(|m| m.run_id.as_deref()).is_some_and(|id| self.index(id).is_some())
                        || self.is_note(message)
                }
                ThreadEvent::Lagged { .. }
                | ThreadEvent::Emergency { .. }
                | ThreadEvent::Status { .. }
                | ThreadEvent::Work { .. } => true,
                // `kd ask` takes it before the view.
                ThreadEvent::Asked { .. } => false,
            };
            if ours {
                writeln!(out, "{}", serde_json::to_string(e).unwrap_or_default())?;
            }
        }
        let ends = match e {
            ThreadEvent::RunFinished { run, .. }
            | ThreadEvent::RunError { run, .. }
            | ThreadEvent::RunCancelled { run, .. } => Some(run.as_str()),
            _ => None,
        };
        self.close_unclosed(ends, out)?;
        match e {
            ThreadEvent::RunWaiting { run } if self.ours(run.exchange) && self.index(&run.id).is_none() => {
                let mut view = RunView::new(run.id.clone(), run.member.clone(), run.round, run.purpose);
                match run.replaces {
                    Some(cut) => view.after_cut = self.replace(cut),
                    None => self.lost(&view),
                }
                self.runs.push(view);
            }
            ThreadEvent::Round { exchange, state, rounds, .. } if self.ours(Some(*exchange)) => {
                if self.exchange.is_none() {
                    self.rounds = *rounds;
                } else {
                    // Running again after a reconnect: the daemon goes on with it.
                    self.exchange_over = *state != RoundState::Running;
                }
            }
            ThreadEvent::Delta { run, text, chars, .. } => {
                let Some(i) = self.index(run) else { return Ok(()) };
                // Its message is in (a subscription that began as the run
                // ended brings it from the registry before the deltas it
                // hears live): the answer is shown from it, once.
                if self.runs[i].seq.is_some() {
                    return Ok(());
                }
                let Some(text) = self.runs[i].new_text(text, *chars) else { return Ok(()) };
                let text = &text;
                self.runs[i].streamed.push_str(text);
                if self.json {
                    return Ok(());
                }
                match self.live {
                    None => {
                        self.live = Some(i);
                        self.header(i, out)?;
                        self.runs[i].shown = true;
                        self.emit(out, text)?;
                    }
                    Some(l) if l == i => self.emit(out, text)?,
                    Some(_) => {}
                }
            }
            ThreadEvent::Message { message } => {
                self.last_seq = self.last_seq.max(message.seq);
                let shown_whole = match message.purpose {
                    Some(Purpose::Tally | Purpose::Merge) => true,
                    _ => self.show_king && message.kind == MessageKind::King,
                };
                if let Some(i) = message.run.as_ref().and_then(|m| m.run_id.as_deref()).and_then(|id| self.index(id)) {
                    self.runs[i].body = Some(message.body.clone());
                    self.runs[i].seq = Some(message.seq);
                    if self.replaced_early.remove(&message.seq) {
                        self.runs[i].replaced = true;
                    }
                    self.answers.insert(message.seq);
                    // After a reconnect the backlog brings the message
                    // alone: it ends the run. Its end event, when it comes
                    // next, says exactly how (see `close_unclosed`).
                    if self.runs[i].status == Status::Running {
                        let r = &mut self.runs[i];
                        r.status = match message.kind {
                            MessageKind::Error => Status::Failed(failure(&r.member, &message.body)),
                            MessageKind::Interrupted => Status::Interrupted,
                            _ => Status::Done,
                        };
                        self.unclosed = Some(r.id.clone());
                    }
                } else if let Some(view) = self.adopt(message) {
                    self.runs.push(view);
                    if !self.json {
                        self.show_waiting(out)?;
                    }
                } else if self.is_note(message) {
                    if !self.json {
                        self.notes.push(message.body.clone());
                        self.show_waiting(out)?;
                    }
                } else if self.exchange.is_none() && shown_whole {
                    // Watching: what the King said, or kd's tally, in its turn.
                    let mut view =
                        RunView::new(format!("message {}", message.seq), message.from.clone(), None, message.purpose);
                    view.body = Some(message.body.clone());
                    view.status = Status::Done;
                    self.runs.push(view);
                    self.show_waiting(out)?;
                }
            }
            ThreadEvent::RunFinished { run, .. } => self.end(run, Status::Done, out)?,
            // Events were missed: the messages come again from the
            // registry, the runs' own events may not.
            ThreadEvent::Lagged { .. } => self.after_gap = true,
            ThreadEvent::RunError { run, error, .. } => self.end(run, Status::Failed(error.clone()), out)?,
            ThreadEvent::RunCancelled { run, interrupted, reason, .. } => {
                let status = if *interrupted { Status::Interrupted } else { Status::Cancelled(reason.clone()) };
                self.end(run, status, out)?
            }
            _ => {}
        }
        Ok(())
    }

    fn end(&mut self, run: &str, status: Status, out: &mut impl Write) -> std::io::Result<()> {
        let Some(i) = self.index(run) else { return Ok(()) };
        self.runs[i].status = status;
        self.shown_end(i, out)
    }

    /// Shows that run `i` ended: the live answer closed, the next one on.
    fn shown_end(&mut self, i: usize, out: &mut impl Write) -> std::io::Result<()> {
        if self.json {
            return Ok(());
        }
        if self.live == Some(i) {
            self.show_stored(i, out)?;
            self.close(i, out)?;
            self.live = None;
        }
        self.show_waiting(out)
    }

    /// Shows the end of the run its message ended, unless the event at
    /// hand is that run's own end (`ending`), which shows it as it says.
    fn close_unclosed(&mut self, ending: Option<&str>, out: &mut impl Write) -> std::io::Result<()> {
        let Some(run) = self.unclosed.take() else { return Ok(()) };
        if ending == Some(run.as_str()) {
            return Ok(());
        }
        match self.index(&run) {
            Some(i) => self.shown_end(i, out),
            None => Ok(()),
        }
    }

    /// A run asked again in place of the one whose message is `cut`: that
    /// one is no failure, and is not shown when it was not yet. The member
    /// named when its partial answer was shown.
    fn replace(&mut self, cut: u64) -> Option<String> {
        if let Some(member) = self.cut.remove(&cut) {
            return Some(member);
        }
        let Some(r) = self.runs.iter_mut().find(|r| {
            r.seq == Some(cut) && matches!(r.status, Status::Interrupted | Status::Cancelled(_)) && !r.replaced
        }) else {
            self.replaced_early.insert(cut);
            return None;
        };
        r.replaced = true;
        if r.shown {
            Some(r.member.clone())
        } else {
            r.shown = true;
            None
        }
    }

    /// A run of the same turn as `new`, seen since a reconnect, that this
    /// view knew but kdd never started (queued behind another run when kdd
    /// went away, so never recorded): `new` is its member asked again in
    /// its place, no failure of its own.
    fn lost(&mut self, new: &RunView) {
        if !self.after_gap {
            return;
        }
        let same_turn = |r: &RunView| r.member == new.member && r.round == new.round && r.purpose == new.purpose;
        let never_started =
            |r: &RunView| r.status == Status::Running && r.seq.is_none() && r.streamed.is_empty() && !r.replaced;
        if let Some(r) = self.runs.iter_mut().find(|r| same_turn(r) && never_started(r)) {
            r.replaced = true;
            r.shown = true;
            r.status = Status::Interrupted;
        }
    }

    /// Ends a live answer with the answer as stored when it differs from
    /// what streamed (kd removed an echoed label, or the agent's final
    /// answer differs from its partial output): what the user reads last is
    /// what kd keeps.
    fn show_stored(&mut self, i: usize, out: &mut impl Write) -> std::io::Result<()> {
        let r = &self.runs[i];
        let Some(body) = r.body.clone().filter(|b| r.status == Status::Done && b.trim() != r.streamed.trim()) else {
            return Ok(());
        };
        if !self.at_line_start {
            writeln!(out)?;
        }
        let label = format!("── {} · as kd keeps it ", r.member);
        let rule = "─".repeat(40usize.saturating_sub(label.chars().count()));
        writeln!(out, "{}", dim(self.color, &format!("{label}{rule}")))?;
        self.at_line_start = true;
        self.emit(out, &body)
    }

    /// Shows what waited, finished answers whole, then hands the live slot
    /// on to the member who has said the most.
    fn show_waiting(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        while self.live.is_none() {
            let next = (0..self.runs.len())
                .filter(|&j| !self.runs[j].shown)
                .filter(|&j| self.runs[j].status != Status::Running || !self.runs[j].streamed.is_empty())
                .max_by_key(|&j| (self.runs[j].status != Status::Running, self.runs[j].streamed.len()));
            let Some(j) = next else { break };
            self.header(j, out)?;
            self.runs[j].shown = true;
            if self.runs[j].status == Status::Running {
                let text = self.runs[j].streamed.clone();
                self.emit(out, &text)?;
                self.live = Some(j);
            } else {
                if matches!(self.runs[j].status, Status::Done | Status::Interrupted | Status::Cancelled(_)) {
                    // A cut run's message holds what it had said.
                    let text = self.runs[j].body.clone().unwrap_or_else(|| self.runs[j].streamed.clone());
                    self.emit(out, &text)?;
                }
                self.close(j, out)?;
            }
        }
        if self.live.is_none() {
            for note in std::mem::take(&mut self.notes) {
                if !self.at_line_start {
                    writeln!(out)?;
                }
                writeln!(out, "{}", dim(self.color, &format!("kd: {}", safe(note.trim()))))?;
                self.at_line_start = true;
            }
        }
        if self.exchange.is_none() && self.live.is_none() {
            // Watching never ends: forget what is on the screen already
            // (but which cut answers it showed, in case they are asked again).
            for r in self.runs.iter().filter(|r| r.shown && !r.replaced) {
                if let (Some(seq), Status::Interrupted | Status::Cancelled(_)) = (r.seq, &r.status) {
                    self.cut.insert(seq, r.member.clone());
                }
            }
            self.runs.retain(|r| !r.shown || r.status == Status::Running);
        }
        Ok(())
    }

    fn emit(&mut self, out: &mut impl Write, text: &str) -> std::io::Result<()> {
        if !text.is_empty() {
            self.at_line_start = text.ends_with('\n');
            write!(out, "{}", safe(text))?;
        }
        Ok(())
    }

    fn header(&mut self, i: usize, out: &mut impl Write) -> std::io::Result<()> {
        if let Some(member) = self.runs[i].after_cut.take() {
            if !self.at_line_start {
                writeln!(out)?;
            }
            let label = format!("── {member} · interrupted (kdd restarted); asked again ");
            let rule = "─".repeat(40usize.saturating_sub(label.chars().count()).max(2));
            writeln!(out, "{}", dim(self.color, &format!("{label}{rule}")))?;
            self.at_line_start = true;
        }
        let r = &self.runs[i];
        let label = match (r.purpose, r.round) {
            (Some(Purpose::Tally), _) => "── vote ".to_string(),
            (Some(Purpose::Merge), _) => "── merged ".to_string(),
            (Some(p), _) => format!("── {} · {} ", r.member, p.as_str()),
            (None, Some(round)) if self.rounds > 1 || round > 1 => format!("── {} · round {round} ", r.member),
            (None, _) => format!("── {} ", r.member),
        };
        let rule = "─".repeat(40usize.saturating_sub(label.chars().count()));
        let first = !self.printed;
        self.printed = true;
        let line = bold(self.color, &self.palette.paint(self.color, &r.member, &format!("{label}{rule}")));
        if !first {
            writeln!(out)?;
        }
        self.at_line_start = true;
        writeln!(out, "{line}")
    }

    fn close(&mut self, i: usize, out: &mut impl Write) -> std::io::Result<()> {
        if !self.at_line_start {
            writeln!(out)?;
            self.at_line_start = true;
        }
        match &self.runs[i].status {
            Status::Failed(why) => writeln!(out, "{}", paint(self.color, 31, &format!("✗ {}", safe(why)))),
            Status::Cancelled(None) => writeln!(out, "{}", dim(self.color, "(cancelled)")),
            Status::Cancelled(Some(why)) => writeln!(out, "{}", dim(self.color, &format!("({})", safe(why)))),
            Status::Interrupted => writeln!(out, "{}", dim(self.color, "(interrupted)")),
            _ => Ok(()),
        }
    }
}

/// Why `member`'s run failed, from the first line of its error message,
/// as its end event says it: kdd's error messages name the member already
/// (`claude: API Error …`), others are given its name.
fn failure(member: &str, body: &str) -> String {
    let first = body.trim().lines().next().unwrap_or("failed");
    match first.strip_prefix(member).and_then(|rest| rest.strip_prefix(": ")) {
        Some(_) => first.to_string(),
        None => format!("{member}: {first}"),
    }
}

#[cfg(test)]
mod tests;
