//! What the chat asks of the council beyond a message, as the CLI does:
//! a vote or a synthesis (`/vote`, `/synthesize`: a multicast completion,
//! `kd ask --vote`/`--synthesize`), `/cancel` (`kd cancel`) and `/cost`
//! (`kd cost --thread`); and whose runs are in flight — this chat's (its
//! sends, retries and completions: Esc stops them, `/quit` waits for them)
//! or another client's (`/cancel` asks before it stops them).

use kd_proto::types::{Aggregation, Completion, CostReport, MessageKind, RunInfo, ThreadEvent};

use super::app::{App, Confirm, Effect, Kind};

/// This chat's completion in flight. The daemon runs it on a connection of
/// its own (it lasts as long as the members take), so its runs are known
/// as this chat's by the King message it writes: the question, the first
/// King message with its text once it is asked, and every run of its
/// exchange (answers, ballots, the synthesis).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completing {
    pub question: String,
    /// The completion's King message, once seen.
    pub king: Option<u64>,
}

impl App {
    /// `/vote` or `/synthesize` asked: the completion goes to the daemon.
    pub fn ask_completion(&mut self, question: String, vote: bool, chair: Option<String>) -> Vec<Effect> {
        if let Some(chair) =
            chair.as_ref().filter(|c| !self.thread.members.is_empty() && !self.thread.members.contains(c))
        {
            self.set_notice(format!("no member {chair:?}; the members are {}", self.thread.members.join(", ")));
            return vec![];
        }
        if self.completing.is_some() {
            self.set_notice("a vote or synthesis of this chat is still running; Esc stops it");
            return vec![];
        }
        self.completing = Some(Completing { question: question.trim().to_string(), king: None });
        self.scroll = 0;
        self.new_below = false;
        self.set_notice(match (&chair, vote) {
            (Some(c), true) => format!("asking every member, then a vote, then {c}'s synthesis…"),
            (Some(c), false) => format!("asking every member, then {c}'s synthesis…"),
            (None, _) => "asking every member, then a vote…".to_string(),
        });
        vec![Effect::Complete { question, vote, chair }]
    }

    /// The runs of this chat's completion are this chat's (see [`Completing`]).
    pub(super) fn own_completion_runs(&mut self, event: &ThreadEvent) {
        let Some(c) = self.completing.as_mut() else { return };
        match event {
            ThreadEvent::Message { message }
                if c.king.is_none() && message.kind == MessageKind::King && message.body.trim() == c.question =>
            {
                c.king = Some(message.seq);
            }
            ThreadEvent::RunWaiting { run } if c.king.is_some() && run.exchange == c.king => {
                self.my_runs.insert(run.id.clone());
            }
            _ => {}
        }
    }

    /// The completion's answer: one line saying what came of it.
    pub fn on_completed(&mut self, c: &Completion) {
        self.completing = None;
        let m = &c.summary;
        let outcome = match (&c.tally, &c.synthesis, c.aggregation) {
            (_, Some(s), _) => format!("synthesis by {}", s.member),
            (Some(t), None, _) => format!("vote: {}", t.verdict()),
            (None, None, Aggregation::Synthesize) => "no synthesis: nobody answered".to_string(),
            (None, None, _) => "no vote: too few answers".to_string(),
        };
        let failed = m.errors + m.timeouts + m.cancelled;
        let failed = if failed > 0 { format!(" · {failed} failed or stopped") } else { String::new() };
        let notice = format!("{outcome} · {} of {} answered{failed} · ${:.4}", m.completed, m.total, m.cost_usd);
        self.set_notice(kd_client::terminal::safe(&notice).into_owned());
    }

    /// Runs in flight this chat started.
    pub fn my_runs_in_flight(&self) -> usize {
        self.in_flight(None).filter(|(_, mine)| *mine).count()
    }

    /// The runs in flight the chat shows (of `member`, or everyone's), each
    /// with whether this chat started it.
    fn in_flight(&self, member: Option<&str>) -> impl Iterator<Item = (&str, bool)> {
        self.entries
            .iter()
            .filter(|e| matches!(e.kind, Kind::Waiting | Kind::Streaming))
            .filter(move |e| member.is_none_or(|m| e.member == m))
            .filter_map(|e| e.run.as_ref().map(|r| (e.member.as_str(), self.my_runs.contains(r))))
    }

