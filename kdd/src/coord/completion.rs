//! `completion.agents` (F-X2): one prompt to several members in parallel,
//! each its own run answering the same message. `wait: all` waits for
//! every member up to the timeout (late ones are cancelled and reported
//! `timeout`); `wait: first` takes the first good answer and cancels the
//! rest. The answers are then combined:
//!
//! - `merge`: one message, every answer under its member's name;
//! - `vote`: each member ranks the *others'* answers, shown anonymised as
//!   `Response A`, `Response B`, … (as llm-council does, so that no one
//!   favours a name) and ending with a `FINAL RANKING:` list; the rankings
//!   are tallied (Borda points, then first places) and the tally, with the
//!   label → member mapping, is stored as a message;
//! - `synthesize`: a chair member writes one final answer from every
//!   answer (and the tally, after a vote).
//!
//! Every answer, ballot and synthesis is a message of the thread; every
//! step is a `completion.*` event under the completion's id.

use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::{KD, KING};
use kd_proto::types::{
    Aggregation, Ballot, Completion, Label, MessageKind, Part, PartStatus, Purpose, RouteType, Score, Style, Summary,
    Tally, Wait,
};
use serde_json::json;

use super::{Coord, check_members};
use crate::agent::registry::{Claim, Place, Run, StopReason};
use crate::client::ClientId;
use crate::council::Launch;
use crate::db::events::Record;
use crate::db::messages::NewMessage;
use crate::db::random_id;

/// A completion, with its parameters checked for form.
pub struct Params {
    pub thread: String,
    pub body: String,
    pub agents: Option<Vec<String>>,
    pub wait: Wait,
    pub timeout: Option<Duration>,
    pub aggregation: Aggregation,
    /// Also vote before a synthesis.
    pub vote: bool,
    pub chair: Option<String>,
    pub client: Option<ClientId>,
}

