//! A vote's pieces (F-X2), shared by `completion.agents` and `kd work`'s
//! best-of-N vote: the anonymised labels, each voter's ballot prompt, the
//! rankings read back, the Borda tally and the chair's prompt.

use kd_proto::names::{KD, KING};
use kd_proto::types::{Ballot, Label, MessageKind, Part, Purpose, Score, Tally, Tie, TieBreak};

use std::sync::Arc;

use super::{Halt, take_step};
use crate::agent::registry::Place;
use crate::coord::Coord;
use crate::council::Launch;
use crate::db::exchanges::{ExchangeId, Purpose as StepPurpose, Step, StepKey};
use crate::db::messages::NewMessage;

/// A vote over an exchange's answers (a completion's, or `kd work`'s
/// diffs), its ballots steps of the exchange's journal in `round`.
pub struct Vote<'a> {
    pub co: &'a Arc<Coord>,
    pub x: ExchangeId,
    pub round: u32,
    pub launch: &'a Launch,
    pub place: Place,
    pub question: &'a str,
}

impl Vote<'_> {
    /// Labels for `answered`, drawn once (so that no member can tell who
    /// wrote what from one vote to the next) and fixed in the journal, so
    /// that ballots asked after a restart show the same ones.
    pub async fn labels(&self, answered: &[&Part]) -> Result<Vec<Label>, Halt> {
        let members: Vec<String> = answered.iter().map(|p| p.member.clone()).collect();
        let drawn = serde_json::to_value(draw_labels(&members)).map_err(|e| Halt::Failed(format!("labels: {e}")))?;
        let fixed = self.co.council.agents.db.fix_choice(self.x, "labels", drawn).await?;
        let labels: Vec<Label> =
            serde_json::from_value(fixed).map_err(|e| Halt::Failed(format!("the fixed labels: {e}")))?;
        let same = labels.len() == members.len() && labels.iter().all(|l| members.contains(&l.member));
        if !same {
            return Err(Halt::Failed("the fixed labels do not match the answers".into()));
        }
        Ok(labels)
    }

    /// Has every member of `answered` rank the others' answers, shown
    /// under `labels` only — each ballot a step, asked unless the journal
    /// holds it over; each voter's ballot, and what the ballots cost.
    pub async fn cast(&self, labels: &[Label], answered: &[&Part]) -> Result<(Vec<Ballot>, f64), Halt> {
        let labelled: Vec<&Part> =
            labels.iter().filter_map(|l| answered.iter().find(|p| p.member == l.member).copied()).collect();
        let mut runs = Vec::new();
        for voter in answered.iter().map(|p| p.member.as_str()) {
            let prompt = ballot_prompt(self.question, labels, &labelled, voter);
            let launch = Launch { prompt: Some(prompt), ..self.launch.clone() };
            let place = Place { purpose: Some(Purpose::Ballot), ..self.place };
            let key = StepKey { round: self.round, member: voter.to_string(), purpose: StepPurpose::Ballot, cause: 0 };
            if let Some(run) = take_step(self.co, self.x, key, &launch, place).await? {
                runs.push(run);
            }
        }
        for run in &runs {
            run.done().await;
        }
        if self.co.council.agents.is_closed() {
            return Err(Halt::ShuttingDown);
        }
        let steps = self.co.council.agents.db.steps_with_messages(self.x).await?;
        let (mut ballots, mut cost) = (Vec::new(), 0.0);
        for voter in answered.iter().map(|p| p.member.as_str()) {
            let ballot = |s: &Step| s.key.round == self.round && s.key.purpose == StepPurpose::Ballot;
            let Some((_, message)) = steps.iter().find(|(s, _)| ballot(s) && s.key.member == voter) else {
                continue;
            };
            cost += message.as_ref().and_then(|m| m.run.as_ref()).and_then(|r| r.cost_usd).unwrap_or(0.0);
            let own = labels.iter().find(|l| l.member == voter).map(|l| l.label.clone());
            let ranking = message
                .as_ref()
                .filter(|m| m.kind == MessageKind::Agent)
                .map(|m| parse_ranking(&m.body, labels, own.as_deref()))
                .unwrap_or_default();
            ballots.push(Ballot { voter: voter.to_string(), ranking, seq: message.as_ref().map(|m| m.seq) });
        }
        Ok((ballots, cost))
    }
}