    /// `/cancel [MEMBER]`: at once when every run it would stop is this
    /// chat's; else asked first, naming whose runs other clients started.
    pub fn cancel(&mut self, member: Option<String>) -> Vec<Effect> {
        if let Some(m) = member.as_ref().filter(|m| !self.thread.members.contains(m)) {
            self.set_notice(format!("no member {m:?}; the members are {}", self.thread.members.join(", ")));
            return vec![];
        }
        let others: Vec<String> =
            self.in_flight(member.as_deref()).filter(|(_, mine)| !mine).map(|(m, _)| m.to_string()).collect();
        if others.is_empty() {
            return vec![Effect::Cancel(member)];
        }
        self.confirm = Some(Confirm::Cancel { member, others });
        self.dirty = true;
        vec![]
    }

    /// `/cancel`'s question, for the status bar.
    pub(super) fn cancel_question(others: &[String]) -> String {
        let n = others.len();
        let (runs, them) = if n == 1 { ("run", "it") } else { ("runs", "them") };
        format!("Stop {n} {runs} started elsewhere ({})? y stops {them}, any other key keeps {them}", others.join(", "))
    }

    /// The answer to `/cancel`'s question.
    pub(super) fn answer_cancel(&mut self, member: Option<String>, yes: bool) -> Vec<Effect> {
        if yes {
            self.set_notice("stopping the runs…");
            return vec![Effect::Cancel(member)];
        }
        self.set_notice("kept the runs started elsewhere");
        vec![]
    }

    /// What `/cancel` stopped.
    pub fn on_cancelled(&mut self, runs: &[RunInfo], stopped_turns: bool) {
        let notice = match (runs.is_empty(), stopped_turns) {
            (true, true) => "no runs in flight; the pending auto-turns are stopped".to_string(),
            (true, false) => "no runs in flight".to_string(),
            (false, _) => {
                let who: Vec<&str> = runs.iter().map(|r| r.member.as_str()).collect();
                format!("cancelled {}", who.join(", "))
            }
        };
        self.set_notice(notice);
    }

