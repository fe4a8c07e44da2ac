//! How answers reach a terminal (`kd ask`, `kd watch`): one member at a
//! time, so they never interleave. The first member to say something
//! streams live; the others are kept and shown, whole, as soon as the live
//! one is done, after which the next one streams live. Labels are in the
//! member's colour on a terminal, plain when piped. `kd ask` follows the
//! runs of its own exchange until it ends; `kd watch` follows every run of
//! the thread, and the King's messages, until it is stopped.

use std::io::Write;

use kd_client::style::{Palette, bold, dim, paint};
use kd_client::terminal::safe;
use kd_proto::names::KD;
use kd_proto::types::{Message, MessageKind, Purpose, RoundState, Sent, ThreadEvent};

#[derive(Debug, Clone, PartialEq)]
enum Status {
    Running,
    Done,
    Failed(String),
    Cancelled,
}

#[derive(Debug)]
struct RunView {
    id: String,
    member: String,
    round: Option<u32>,
    /// A ballot or synthesis run, a tally or merged message.
    purpose: Option<Purpose>,
    streamed: String,
    /// The stored message, when it arrived.
    body: Option<String>,
    status: Status,
    shown: bool,
}

/// What the terminal shows: one exchange's runs, round after round,
/// until the exchange ends; or (watching) everything said on the thread.
pub struct View {
    runs: Vec<RunView>,
    /// The King message's seq, which names the exchange; `None` when
    /// watching the whole thread.
    exchange: Option<u64>,
    rounds: u32,
    exchange_over: bool,
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
}