pub fn kd_message(thread: &str, reply_to: u64, body: String, id: &str, purpose: Purpose) -> NewMessage {
    NewMessage {
        reply_to: Some(reply_to),
        purpose: Some(purpose),
        correlation_id: Some(id.to_string()),
        ..NewMessage::new(thread, KD, vec![KING.to_string()], MessageKind::System, body)
    }
}

/// Labels drawn for `members` in a random order: who is `Response A` is
/// chance (drawn once per vote; a completion fixes them in its journal).
pub fn draw_labels(members: &[String]) -> Vec<Label> {
    let mut shuffled = members.to_vec();
    fastrand::shuffle(&mut shuffled);
    shuffled
        .into_iter()
        .enumerate()
        .map(|(i, member)| Label { label: format!("Response {}", letter(i)), member })
        .collect()
}

/// A, B, … Z, then AA, AB, …
fn letter(i: usize) -> String {
    let a = |n: usize| char::from(b'A' + (n % 26) as u8);
    if i < 26 { a(i).to_string() } else { format!("{}{}", a(i / 26 - 1), a(i)) }
}

/// The ranking prompt of `voter`: the question and the other members'
/// answers under their labels only — no member's name appears in it.
pub fn ballot_prompt(question: &str, labels: &[Label], answers: &[&Part], voter: &str) -> String {
    let mut out = format!(
        "[Evaluation]\nThe King asked:\n\n{question}\n\nHere are answers from other council members, anonymised:\n"
    );
    let mut shown = Vec::new();
    for (l, a) in labels.iter().zip(answers) {
        if a.member != voter {
            out.push_str(&format!("\n{}:\n{}\n", l.label, a.text));
            shown.push(l.label.as_str());
        }
    }
    out.push_str(&format!(
        "\n---\nEvaluate each response: what it does well and what it does poorly. Then end with your ranking, \
         best first, exactly in this form:\n\nFINAL RANKING:\n{}",
        shown.iter().enumerate().map(|(i, l)| format!("{}. {l}", i + 1)).collect::<Vec<_>>().join("\n")
    ));
    out
}

/// The labels of a ballot, best first: the `Response X` lines after
/// `FINAL RANKING:` (anywhere in the text when it has no such line),
/// known labels only, each once, never the voter's own.
pub fn parse_ranking(text: &str, labels: &[Label], own: Option<&str>) -> Vec<String> {
    let section = text.rfind("FINAL RANKING:").map(|i| &text[i..]).unwrap_or(text);
    let mut out: Vec<String> = Vec::new();
    let mut rest = section;
    while let Some(i) = rest.find("Response ") {
        let after = &rest[i + "Response ".len()..];
        let name: String = after.chars().take_while(|c| c.is_ascii_uppercase()).collect();
        let label = format!("Response {name}");
        if !name.is_empty()
            && labels.iter().any(|l| l.label == label)
            && own != Some(label.as_str())
            && !out.contains(&label)
        {
            out.push(label);
        }
        rest = &after[name.len()..];
    }
    out
}

