//! A completion's steps, replayed over its journal (F-J1, F-J2): each
//! member's answer, each ballot and the synthesis is a step a run takes
//! once; the merge and the tally are kd's own steps, written with their
//! message once. A step the journal holds as over is not asked again, so
//! the same drive takes a completion up after a restart; its parts are
//! read from the steps, so a resumed completion reports what an
//! uninterrupted one would. At shutdown it returns having written nothing.

use std::sync::Arc;
use std::time::Duration;

use kd_proto::names::KING;
use kd_proto::types::{Aggregation, Completion, Message, MessageKind, Part, PartStatus, Style, Summary, Tally, Wait};
use serde_json::json;

use super::vote::{Vote, count, kd_message, synthesis_prompt, tally_text};
use super::{Coord, Halt, Plan, take_step};
use crate::agent::registry::{Place, Run, StopReason};
use crate::client::ClientId;
use crate::council::Launch;
use crate::db::events::Record;
use crate::db::exchanges::kd_step::KdStep;
use crate::db::exchanges::{Exchange, Purpose, Step, StepKey, StepState};
use crate::db::now_ms;

/// What a drive shares.
struct Drive<'a> {
    co: &'a Arc<Coord>,
    x: Exchange,
    plan: Plan,
    id: String,
    question: Message,
    launch: Launch,
    place: Place,
}

impl Drive<'_> {
    fn event(&self, kind: &str, agent: Option<&str>, data: serde_json::Value) -> Record {
        Record {
            kind: kind.to_string(),
            thread: Some(self.x.thread.clone()),
            agent: agent.map(str::to_string),
            from: Some(KING.to_string()),
            to: agent.map(|a| vec![a.to_string()]).unwrap_or_else(|| self.plan.members.clone()),
            correlation_id: Some(self.id.clone()),
            data,
        }
    }

    fn closed(&self) -> Result<(), Halt> {
        if self.co.council.agents.is_closed() { Err(Halt::ShuttingDown) } else { Ok(()) }
    }

    /// Every step of the completion with its message.
    async fn steps(&self) -> Result<Vec<(Step, Option<Message>)>, Halt> {
        Ok(self.co.council.agents.db.steps_with_messages(self.x.id).await?)
    }
}

