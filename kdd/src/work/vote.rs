//! The vote over a best-of-N task's work (F-W4), journaled (F-J1): once
//! the council's driver has taken the task's rounds (it leaves the plan
//! to this vote), every member who changed something ranks the others'
//! diffs, anonymised as `kd ask --vote` ranks answers — its ballots steps
//! `(2, voter, Ballot)` under labels fixed once, the tally kd's own step
//! `(2, Tally)` written once — and the exchange's plan is done. A daemon
//! started again runs the council's replay, then this vote, over the same
//! journal: ballots given are not asked again.

use std::sync::Arc;

use kd_proto::types::{Part, PartStatus, Purpose, Style};
use kd_proto::work::Worktree;

use super::member_diff;
use super::review::{PROMPT_DIFF_BYTES, diff_text};
use crate::agent::registry::Place;
use crate::coord::Coord;
use crate::coord::completion::{Halt, Vote, count, kd_message, tally_text};
use crate::council::Launch;
use crate::db::exchanges::kd_step::KdStep;
use crate::db::exchanges::{ExchangeId, ExchangeState, Kind, Purpose as StepPurpose, StepKey};

/// The round the vote's steps are in (the task's answers are round 1).
const ROUND: u32 = 2;

/// Votes over the work of task `seq` of `thread` once the council's
/// driver of its exchange has returned.
pub fn after_rounds(co: &Arc<Coord>, thread: &str, seq: u64) {
    let ex = co.council.exchanges.current(thread).filter(|ex| ex.king == seq);
    let (co, thread) = (co.clone(), thread.to_string());
    tokio::spawn(async move {
        let x = match ex {
            Some(ex) => {
                ex.ended().await;
                ex.id
            }
            // Its driver has already returned.
            None => match co.council.agents.db.exchange_at(thread.clone(), seq, Kind::Work).await {
                Ok(Some(x)) => x,
                Ok(None) => return,
                Err(e) => return tracing::warn!(thread, "the vote over the work cannot start: {e}"),
            },
        };
        match drive(&co, x).await {
            Ok(()) | Err(Halt::ShuttingDown) => {}
            Err(Halt::Failed(why)) => tracing::warn!(thread, "the vote over the work stopped: {why}"),
        }
    });
}