/// Tallies ballots: a first place among k ranked answers is worth k-1
/// points, down to 0 for the last. A tie on points goes to the member with
/// more first places; still tied, to the one `chair` (the synthesis chair,
/// when there is one) ranks highest on its ballot — its own answer, which
/// it cannot rank, counts below those it ranked; else there is no winner:
/// the tie is left to the King.
pub fn count(labels: Vec<Label>, ballots: Vec<Ballot>, chair: Option<&str>) -> Tally {
    let mut scores: Vec<Score> = labels
        .iter()
        .map(|l| Score { member: l.member.clone(), label: l.label.clone(), points: 0, firsts: 0 })
        .collect();
    for b in &ballots {
        let k = b.ranking.len() as u32;
        for (i, label) in b.ranking.iter().enumerate() {
            if let Some(s) = scores.iter_mut().find(|s| &s.label == label) {
                s.points += k - 1 - i as u32;
                if i == 0 {
                    s.firsts += 1;
                }
            }
        }
    }
    let voted = ballots.iter().any(|b| !b.ranking.is_empty());
    scores.sort_by(|a, b| b.points.cmp(&a.points).then(b.firsts.cmp(&a.firsts)));
    let (winner, tie) = if voted { settle(&scores, &ballots, chair) } else { (None, None) };
    let winner = winner.map(str::to_string);
    // Best first: the winner of a tie heads it.
    if let Some(w) = &winner {
        scores.sort_by_key(|s| (std::cmp::Reverse((s.points, s.firsts)), &s.member != w));
    }
    Tally { labels, ballots, scores, winner, seq: None, tie }
}

/// The winner of `scores` (sorted by points, then first places) and the
/// tie at the top, if any, with what settled it.
fn settle<'a>(scores: &'a [Score], ballots: &[Ballot], chair: Option<&str>) -> (Option<&'a str>, Option<Tie>) {
    let Some(top) = scores.first() else { return (None, None) };
    let tied: Vec<&Score> = scores.iter().filter(|s| s.points == top.points).collect();
    if tied.len() == 1 {
        return (Some(&top.member), None);
    }
    let members = tied.iter().map(|s| s.member.clone()).collect();
    let still: Vec<&Score> = tied.iter().filter(|s| s.firsts == top.firsts).copied().collect();
    if let [one] = still.as_slice() {
        return (Some(&one.member), Some(Tie { members, broken_by: TieBreak::FirstPlaces, chair: None }));
    }
    let chosen = chair.and_then(|chair| {
        let ballot = ballots.iter().find(|b| b.voter == chair)?;
        let pick = ballot.ranking.iter().find_map(|l| still.iter().find(|s| &s.label == l))?;
        Some((chair, pick))
    });
    match chosen {
        Some((chair, pick)) => {
            (Some(&pick.member), Some(Tie { members, broken_by: TieBreak::Chair, chair: Some(chair.to_string()) }))
        }
        None => (None, Some(Tie { members, broken_by: TieBreak::King, chair: None })),
    }
}

/// The tally as the thread shows it.
pub fn tally_text(t: &Tally) -> String {
    let mut out = format!("Vote: {}\n\n", t.verdict());
    out.push_str("| answer | member | points | first places |\n|---|---|---|---|\n");
    for s in &t.scores {
        out.push_str(&format!("| {} | {} | {} | {} |\n", s.label, s.member, s.points, s.firsts));
    }
    // Under a table of which answer is whose, `claude: Response A` would
    // read as one more such pair: each ballot says it is one.
    if !t.ballots.is_empty() {
        out.push_str("\nBallots:");
    }
    for b in &t.ballots {
        match b.ranking.is_empty() {
            true => out.push_str(&format!("\n- {} gave no ranking that could be read", b.voter)),
            false => out.push_str(&format!("\n- {} ranks {}", b.voter, b.ranking.join(" > "))),
        }
    }
    out
}

/// The chair's prompt: the question, every answer under its member's name,
/// and the tally when there was a vote.
pub fn synthesis_prompt(question: &str, answers: &[&Part], tally: Option<&Tally>) -> String {
    let mut out = format!("[Synthesis]\nThe King asked:\n\n{question}\n\nThe council answered:\n");
    for a in answers {
        out.push_str(&format!("\n{}:\n{}\n", a.member, a.text));
    }
    if let Some(t) = tally {
        out.push_str("\nThe council's vote, best first: ");
        out.push_str(
            &t.scores.iter().map(|s| format!("{} ({} points)", s.member, s.points)).collect::<Vec<_>>().join(", "),
        );
        out.push('\n');
        if t.tie.is_some() {
            out.push_str(&format!("Its verdict: {}\n", t.verdict()));
        }
    }
    out.push_str(
        "\n---\nAs chair, write the council's one final answer to the King: take the best of every answer, \
         settle where they disagree, and say plainly what the King should do.",
    );
    out
}