    /// `/cost`: the thread's total and each member's, in the status bar.
    pub fn on_cost(&mut self, report: &CostReport) {
        if report.total.answers == 0 {
            self.set_notice("nothing spent on this thread yet");
            return;
        }
        self.cost_usd = report.total.cost_usd;
        let line = crate::cmd::inspect::cost_footer(report);
        self.set_notice(kd_client::terminal::safe(&line).into_owned());
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::*;
    use ratatui::crossterm::event::KeyCode;

    use super::super::app::{App, Confirm, Effect};
    use super::super::keys;
    use super::super::tests::{enter_line, key, screen, thread};
    use crate::testkit::{message, run_info};

    fn delta(run: &str, member: &str) -> ThreadEvent {
        ThreadEvent::Delta { run: run.into(), member: member.into(), text: "…".into(), chars: 1 }
    }

    /// A chat showing claude's run, started by another client.
    fn with_a_run_from_elsewhere() -> App {
        let mut app = App::new(thread());
        app.apply(&ThreadEvent::Message { message: Box::new(message(1, "king", MessageKind::King, "Q?", None)) });
        app.apply(&ThreadEvent::RunWaiting { run: run_info("r1", "claude") });
        app.apply(&delta("r1", "claude"));
        app
    }

    #[test]
    fn cancel_asks_before_it_stops_runs_another_client_started() {
        let mut app = with_a_run_from_elsewhere();
        assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![Effect::Interrupt], "Esc: this chat's runs only");
        assert_eq!(enter_line(&mut app, "/cancel"), vec![], "asked first");
        assert_eq!(app.confirm, Some(Confirm::Cancel { member: None, others: vec!["claude".into()] }));
        let s = screen(&mut app, 120, 20);
        assert!(s.contains("Stop 1 run started elsewhere (claude)? y stops it, any other key keeps it"), "{s}");
        assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('n'))), vec![]);
        assert_eq!(app.notice.as_deref(), Some("kept the runs started elsewhere"));
        enter_line(&mut app, "/cancel");
        assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('y'))), vec![Effect::Cancel(None)]);
        // One member's: asked about that member's run only.
        assert_eq!(enter_line(&mut app, "/cancel codex"), vec![Effect::Cancel(Some("codex".into()))]);
        assert_eq!(enter_line(&mut app, "/cancel gpt"), vec![]);
        assert!(app.notice.as_deref().is_some_and(|n| n.starts_with("no member \"gpt\"")));
        // This chat's own runs are stopped at once.
        app.my_runs.insert("r1".into());
        assert_eq!(enter_line(&mut app, "/cancel"), vec![Effect::Cancel(None)]);
        app.on_cancelled(&[run_info("r1", "claude")], true);
        assert_eq!(app.notice.as_deref(), Some("cancelled claude"));
    }

    #[test]
    fn a_vote_asked_in_the_chat_owns_its_runs_until_it_ends() {
        let mut app = App::new(thread());
        assert_eq!(
            enter_line(&mut app, "/vote Queue or lock?"),
            vec![Effect::Complete { question: "Queue or lock?".into(), vote: true, chair: None }]
        );
        assert_eq!(enter_line(&mut app, "/synthesize gpt Q"), vec![], "no such chair");
        assert_eq!(enter_line(&mut app, "/vote Again?"), vec![], "one at a time");
        // Another client's question first: not this chat's.
        app.apply(&ThreadEvent::Message { message: Box::new(message(1, "king", MessageKind::King, "Other?", None)) });
        app.apply(&ThreadEvent::RunWaiting { run: run_info("r1", "claude") });
        app.apply(&ThreadEvent::Message {
            message: Box::new(message(2, "king", MessageKind::King, "Queue or lock?", None)),
        });
        let ballot = RunInfo { exchange: Some(2), purpose: Some(Purpose::Ballot), ..run_info("r2", "codex") };
        app.apply(&ThreadEvent::RunWaiting { run: ballot });
        assert_eq!(app.my_runs.iter().collect::<Vec<_>>(), ["r2"]);
        assert_eq!(app.my_runs_in_flight(), 1, "/quit waits for it");
        let tally = Tally {
            labels: vec![],
            ballots: vec![],
            scores: vec![],
            winner: Some("codex".into()),
            seq: Some(5),
            tie: None,
        };
        let summary = Summary { total: 2, completed: 2, errors: 0, timeouts: 0, cancelled: 0, cost_usd: 0.0024 };
        app.on_completed(&Completion {
            id: "c".into(),
            thread: app.thread.id.clone(),
            seq: 2,
            wait: Wait::All,
            aggregation: Aggregation::Vote,
            parts: vec![],
            merged: None,
            tally: Some(tally),
            synthesis: None,
            summary,
        });
        assert_eq!(app.notice.as_deref(), Some("vote: codex wins. · 2 of 2 answered · $0.0024"));
        assert_eq!(app.completing, None);
    }

    #[test]
    fn cost_says_the_total_and_each_members_share() {
        let mut app = App::new(thread());
        let cost = |key: &str, usd: f64, answers: u64| Cost {
            key: key.into(),
            cost_usd: usd,
            input_tokens: 10 * answers,
            output_tokens: 5 * answers,
            answers,
        };
        let report = CostReport {
            by: CostBy::Member,
            rows: vec![cost("claude", 0.0024, 2), cost("codex", 0.0012, 1)],
            total: cost("", 0.0036, 3),
        };
        assert_eq!(enter_line(&mut app, "/cost"), vec![Effect::Cost]);
        app.on_cost(&report);
        assert_eq!(app.notice.as_deref(), Some("cost $0.0036 · 30 in / 15 out tokens · claude $0.0024, codex $0.0012"));
        assert_eq!(app.cost_usd, 0.0036);
        app.on_cost(&CostReport { by: CostBy::Member, rows: vec![], total: cost("", 0.0, 0) });
        assert_eq!(app.notice.as_deref(), Some("nothing spent on this thread yet"));
    }
}