/// The vote over exchange `x`'s work, as far as its journal says it is to
/// go: nothing when the exchange was stopped (superseded, cancelled) or the
/// daemon is stopping.
pub async fn drive(co: &Arc<Coord>, x: ExchangeId) -> Result<(), Halt> {
    let db = &co.council.agents.db;
    if co.council.agents.is_closed() {
        return Err(Halt::ShuttingDown);
    }
    let ex = db.exchange(x).await?;
    if ex.state != ExchangeState::Open {
        return Ok(());
    }
    let (thread, seq) = (ex.thread.clone(), ex.seq);
    // The ballots run as the work did: found on the task's PATH.
    let (t, config) =
        co.thread(&thread, ex.path.as_deref()).await.map_err(|e| Halt::Failed(e.message().to_string()))?;
    let task = db.message(thread.clone(), seq).await?.body;
    // Each diff is ranked as its last try left it, with its check's result.
    let trees = db.worktrees_of(thread.clone()).await?;
    let tries = trees.iter().map(|w| w.until_green).max().unwrap_or(0);
    let members: Vec<String> = trees.iter().map(|w| w.member.clone()).collect();
    super::check::settled(&co.council, &thread, super::check::settle_time(&config, &members, tries)).await;
    let trees = db.worktrees_of(thread.clone()).await?;
    let mut parts = Vec::new();
    let (offered, left_out) = offered(&trees);
    for w in offered {
        let d = member_diff(w, false, PROMPT_DIFF_BYTES as u64 * 4)
            .await
            .map_err(|e| Halt::Failed(format!("{}'s diff: {}", w.member, e.message())))?;
        parts.push(Part {
            member: w.member.clone(),
            status: PartStatus::Done,
            seq: None,
            text: super::check::with_diff(w, diff_text(&d, PROMPT_DIFF_BYTES)),
            cost_usd: None,
        });
    }
    let correlation = format!("work-vote-{seq}");
    let tally = StepKey { round: ROUND, member: String::new(), purpose: StepPurpose::Tally, cause: 0 };
    let mut body = if parts.len() < 2 {
        match left_out.len() {
            0 => format!("No vote over the work: {} of {} members changed anything.", parts.len(), trees.len()),
            n => format!(
                "No vote over the work: {} of {} members' work can be put to it ({n} left out, below).",
                parts.len(),
                trees.len()
            ),
        }
    } else {
        let answered: Vec<&Part> = parts.iter().collect();
        let launch = Launch {
            thread: t.clone(),
            config,
            style: Style::Council,
            timeout: None,
            client: None,
            prompt: None,
            work: Default::default(),
        };
        let question = format!(
            "{task}\n\n(Each response below is one member's implementation of this task, as the diff of its branch.)"
        );
        let place = Place { reply_to: Some(seq), round: Some(ROUND), exchange: Some(seq), ..Place::default() };
        let v = Vote { co, x, round: ROUND, launch: &launch, place, question: &question };
        let labels = v.labels(&answered).await?;
        let (ballots, _) = v.cast(&labels, &answered).await?;
        // No chair: a tie first places do not break is the King's.
        let tally = count(labels, ballots, None);
        let mut body = tally_text(&tally);
        match (&tally.winner, &tally.tie) {
            (Some(w), _) => {
                body.push_str(&format!("\n\n`kd accept {w}` merges the winner's work (`kd diff` shows it)."))
            }
            (None, Some(tie)) => {
                let diffs: Vec<String> = tie.members.iter().map(|m| format!("`kd diff {m}`")).collect();
                body.push_str(&format!(
                    "\n\n{} show the tied work; `kd accept NAME` merges the one you choose.",
                    diffs.join(", ")
                ));
            }
            (None, None) => {}
        }
        body
    };
    for note in left_out {
        body.push_str("\n\n");
        body.push_str(&note);
    }
    let message = kd_message(&t.id, seq, body, &correlation, Purpose::Tally);
    match db.kd_step(x, tally, message, Box::new(|_| vec![])).await? {
        KdStep::Written(_) | KdStep::Already(_) => {}
        KdStep::Ended(state) => return Err(Halt::Failed(format!("the exchange is {}", state.as_str()))),
    }
    db.until_back(&format!("the end of the vote {x}"), || co.council.agents.is_closed(), |_| db.plan_done(x, None))
        .await?;
    Ok(())
}

/// The work put to the vote — what a member changed and kd committed —
/// and a note for each member's work left out because its last run is not
/// committed (its branch, without that run's changes, is not the work the
/// member left). Work kd found tampered with is left out unsaid (its run
/// said it).
fn offered(trees: &[Worktree]) -> (Vec<&Worktree>, Vec<String>) {
    let mut notes = Vec::new();
    let mut offered = Vec::new();
    for w in trees.iter().filter(|w| w.state.takes_work()) {
        match &w.uncommitted {
            Some(why) => notes.push(format!(
                "{m}'s work is not put to the vote: its last run is not committed ({why}), so its branch is not \
                 what it left in {}. Ask {m} again (its next run's end commits it), then `kd diff {m} --thread {}`.",
                w.path,
                w.thread,
                m = w.member
            )),
            None if w.head != w.base => offered.push(w),
            None => {}
        }
    }
    (offered, notes)
}

#[cfg(test)]
mod tests {
    use kd_proto::work::{WorkState, Worktree};

    use super::offered;

    /// `member`'s worktree, its branch moved on from its base if `changed`.
    fn tree(member: &str, changed: bool, state: WorkState, uncommitted: Option<&str>) -> Worktree {
        let base = crate::db::fixtures::worktree(member, 0);
        let head = if changed { "c".repeat(40) } else { base.base.clone() };
        Worktree { head, state, uncommitted: uncommitted.map(str::to_string), ..base }
    }

    #[test]
    fn work_whose_last_run_is_not_committed_is_left_out_of_the_vote_and_said() {
        let trees = [
            tree("alpha", true, WorkState::Done, None),
            // Committed before, its last run (a fix) not: the branch is stale.
            tree("beta", true, WorkState::Done, Some("git add timed out")),
            tree("gamma", false, WorkState::Done, None),
            tree("delta", true, WorkState::Tampered, None),
            tree("omega", true, WorkState::Done, None),
        ];
        let (shown, notes) = offered(&trees);
        let names: Vec<&str> = shown.iter().map(|w| w.member.as_str()).collect();
        assert_eq!(names, ["alpha", "omega"]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("beta's work is not put to the vote") && notes[0].contains("git add timed out"));
    }
}