#[cfg(test)]
mod tests {
    use kd_proto::types::PartStatus;

    use super::*;

    fn labels(members: &[&str]) -> Vec<Label> {
        members
            .iter()
            .enumerate()
            .map(|(i, m)| Label { label: format!("Response {}", letter(i)), member: m.to_string() })
            .collect()
    }

    #[test]
    fn rankings_are_read_from_the_final_ranking_known_labels_once_never_ones_own() {
        let l = labels(&["claude", "codex", "cursor"]);
        let text = "Response A is thorough. Response C misses a case.\n\nFINAL RANKING:\n1. Response C\n2. Response A\n3. Response C\n4. Response Z";
        assert_eq!(parse_ranking(text, &l, Some("Response B")), ["Response C", "Response A"]);
        assert_eq!(parse_ranking("I prefer Response B over Response A", &l, Some("Response A")), ["Response B"]);
        assert!(parse_ranking("no opinion", &l, None).is_empty());
    }

    #[test]
    fn the_tally_gives_borda_points_and_breaks_ties_by_first_places() {
        let l = labels(&["claude", "codex", "cursor"]);
        let ballot = |voter: &str, r: &[&str]| Ballot {
            voter: voter.into(),
            ranking: r.iter().map(|s| format!("Response {s}")).collect(),
            seq: None,
        };
        let ballots = vec![ballot("claude", &["B", "C"]), ballot("codex", &["A", "C"]), ballot("cursor", &["B", "A"])];
        let t = count(l, ballots, None);
        let points: Vec<(&str, u32, u32)> = t.scores.iter().map(|s| (s.member.as_str(), s.points, s.firsts)).collect();
        assert_eq!(points, [("codex", 2, 2), ("claude", 1, 1), ("cursor", 0, 0)]);
        assert_eq!((t.winner.as_deref(), &t.tie), (Some("codex"), &None));
        assert_eq!(t.verdict(), "codex wins.");
        let none = count(labels(&["a", "b"]), vec![ballot("a", &[])], Some("a"));
        assert_eq!((none.winner, none.tie), (None, None));
    }

    fn ballot(voter: &str, r: &[&str]) -> Ballot {
        Ballot { voter: voter.into(), ranking: r.iter().map(|s| format!("Response {s}")).collect(), seq: None }
    }

    #[test]
    fn a_tie_on_points_goes_to_more_first_places() {
        // a and c 4 points each, a with 2 first places, c with one.
        let l = labels(&["a", "b", "c", "d"]);
        let ballots = vec![
            ballot("a", &["B", "C", "D"]),
            ballot("b", &["A", "C", "D"]),
            ballot("c", &["A", "D", "B"]),
            ballot("d", &["C", "B", "A"]),
        ];
        let t = count(l, ballots, None);
        let top: Vec<(&str, u32, u32)> = t.scores.iter().map(|s| (s.member.as_str(), s.points, s.firsts)).collect();
        assert_eq!(&top[..2], [("a", 4, 2), ("c", 4, 1)], "{top:?}");
        assert_eq!(t.winner.as_deref(), Some("a"));
        let tie = t.tie.clone().unwrap();
        assert_eq!((tie.members, tie.broken_by), (vec!["a".to_string(), "c".to_string()], TieBreak::FirstPlaces));
        assert_eq!(t.verdict(), "tie between a and c on 4 points, broken by first places (a has 2): a wins.");
    }