pub async fn complete(co: &Coord, p: Params) -> Result<Completion, ErrorObjectOwned> {
    let (thread, config) = co.thread(&p.thread).await?;
    let members = match &p.agents {
        Some(a) if !a.is_empty() => {
            check_members(&config, a, false)?;
            config.council.members.iter().filter(|m| a.contains(m)).cloned().collect()
        }
        _ => config.council.members.clone(),
    };
    if members.is_empty() {
        return Err(ErrorCode::InvalidArgument.error("no members to ask"));
    }
    let synthesize = p.aggregation == Aggregation::Synthesize;
    let vote = p.aggregation == Aggregation::Vote || (synthesize && p.vote);
    let chair = match (&p.chair, synthesize) {
        (Some(c), _) => {
            check_members(&config, std::slice::from_ref(c), false)?;
            Some(c.clone())
        }
        (None, true) => return Err(ErrorCode::InvalidArgument.error("synthesize needs a chair: a member's name")),
        (None, false) => None,
    };
    if vote && members.len() < 2 {
        return Err(ErrorCode::InvalidArgument.error("a vote needs at least two members"));
    }
    let db = &co.council.agents.db;
    let id = format!("c-{}", random_id(10));
    let question = db
        .append_message(NewMessage {
            correlation_id: Some(id.clone()),
            route: Some(if members.len() == 1 { RouteType::PointToPoint } else { RouteType::Multicast }),
            ..NewMessage::new(&thread.id, KING, members.clone(), MessageKind::King, p.body.clone())
        })
        .await?;
    let seq = question.seq;
    let event = |kind: &str, agent: Option<&str>, data: serde_json::Value| Record {
        kind: kind.to_string(),
        thread: Some(thread.id.clone()),
        agent: agent.map(str::to_string),
        from: Some(KING.to_string()),
        to: agent.map(|a| vec![a.to_string()]).unwrap_or_else(|| members.clone()),
        correlation_id: Some(id.clone()),
        data,
    };
    db.record(vec![event(
        "completion.start",
        None,
        json!({"seq": seq, "wait": p.wait, "aggregation": p.aggregation, "chair": chair, "timeout_ms": p.timeout.map(|t| t.as_millis() as u64)}),
    )])
    .await?;

    let launch = Launch {
        thread: thread.clone(),
        config: config.clone(),
        style: Style::Council,
        timeout: None,
        client: p.client,
        prompt: None,
        work: Default::default(),
    };
    let place =
        Place { reply_to: Some(seq), round: Some(1), exchange: Some(seq), replaces: None, purpose: None, step: None };
    let runs: Vec<Arc<Run>> =
        members.iter().filter_map(|m| launch.start(&co.council, m, place).map(Claim::into_run)).collect();
    let late = wait_for(&runs, p.wait, p.timeout).await;
    let mut parts = Vec::new();
    let mut events = Vec::new();
    for run in &runs {
        run.done().await;
        let part = part_of(run, late.contains(&run.id), p.wait);
        let kind = match part.status {
            PartStatus::Timeout => "completion.timeout",
            PartStatus::Cancelled => "completion.cancelled",
            _ => "completion.result",
        };
        events.push(event(kind, Some(&part.member), json!({"seq": part.seq, "status": part.status, "run": run.id})));
        parts.push(part);
    }
    db.record(events).await?;

    let mut extra_cost = 0.0;
    let answered: Vec<&Part> = parts.iter().filter(|x| x.status == PartStatus::Done).collect();
    let mut merged = None;
    if p.aggregation == Aggregation::Merge && !answered.is_empty() {
        let body = answered.iter().map(|x| format!("**{}**:\n{}", x.member, x.text)).collect::<Vec<_>>().join("\n\n");
        let m = db.append_message(kd_message(&thread.id, seq, body, &id, Purpose::Merge)).await?;
        db.record(vec![event("completion.merge", None, json!({"seq": m.seq, "contributors": answered.len()}))]).await?;
        merged = Some(m.seq);
    }
    let mut tally = None;
    if vote && answered.len() >= 2 {
        let (labels, ballots, cost) = ballots(co, &launch, place, &p.body, &answered).await;
        extra_cost += cost;
        let mut t = count(labels, ballots);
        let body = tally_text(&t);
        let m = db.append_message(kd_message(&thread.id, seq, body, &id, Purpose::Tally)).await?;
        t.seq = Some(m.seq);
        db.record(vec![event(
            "completion.vote",
            None,
            json!({"seq": m.seq, "winner": t.winner, "scores": t.scores, "labels": t.labels, "ballots": t.ballots}),
        )])
        .await?;
        tally = Some(t);
    }
    let mut synthesis = None;
    if let Some(chair) = chair.filter(|_| synthesize && !answered.is_empty()) {
        let prompt = synthesis_prompt(&p.body, &answered, tally.as_ref());
        let run_launch = Launch { prompt: Some(prompt), ..launch.clone() };
        // The chair answers the tally (or the merge) when there is one: its
        // answer is shown after it.
        let answers = tally.as_ref().and_then(|t| t.seq).or(merged).or(Some(seq));
        let synthesis_place = Place { purpose: Some(Purpose::Synthesis), reply_to: answers, ..place };
        if let Some(run) = run_launch.start(&co.council, &chair, synthesis_place).map(Claim::into_run) {
            run.done().await;
            let part = part_of(&run, false, Wait::All);
            db.record(vec![event(
                "completion.synthesis",
                Some(&chair),
                json!({"seq": part.seq, "status": part.status}),
            )])
            .await?;
            synthesis = Some(part);
        }
    }
    let count_of = |s: PartStatus| parts.iter().filter(|x| x.status == s).count() as u32;
    let cost: f64 = parts.iter().chain(synthesis.iter()).filter_map(|x| x.cost_usd).sum::<f64>() + extra_cost;
    let summary = Summary {
        total: parts.len() as u32,
        completed: count_of(PartStatus::Done),
        errors: count_of(PartStatus::Error),
        timeouts: count_of(PartStatus::Timeout),
        cancelled: count_of(PartStatus::Cancelled),
        cost_usd: cost,
    };
    db.record(vec![event("completion.done", None, json!({"summary": summary}))]).await?;
    Ok(Completion {
        id,
        thread: thread.id,
        seq,
        wait: p.wait,
        aggregation: p.aggregation,
        parts,
        merged,
        tally,
        synthesis,
        summary,
    })
}

/// Has every member of `answered` rank the others' answers, shown
/// anonymised under labels drawn afresh for this vote (so that no member
/// can tell who wrote what from one vote to the next): the labels, each
/// voter's ballot, and what the ballots cost.
pub async fn ballots(
    co: &Coord,
    launch: &Launch,
    place: Place,
    question: &str,
    answered: &[&Part],
) -> (Vec<Label>, Vec<Ballot>, f64) {
    let mut labelled = answered.to_vec();
    fastrand::shuffle(&mut labelled);
    let labels = label(&labelled);
    let mut voters = Vec::new();
    for voter in answered.iter().map(|x| x.member.clone()) {
        let prompt = ballot_prompt(question, &labels, &labelled, &voter);
        let run_launch = Launch { prompt: Some(prompt), ..launch.clone() };
        let ballot = Place { purpose: Some(Purpose::Ballot), ..place };
        if let Some(run) = run_launch.start(&co.council, &voter, ballot).map(Claim::into_run) {
            voters.push((voter, run));
        }
    }
    let (mut ballots, mut cost) = (Vec::new(), 0.0);
    for (voter, run) in voters {
        run.done().await;
        let message = run.message();
        cost += message.as_ref().and_then(|m| m.run.as_ref()).and_then(|r| r.cost_usd).unwrap_or(0.0);
        let own = labels.iter().find(|l| l.member == voter).map(|l| l.label.clone());
        let ranking = message
            .as_ref()
            .filter(|m| m.kind == MessageKind::Agent)
            .map(|m| parse_ranking(&m.body, &labels, own.as_deref()))
            .unwrap_or_default();
        ballots.push(Ballot { voter, ranking, seq: message.map(|m| m.seq) });
    }
    (labels, ballots, cost)
}