/// Drives completion `x` to its end, or as far as the daemon lets it.
pub async fn drive(co: &Arc<Coord>, x: Exchange, client: Option<ClientId>) -> Result<Completion, Halt> {
    let plan = Plan::from_exchange(&x).ok_or_else(|| Halt::Failed("its plan cannot be read".into()))?;
    let id = x.correlation_id.clone().unwrap_or_default();
    let (thread, config) =
        co.thread(&x.thread, x.path.as_deref()).await.map_err(|e| Halt::Failed(e.message().to_string()))?;
    let db = &co.council.agents.db;
    let question = db.message(x.thread.clone(), x.seq).await?;
    let seq = x.seq;
    let launch =
        Launch { thread, config, style: Style::Council, timeout: None, client, prompt: None, work: Default::default() };
    let place =
        Place { reply_to: Some(seq), round: Some(1), exchange: Some(seq), replaces: None, purpose: None, step: None };
    let mut d = Drive { co, x, plan, id, question, launch, place };

    let parts = answers(&mut d).await?;
    let answered: Vec<&Part> = parts.iter().filter(|x| x.status == PartStatus::Done).collect();
    let mut merged = None;
    if d.plan.aggregation == Aggregation::Merge && !answered.is_empty() {
        let body = answered.iter().map(|x| format!("**{}**:\n{}", x.member, x.text)).collect::<Vec<_>>().join("\n\n");
        let n = answered.len();
        let event = d.event("completion.merge", None, json!({}));
        let events = move |m: &Message| vec![Record { data: json!({"seq": m.seq, "contributors": n}), ..event }];
        let m = kd_step(&d, Purpose::Merge, body, events).await?;
        merged = Some(m.seq);
    }
    let mut extra_cost = 0.0;
    let mut tally = None;
    if d.plan.vote && answered.len() >= 2 {
        let (t, cost) = vote(&mut d, &answered).await?;
        extra_cost += cost;
        tally = Some(t);
    }
    let mut synthesis = None;
    if let Some(chair) = d.plan.chair.clone().filter(|_| d.plan.aggregation == Aggregation::Synthesize)
        && !answered.is_empty()
    {
        synthesis = synthesize(&d, &chair, &answered, tally.as_ref(), merged).await?;
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
    let done = Completion {
        id: d.id.clone(),
        thread: d.x.thread.clone(),
        seq,
        wait: d.plan.wait,
        aggregation: d.plan.aggregation,
        parts,
        merged,
        tally,
        synthesis,
        summary,
    };
    let result = serde_json::to_value(&done).map_err(|e| Halt::Failed(format!("its result: {e}")))?;
    let end = format!("the end of the completion {}", d.x.id);
    db.until_back(&end, || d.co.council.agents.is_closed(), |_| db.plan_done(d.x.id, Some(result.clone()))).await?;
    db.record(vec![d.event("completion.done", None, json!({"summary": done.summary}))]).await?;
    Ok(done)
}

/// The members' answers: the steps not over are asked (the late cancelled
/// at the deadline, the rest once the first is taken under `wait:
/// first`), then every part is read from its step.
async fn answers(d: &mut Drive<'_>) -> Result<Vec<Part>, Halt> {
    let db = &d.co.council.agents.db;
    let steps = d.steps().await?;
    let answer = |s: &Step| s.key.purpose == Purpose::Answer;
    let taken_first = d.plan.wait == Wait::First && steps.iter().any(|(s, _)| answer(s) && s.state == StepState::Done);
    let left = || steps.iter().filter(|(s, _)| answer(s) && !s.state.is_over()).map(|(s, _)| s.key.member.clone());
    let past = d.plan.deadline_ms.is_some_and(|at| at <= now_ms());
    let mut runs = Vec::new();
    if taken_first {
        db.cancel_pending_steps(d.x.id, Purpose::Answer, "the first answer was taken".into()).await?;
    } else if past {
        // Resumed after its deadline: whoever had not answered is late.
        fix_late(d, left().collect()).await?;
        db.cancel_pending_steps(d.x.id, Purpose::Answer, "timeout".into()).await?;
    } else {
        for member in d.plan.members.clone() {
            if let Some(run) = take_step(d.co, d.x.id, StepKey::answer(1, &member), &d.launch, d.place).await? {
                runs.push(run);
            }
        }
    }
    let left_ms = d.plan.deadline_ms.map(|at| Duration::from_millis(at.saturating_sub(now_ms()).max(0) as u64));
    let late = wait_for(&runs, d.plan.wait, left_ms).await;
    if !late.is_empty() {
        let members = runs.iter().filter(|r| late.contains(&r.id)).map(|r| r.member.clone()).collect();
        fix_late(d, members).await?;
        for r in runs.iter().filter(|r| late.contains(&r.id)) {
            r.stop(StopReason::Cancelled);
        }
    }
    for run in &runs {
        run.done().await;
    }
    d.closed()?;
    let steps = d.steps().await?;
    let mut parts = Vec::new();
    let mut events = Vec::new();
    for member in &d.plan.members {
        let Some((step, message)) = steps.iter().find(|(s, _)| answer(s) && &s.key.member == member) else {
            continue;
        };
        let part = part_of_step(step, message.as_ref(), d.plan.late.contains(member), d.plan.wait);
        // Events for what ended in this process only: a replay says
        // nothing twice.
        if let Some(run) = runs.iter().find(|r| &r.member == member) {
            let kind = match part.status {
                PartStatus::Timeout => "completion.timeout",
                PartStatus::Cancelled => "completion.cancelled",
                _ => "completion.result",
            };
            events.push(d.event(kind, Some(member), json!({"seq": part.seq, "status": part.status, "run": run.id})));
        }
        parts.push(part);
    }
    db.record(events).await?;
    Ok(parts)
}

/// Fixes the members whose answers came too late in the plan (before
/// their runs are stopped, so that a replay reports them so).
async fn fix_late(d: &mut Drive<'_>, members: Vec<String>) -> Result<(), Halt> {
    let fixed = d.co.council.agents.db.fix_choice(d.x.id, "late", json!(members)).await?;
    d.plan.late = serde_json::from_value(fixed).unwrap_or_default();
    Ok(())
}

/// The ballots of every member who answered, over labels drawn once, and
/// their tally written once; the tally and what the ballots cost.
async fn vote(d: &mut Drive<'_>, answered: &[&Part]) -> Result<(Tally, f64), Halt> {
    let v = Vote { co: d.co, x: d.x.id, round: 1, launch: &d.launch, place: d.place, question: &d.question.body };
    let labels = v.labels(answered).await?;
    d.plan.labels = Some(labels.clone());
    let (ballots, cost) = v.cast(&labels, answered).await?;
    // The chair, when there is one, breaks a tie its ballot can.
    let chair = d.plan.chair.clone().filter(|_| d.plan.aggregation == Aggregation::Synthesize);
    let mut t = count(labels, ballots, chair.as_deref());
    let body = tally_text(&t);
    let written = {
        let t = t.clone();
        let event = d.event("completion.vote", None, json!({}));
        move |m: &Message| {
            vec![Record {
                data: json!({"seq": m.seq, "winner": t.winner, "tie": t.tie, "scores": t.scores,
                             "labels": t.labels, "ballots": t.ballots}),
                ..event
            }]
        }
    };
    let m = kd_step(d, Purpose::Tally, body, written).await?;
    t.seq = Some(m.seq);
    Ok((t, cost))
}

/// Writes kd's own step `purpose` (a merge, a tally) once, with the
/// events made from its message; its message (as stored, on a replay).
async fn kd_step(
    d: &Drive<'_>,
    purpose: Purpose,
    body: String,
    events: impl FnOnce(&Message) -> Vec<Record> + Send + 'static,
) -> Result<Message, Halt> {
    let key = StepKey { round: 1, member: String::new(), purpose, cause: 0 };
    let wire = match purpose {
        Purpose::Merge => kd_proto::types::Purpose::Merge,
        _ => kd_proto::types::Purpose::Tally,
    };
    let m = kd_message(&d.x.thread, d.x.seq, body, &d.id, wire);
    match d.co.council.agents.db.kd_step(d.x.id, key, m, Box::new(events)).await? {
        KdStep::Written(m) | KdStep::Already(m) => Ok(m),
        KdStep::Ended(state) => Err(Halt::Failed(format!("the completion is {}", state.as_str()))),
    }
}

/// The chair's synthesis, asked once; its part.
async fn synthesize(
    d: &Drive<'_>,
    chair: &str,
    answered: &[&Part],
    tally: Option<&Tally>,
    merged: Option<u64>,
) -> Result<Option<Part>, Halt> {
    let prompt = synthesis_prompt(&d.question.body, answered, tally);
    let launch = Launch { prompt: Some(prompt), ..d.launch.clone() };
    // The chair answers the tally (or the merge) when there is one: its
    // answer is shown after it.
    let answers = tally.and_then(|t| t.seq).or(merged).or(Some(d.x.seq));
    let place = Place { purpose: Some(kd_proto::types::Purpose::Synthesis), reply_to: answers, ..d.place };
    let key = StepKey { round: 1, member: chair.to_string(), purpose: Purpose::Synthesis, cause: 0 };
    let run = take_step(d.co, d.x.id, key, &launch, place).await?;
    if let Some(run) = &run {
        run.done().await;
    }
    d.closed()?;
    let steps = d.steps().await?;
    let Some((step, message)) =
        steps.iter().find(|(s, _)| s.key.purpose == Purpose::Synthesis && s.key.member == chair)
    else {
        return Ok(None);
    };
    if step.state == StepState::Cancelled && message.is_none() {
        return Ok(None);
    }
    let part = part_of_step(step, message.as_ref(), false, Wait::All);
    if run.is_some() {
        let event = d.event("completion.synthesis", Some(chair), json!({"seq": part.seq, "status": part.status}));
        d.co.council.agents.db.record(vec![event]).await?;
    }
    Ok(Some(part))
}

/// Waits as `wait` says, `timeout` at most; returns the runs late at the
/// deadline (still running: the caller stops them). Under `wait: first`
/// the first good answer cancels the rest.
async fn wait_for(runs: &[Arc<Run>], wait: Wait, timeout: Option<Duration>) -> Vec<String> {
    if runs.is_empty() {
        return vec![];
    }
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
    loop {
        tokio::select! {
            done = rx.recv() => match done {
                Some(run) if wait == Wait::First && run.message().is_some_and(|m| m.kind == MessageKind::Agent) => {
                    for other in runs.iter().filter(|r| r.id != run.id) {
                        other.stop(StopReason::Cancelled);
                    }
                    return vec![];
                }
                Some(_) => {}
                None => return vec![],
            },
            _ = &mut until_deadline => {
                return runs.iter().filter(|r| r.is_in_flight()).map(|r| r.id.clone()).collect();
            }
        }
    }
}

/// A member's part as its step and message say: answered, late, cancelled
/// once the first answer was taken, or failed.
fn part_of_step(step: &Step, message: Option<&Message>, late: bool, wait: Wait) -> Part {
    let status = match (step.state, message.map(|m| m.kind)) {
        (StepState::Done, Some(MessageKind::Agent)) => PartStatus::Done,
        _ if late => PartStatus::Timeout,
        (StepState::Cancelled, _) if wait == Wait::First => PartStatus::Cancelled,
        _ => PartStatus::Error,
    };
    Part {
        member: step.key.member.clone(),
        status,
        seq: message.map(|m| m.seq),
        text: message.map(|m| m.body.clone()).unwrap_or_default(),
        cost_usd: message.and_then(|m| m.run.as_ref()).and_then(|r| r.cost_usd),
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::{Message, MessageKind, PartStatus, Wait};

    use super::part_of_step;
    use crate::db::exchanges::{Step, StepKey, StepState};

    fn step(state: StepState) -> Step {
        Step {
            id: 1,
            exchange: 1,
            key: StepKey::answer(1, "codex"),
            state,
            run_id: None,
            reply_to: None,
            backend_session: None,
            replaces_seq: None,
            message_seq: None,
            attempts: 1,
            reason: None,
        }
    }

    fn message(kind: MessageKind) -> Message {
        Message { kind, ..Message::new("t1", 7, "codex", "text") }
    }

    #[test]
    fn a_part_is_what_its_step_and_message_say() {
        let agent = message(MessageKind::Agent);
        let cut = message(MessageKind::Interrupted);
        let error = message(MessageKind::Error);
        let cases = [
            (StepState::Done, Some(&agent), false, Wait::All, PartStatus::Done),
            (StepState::Cancelled, Some(&cut), true, Wait::All, PartStatus::Timeout),
            (StepState::Cancelled, Some(&cut), false, Wait::First, PartStatus::Cancelled),
            (StepState::Cancelled, None, false, Wait::First, PartStatus::Cancelled),
            (StepState::Failed, Some(&error), false, Wait::All, PartStatus::Error),
            (StepState::Cancelled, Some(&cut), false, Wait::All, PartStatus::Error),
        ];
        for (state, m, late, wait, want) in cases {
            let part = part_of_step(&step(state), m, late, wait);
            assert_eq!(part.status, want, "{state:?} {late} {wait:?}");
            assert_eq!((part.seq, part.text.as_str()), (m.map(|m| m.seq), m.map_or("", |m| m.body.as_str())));
        }
    }
}