    #[test]
    fn two_each_ranking_the_other_first_tie_left_to_the_king_unless_a_chair_ranked_one() {
        let l = labels(&["alpha", "beta"]);
        let ballots = vec![ballot("alpha", &["B"]), ballot("beta", &["A"])];
        let t = count(l.clone(), ballots.clone(), None);
        assert_eq!(t.winner, None);
        let tie = t.tie.clone().unwrap();
        assert_eq!((tie.members.len(), tie.broken_by, tie.chair), (2, TieBreak::King, None));
        let verdict = t.verdict();
        assert!(verdict.starts_with("tie between ") && verdict.contains("alpha") && verdict.contains("beta"));
        assert!(verdict.ends_with(" on 0 points and 1 first place each: left to the King."), "{verdict}");
        assert!(tally_text(&t).starts_with(&format!("Vote: {verdict}\n\n")));
        // Each ballot is said to be one (under the table of labels, `alpha:
        // Response B` read as which member wrote which answer).
        let text = tally_text(&t);
        assert!(text.ends_with("\n\nBallots:\n- alpha ranks Response B\n- beta ranks Response A"), "{text}");
        let silent = count(l.clone(), vec![ballot("alpha", &["B"]), ballot("beta", &[])], None);
        assert!(tally_text(&silent).ends_with("- beta gave no ranking that could be read"), "{}", tally_text(&silent));
        // The chair alpha ranked beta's answer (it cannot rank its own).
        let t = count(l.clone(), ballots.clone(), Some("alpha"));
        assert_eq!(t.winner.as_deref(), Some("beta"));
        assert_eq!(t.scores[0].member, "beta", "the winner heads the scores");
        assert_eq!(t.tie.as_ref().map(|t| (t.broken_by, t.chair.as_deref())), Some((TieBreak::Chair, Some("alpha"))));
        assert!(
            t.verdict().ends_with(
                " on 0 points and 1 first place each, broken by the chair's ballot (alpha ranks beta higher): beta wins."
            ),
            "{}",
            t.verdict()
        );
        // A chair without a ballot breaks nothing.
        let t = count(l, ballots, Some("gamma"));
        assert_eq!((t.winner, t.tie.map(|t| t.broken_by)), (None, Some(TieBreak::King)));
    }

    #[test]
    fn the_chair_breaks_only_the_tie_left_after_first_places() {
        // a, b and c 9 points each; a and b 2 first places each, c one; the
        // chair e ranks c, then a, then b.
        let l = labels(&["a", "b", "c", "d", "e"]);
        let ballots = vec![
            ballot("a", &["B", "C", "D", "E"]),
            ballot("b", &["A", "C", "D", "E"]),
            ballot("c", &["A", "B", "D", "E"]),
            ballot("d", &["B", "C", "A", "E"]),
            ballot("e", &["C", "A", "B", "D"]),
        ];
        let t = count(l, ballots, Some("e"));
        let top: Vec<(&str, u32, u32)> = t.scores.iter().map(|s| (s.member.as_str(), s.points, s.firsts)).collect();
        assert_eq!(&top[..3], [("a", 9, 2), ("b", 9, 2), ("c", 9, 1)]);
        assert_eq!(t.winner.as_deref(), Some("a"));
        assert_eq!(
            t.verdict(),
            "tie between a, b and c on 9 points, a and b with 2 first places each, broken by the chair's ballot \
             (e ranks a higher): a wins."
        );
    }

    #[test]
    fn a_ballot_names_no_member() {
        let l = labels(&["claude", "codex", "cursor"]);
        let parts: Vec<Part> = ["claude", "codex", "cursor"]
            .iter()
            .map(|m| Part {
                member: m.to_string(),
                status: PartStatus::Done,
                seq: None,
                text: format!("text {}", m.len()),
                cost_usd: None,
            })
            .collect();
        let refs: Vec<&Part> = parts.iter().collect();
        let prompt = ballot_prompt("Which?", &l, &refs, "codex");
        for m in ["claude", "codex", "cursor"] {
            assert!(!prompt.contains(m), "{prompt}");
        }
        assert!(prompt.contains("Response A:") && prompt.contains("Response C:") && !prompt.contains("Response B:"));
        assert!(prompt.ends_with("FINAL RANKING:\n1. Response A\n2. Response C"), "{prompt}");
        assert_eq!(letter(27), "AB");
    }
}