/// Waits as `wait` says; returns the runs stopped for being late.
async fn wait_for(runs: &[Arc<Run>], wait: Wait, timeout: Option<Duration>) -> Vec<String> {
    // A timeout past what the clock holds is no deadline (the RPC edge
    // bounds it anyway).
    let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
    let until_deadline = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until_deadline);
    let (tx, mut rx) = tokio::sync::mpsc::channel(runs.len().max(1));
    for run in runs {
        let (run, tx) = (run.clone(), tx.clone());
        tokio::spawn(async move {
            run.done().await;
            let _ = tx.send(run).await;
        });
    }
    drop(tx);
    let mut late = Vec::new();
    loop {
        tokio::select! {
            done = rx.recv() => match done {
                Some(run) if wait == Wait::First && run.message().is_some_and(|m| m.kind == MessageKind::Agent) => {
                    for other in runs.iter().filter(|r| r.id != run.id) {
                        other.stop(StopReason::Cancelled);
                    }
                    return late;
                }
                Some(_) => {}
                None => return late,
            },
            _ = &mut until_deadline => {
                for r in runs.iter().filter(|r| r.is_in_flight()) {
                    late.push(r.id.clone());
                    r.stop(StopReason::Cancelled);
                }
                return late;
            }
        }
    }
}

fn part_of(run: &Run, late: bool, wait: Wait) -> Part {
    let message = run.message();
    let status = match message.as_ref().map(|m| m.kind) {
        Some(MessageKind::Agent) => PartStatus::Done,
        _ if late => PartStatus::Timeout,
        Some(MessageKind::Interrupted) if wait == Wait::First => PartStatus::Cancelled,
        _ => PartStatus::Error,
    };
    Part {
        member: run.member.clone(),
        status,
        seq: message.as_ref().map(|m| m.seq),
        text: message.as_ref().map(|m| m.body.clone()).unwrap_or_default(),
        cost_usd: message.as_ref().and_then(|m| m.run.as_ref()).and_then(|r| r.cost_usd),
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

/// A, B, … Z, then AA, AB, …
/// `Response A`, `Response B`, … for the answers in the order given.
fn label(answers: &[&Part]) -> Vec<Label> {
    answers
        .iter()
        .enumerate()
        .map(|(i, x)| Label { label: format!("Response {}", letter(i)), member: x.member.clone() })
        .collect()
}

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
/// points, down to 0 for the last; ties go to more first places, then to
/// the earlier label.
pub fn count(labels: Vec<Label>, ballots: Vec<Ballot>) -> Tally {
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
    let winner = scores.first().filter(|_| voted).map(|s| s.member.clone());
    Tally { labels, ballots, scores, winner, seq: None }
}

/// The tally as the thread shows it.
pub fn tally_text(t: &Tally) -> String {
    let mut out = match &t.winner {
        Some(w) => format!("Vote: {w} wins.\n\n"),
        None => "Vote: no ranking could be read.\n\n".to_string(),
    };
    out.push_str("| answer | member | points | first places |\n|---|---|---|---|\n");
    for s in &t.scores {
        out.push_str(&format!("| {} | {} | {} | {} |\n", s.label, s.member, s.points, s.firsts));
    }
    for b in &t.ballots {
        let ranking = if b.ranking.is_empty() { "(no ranking)".to_string() } else { b.ranking.join(" > ") };
        out.push_str(&format!("\n{}: {ranking}", b.voter));
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
    }
    out.push_str(
        "\n---\nAs chair, write the council's one final answer to the King: take the best of every answer, \
         settle where they disagree, and say plainly what the King should do.",
    );
    out
}

#[cfg(test)]
mod tests {
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
        let t =
            count(l, vec![ballot("claude", &["B", "C"]), ballot("codex", &["A", "C"]), ballot("cursor", &["B", "A"])]);
        let points: Vec<(&str, u32, u32)> = t.scores.iter().map(|s| (s.member.as_str(), s.points, s.firsts)).collect();
        assert_eq!(points, [("codex", 2, 2), ("claude", 1, 1), ("cursor", 0, 0)]);
        assert_eq!(t.winner.as_deref(), Some("codex"));
        let none = count(labels(&["a", "b"]), vec![ballot("a", &[])]);
        assert_eq!(none.winner, None);
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