impl View {
    pub fn new(sent: &Sent, color: bool, json: bool) -> View {
        let runs = sent
            .runs
            .iter()
            .map(|r| RunView {
                id: r.run.id.clone(),
                member: r.run.member.clone(),
                round: r.run.round,
                purpose: r.run.purpose,
                streamed: String::new(),
                body: None,
                status: Status::Running,
                shown: false,
            })
            .collect();
        View {
            runs,
            exchange: Some(sent.message.seq),
            rounds: sent.rounds,
            exchange_over: false,
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

    pub fn all_done(&self) -> bool {
        self.exchange_over && self.runs.iter().all(|r| r.status != Status::Running && (self.json || r.shown))
    }

    pub fn pending(&self) -> Vec<String> {
        self.runs.iter().filter(|r| r.status == Status::Running).map(|r| r.id.clone()).collect()
    }

    /// One line per member that did not answer (its first failure's
    /// reason), in the order the members first appeared.
    pub fn failures(&self) -> Vec<String> {
        let mut seen: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for r in &self.runs {
            let line = match &r.status {
                Status::Failed(why) => why.clone(),
                Status::Cancelled => format!("{}: cancelled", r.member),
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
                ThreadEvent::Round { exchange, .. } => self.ours(Some(*exchange)),
                ThreadEvent::Message { message } => {
                    message.run.as_ref().and_then(|m| m.run_id.as_deref()).is_some_and(|id| self.index(id).is_some())
                        || self.is_note(message)
                }
                ThreadEvent::Lagged { .. }
                | ThreadEvent::Emergency { .. }
                | ThreadEvent::Status { .. }
                | ThreadEvent::Work { .. } => true,
            };
            if ours {
                writeln!(out, "{}", serde_json::to_string(e).unwrap_or_default())?;
            }
        }
        match e {
            ThreadEvent::RunWaiting { run } if self.ours(run.exchange) && self.index(&run.id).is_none() => {
                self.runs.push(RunView {
                    id: run.id.clone(),
                    member: run.member.clone(),
                    round: run.round,
                    purpose: run.purpose,
                    streamed: String::new(),
                    body: None,
                    status: Status::Running,
                    shown: false,
                });
            }
            ThreadEvent::Round { exchange, state, rounds, .. } if self.ours(Some(*exchange)) => {
                if self.exchange.is_none() {
                    self.rounds = *rounds;
                } else if *state != RoundState::Running {
                    self.exchange_over = true;
                }
            }
            ThreadEvent::Delta { run, text, .. } => {
                let Some(i) = self.index(run) else { return Ok(()) };
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
                out.flush()?;
            }
            ThreadEvent::Message { message } => {
                self.last_seq = self.last_seq.max(message.seq);
                let shown_whole = match message.purpose {
                    Some(Purpose::Tally | Purpose::Merge) => true,
                    _ => self.show_king && message.kind == MessageKind::King,
                };
                if let Some(i) = message.run.as_ref().and_then(|m| m.run_id.as_deref()).and_then(|id| self.index(id)) {
                    self.runs[i].body = Some(message.body.clone());
                    self.answers.insert(message.seq);
                } else if self.is_note(message) {
                    if !self.json {
                        self.notes.push(message.body.clone());
                        self.show_waiting(out)?;
                    }
                } else if self.exchange.is_none() && shown_whole {
                    // Watching: what the King said, or kd's tally, in its turn.
                    self.runs.push(RunView {
                        id: format!("message {}", message.seq),
                        member: message.from.clone(),
                        round: None,
                        purpose: message.purpose,
                        streamed: String::new(),
                        body: Some(message.body.clone()),
                        status: Status::Done,
                        shown: false,
                    });
                    self.show_waiting(out)?;
                }
            }
            ThreadEvent::RunFinished { run, .. } => self.end(run, Status::Done, out)?,
            ThreadEvent::RunError { run, error, .. } => self.end(run, Status::Failed(error.clone()), out)?,
            ThreadEvent::RunCancelled { run, .. } => self.end(run, Status::Cancelled, out)?,
            _ => {}
        }
        Ok(())
    }

    fn end(&mut self, run: &str, status: Status, out: &mut impl Write) -> std::io::Result<()> {
        let Some(i) = self.index(run) else { return Ok(()) };
        self.runs[i].status = status;
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
                if self.runs[j].status == Status::Done {
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
            // Watching never ends: forget what is on the screen already.
            self.runs.retain(|r| !r.shown || r.status == Status::Running);
        }
        out.flush()
    }

    fn emit(&mut self, out: &mut impl Write, text: &str) -> std::io::Result<()> {
        if !text.is_empty() {
            self.at_line_start = text.ends_with('\n');
            write!(out, "{}", safe(text))?;
        }
        Ok(())
    }

    fn header(&mut self, i: usize, out: &mut impl Write) -> std::io::Result<()> {
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
            Status::Cancelled => writeln!(out, "{}", dim(self.color, "(cancelled)")),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, run_info};
    use kd_proto::types::{Message, MessageKind, SentRun};

    fn sent(members: &[&str]) -> Sent {
        Sent {
            message: message(1, "king", "q", None),
            members: members.iter().map(|m| m.to_string()).collect(),
            rounds: 1,
            mode: kd_proto::types::Mode::Broadcast,
            notice: None,
            runs: members.iter().map(|m| SentRun { run: run_info(&format!("r-{m}"), m), attached: false }).collect(),
        }
    }

    fn message(seq: u64, from: &str, body: &str, run: Option<&str>) -> Message {
        let kind = if from == "king" { MessageKind::King } else { MessageKind::Agent };
        testkit::message(seq, from, kind, body, run)
    }

    fn delta(member: &str, text: &str) -> ThreadEvent {
        ThreadEvent::Delta { run: format!("r-{member}"), member: member.into(), text: text.into(), chars: 0 }
    }

    fn finished(member: &str, seq: u64, body: &str) -> Vec<ThreadEvent> {
        vec![
            ThreadEvent::Message { message: Box::new(message(seq, member, body, Some(&format!("r-{member}")))) },
            ThreadEvent::RunFinished { run: format!("r-{member}"), member: member.into(), seq },
        ]
    }

    fn over() -> ThreadEvent {
        ThreadEvent::Round {
            exchange: 1,
            round: 1,
            rounds: 1,
            state: kd_proto::types::RoundState::Done,
            expected: vec![],
        }
    }

    fn play(view: &mut View, events: Vec<ThreadEvent>) -> String {
        let mut out = Vec::new();
        for e in events {
            view.on_event(&e, &mut out).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn answers_never_interleave_and_waiting_ones_follow_whole() {
        let mut v = View::new(&sent(&["claude", "codex"]), false, false);
        let mut events = vec![delta("claude", "Hel"), delta("codex", "I think"), delta("claude", "lo.")];
        events.extend(finished("codex", 2, "I think so."));
        events.push(delta("claude", "\nMore."));
        events.extend(finished("claude", 3, "Hello.\nMore."));
        let out = play(&mut v, events);
        assert!(!v.all_done(), "not before the exchange ends");
        play(&mut v, vec![over()]);
        let rule = |m: &str| format!("── {m} {}", "─".repeat(40 - 4 - m.len()));
        assert_eq!(out, format!("{}\nHello.\nMore.\n\n{}\nI think so.\n", rule("claude"), rule("codex")));
        assert!(v.all_done());
        assert!(v.failures().is_empty());
    }

    #[test]
    fn later_rounds_join_the_view_with_their_round_in_the_header() {
        let mut s = sent(&["claude"]);
        s.rounds = 2;
        let mut v = View::new(&s, false, false);
        let mut second = s.runs[0].run.clone();
        second.id = "r-claude-2".into();
        second.round = Some(2);
        let mut events = vec![delta("claude", "one")];
        events.extend(finished("claude", 2, "one"));
        events.push(ThreadEvent::RunWaiting { run: second.clone() });
        events.push(ThreadEvent::Delta {
            run: second.id.clone(),
            member: "claude".into(),
            text: "two".into(),
            chars: 3,
        });
        events.push(ThreadEvent::Message { message: Box::new(message(3, "claude", "two", Some("r-claude-2"))) });
        events.push(ThreadEvent::RunFinished { run: second.id.clone(), member: "claude".into(), seq: 3 });
        events.push(ThreadEvent::Round {
            exchange: 1,
            round: 2,
            rounds: 2,
            state: kd_proto::types::RoundState::Done,
            expected: vec![],
        });
        let out = play(&mut v, events);
        assert!(out.contains("── claude · round 1 ─"), "{out}");
        assert!(out.contains("── claude · round 2 ─"), "{out}");
        assert!(out.ends_with("two\n"), "{out}");
        assert!(v.all_done());
    }

    #[test]
    fn failures_are_shown_and_listed() {
        let mut v = View::new(&sent(&["claude", "codex"]), false, false);
        let out = play(
            &mut v,
            vec![
                ThreadEvent::RunError {
                    run: "r-codex".into(),
                    member: "codex".into(),
                    error: "codex: timed out after 1 s".into(),
                    timed_out: true,
                    seq: 2,
                },
                delta("claude", "ok"),
                ThreadEvent::RunCancelled { run: "r-claude".into(), member: "claude".into(), seq: 3 },
            ],
        );
        assert!(out.contains("── codex"), "{out}");
        assert!(out.contains("✗ codex: timed out after 1 s"), "{out}");
        assert!(out.contains("ok\n(cancelled)"), "{out}");
        assert_eq!(v.failures(), vec!["claude: cancelled", "codex: timed out after 1 s"], "in member order");
    }

    #[test]
    fn a_live_answer_ends_with_the_stored_answer_when_they_differ() {
        let mut v = View::new(&sent(&["cursor", "codex"]), false, false);
        let mut events = vec![delta("cursor", "cursor: Hello"), delta("cursor", " Hello there.")];
        events.extend(finished("cursor", 2, "Hello there."));
        events.push(delta("codex", "Same."));
        events.extend(finished("codex", 3, "Same."));
        events.push(over());
        let out = play(&mut v, events);
        let rule = |m: &str| format!("── {m} {}", "─".repeat(40 - 4 - m.len()));
        let kept = format!("── cursor · as kd keeps it {}", "─".repeat(40 - 27));
        assert_eq!(
            out,
            format!(
                "{}\ncursor: Hello Hello there.\n{kept}\nHello there.\n\n{}\nSame.\n",
                rule("cursor"),
                rule("codex")
            )
        );
    }

    #[test]
    fn kds_word_on_the_exchange_waits_for_the_live_answer_and_is_marked() {
        let mut v = View::new(&sent(&["claude", "codex"]), false, false);
        let mut note = testkit::message(4, "kd", MessageKind::System, "Budget reached.", None);
        note.reply_to = Some(2);
        let mut elsewhere = testkit::message(5, "kd", MessageKind::System, "Not about this exchange.", None);
        elsewhere.reply_to = Some(99);
        let mut events = vec![delta("claude", "Yes")];
        events.extend(finished("codex", 2, "No."));
        events.push(ThreadEvent::Message { message: Box::new(note) });
        events.push(ThreadEvent::Message { message: Box::new(elsewhere) });
        events.push(delta("claude", "."));
        events.extend(finished("claude", 3, "Yes."));
        let out = play(&mut v, events);
        assert!(out.ends_with("No.\nkd: Budget reached.\n"), "after the answers, not inside one: {out}");
        assert!(!out.contains("Not about this exchange"), "{out}");
    }

    #[test]
    fn json_mode_carries_the_stored_answer_before_the_end_of_its_run() {
        let mut v = View::new(&sent(&["cursor"]), false, true);
        let mut events = vec![delta("cursor", "cursor: Hi")];
        events.extend(finished("cursor", 2, "Hi."));
        let out = play(&mut v, events);
        let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines[1]["type"], "message");
        assert_eq!(lines[1]["message"]["body"], "Hi.");
        assert_eq!(lines[2]["type"], "run_finished");
    }

    #[test]
    fn on_a_terminal_labels_are_coloured_per_member() {
        let mut v = View::new(&sent(&["claude"]), true, false);
        let out = play(&mut v, vec![delta("claude", "hi")]);
        assert!(out.starts_with("\x1b[1m\x1b[38;5;166m── claude "), "{out:?}");
        assert!(out.ends_with("\x1b[0m\x1b[0m\nhi"), "{out:?}");
    }

    #[test]
    fn json_mode_prints_this_sends_events_as_lines() {
        let mut v = View::new(&sent(&["claude"]), false, true);
        let mut events = vec![delta("claude", "x"), delta("other", "not ours")];
        events.extend(finished("claude", 2, "x"));
        events.push(over());
        let out = play(&mut v, events);
        let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["type"], "delta");
        assert_eq!(lines[2]["type"], "run_finished");
        assert_eq!(lines[3]["type"], "round");
        assert!(v.all_done());
    }

    #[test]
    fn watching_shows_the_kings_messages_and_every_exchanges_runs_in_turn() {
        let mut v = View::watching(false, Palette::default());
        let mut r1 = run_info("r-claude", "claude");
        r1.exchange = Some(7);
        let mut events = vec![
            ThreadEvent::Message { message: Box::new(message(7, "king", "Who is there?", None)) },
            ThreadEvent::RunWaiting { run: r1 },
            delta("claude", "Me."),
        ];
        events.extend(finished("claude", 8, "Me."));
        events.push(ThreadEvent::Message { message: Box::new(message(9, "king", "Anyone else?", None)) });
        let out = play(&mut v, events);
        let rule = |m: &str| format!("── {m} {}", "─".repeat(40 - 4 - m.len()));
        assert_eq!(
            out,
            format!("{}\nWho is there?\n\n{}\nMe.\n\n{}\nAnyone else?\n", rule("king"), rule("claude"), rule("king"))
        );
        assert!(!v.all_done(), "watching goes on");
        assert!(v.runs.is_empty(), "what is on the screen is forgotten");
    }
}
