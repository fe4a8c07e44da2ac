//! The member resolving the conflicts `kd rebase` left it ([`super`]):
//! asked in a King's message to it on the work thread, its runs followed,
//! then the merge concluded, the member asked again (once), or the merge
//! undone — and kd's word on the outcome written answering the first
//! request. Each request's exchange carries a [`Mark`] (its correlation
//! id), so that a restart of kdd that cut the member's run follows it
//! again ([`restarted`]): once the resumed run ended, or at once when
//! kdd did not resume it (its run then counts as stopped). Nothing is
//! looked at while a run of the member is in flight on the thread, and
//! the outcome is said once.

use std::path::Path;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::names::{KD, KING};
use kd_proto::types::MessageKind;
use kd_proto::work::Worktree;
use serde::{Deserialize, Serialize};

use super::{THEIR_DIFF_BYTES, TRIES, conclude, git_error, open, publish, short};
use crate::agent::spec::WorkRun;
use crate::agent::work::{Committed, at_once, commit};
use crate::client::ClientId;
use crate::coord::Coord;
use crate::coord::claims::Claim;
use crate::council::exchanges::Exchange as Live;
use crate::council::send;
use crate::db::exchanges::{Exchange, Purpose, StepState};
use crate::db::messages::{NewMessage, Page};
use crate::db::random_id;
use crate::git;

/// What a request's exchange carries, as its correlation id, for a
/// restart to follow the member again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Mark {
    member: String,
    /// The first request's seq (0: this one is the first).
    first: u64,
    /// Which request this is (1, then [`TRIES`] at most).
    attempt: u32,
    /// The King's branch and the commit of it merged in.
    from: String,
    onto: String,
    /// Tells two rebases of the same work onto the same commit apart (an
    /// exchange's correlation id is unique on its thread).
    nonce: String,
}

/// How a [`Mark`] begins.
const MARKED: &str = "kd-rebase ";

impl Mark {
    fn id(&self) -> String {
        format!("{MARKED}{}", serde_json::to_string(self).unwrap_or_default())
    }

    /// The mark of exchange `x`, when it is a rebase's request; its
    /// `first` filled in.
    pub(crate) fn of(x: &Exchange) -> Option<Mark> {
        let json = x.correlation_id.as_deref()?.strip_prefix(MARKED)?;
        let mut mark: Mark = serde_json::from_str(json).ok()?;
        if mark.first == 0 {
            mark.first = x.seq;
        }
        Some(mark)
    }
}

/// Whether exchange `x` is a rebase's request (what follows it says how
/// it ended).
pub(crate) fn is_request(x: &Exchange) -> bool {
    Mark::of(x).is_some()
}

/// The member whose resolving exchange `x` asks, when it is a rebase's
/// request.
pub(crate) fn member(x: &Exchange) -> Option<String> {
    Mark::of(x).map(|m| m.member)
}

/// Follows again the request whose exchange `x` a previous daemon left
/// open: once `live`, the exchange resuming it, ended — or, not resumed,
/// at once (its run then counts as stopped), saying first why (`said`).
pub(crate) async fn restarted(
    co: &Arc<Coord>,
    x: &Exchange,
    live: Option<Arc<Live>>,
    said: Option<String>,
    claim: Option<Claim>,
) {
    let Some(mark) = Mark::of(x) else { return };
    let Some(claim) = claim.or_else(|| co.rebasing.take(&x.thread, &mark.member)) else {
        tracing::info!(thread = x.thread, member = mark.member, "the resolving of a rebase is followed already");
        return;
    };
    let w = match super::worktree(&co.council.agents.db, &x.thread, &mark.member).await {
        Ok(w) => w,
        Err(e) => {
            let body = format!("kd could not follow {}'s resolving of the rebase again: {}", mark.member, e.message());
            return say(co, &x.thread, mark.first, body).await;
        }
    };
    tracing::info!(thread = x.thread, member = mark.member, "following the resolving of a rebase again");
    let waiting = Waiting { runs: Vec::new(), stopped: live.is_none(), exchange: live, said };
    tokio::spawn(follow(co.clone(), claim, w, mark, waiting, (None, x.path.clone())));
}

/// What the King's side changed in `files` since the member's branch left
/// it, cut to [`THEIR_DIFF_BYTES`].
async fn their_changes(w: &Worktree, onto: &str, files: &[String]) -> String {
    let repo = Path::new(&w.repo);
    let base = match git::git(repo, repo, &["merge-base", &w.head, onto], &[], 1024).await {
        Ok(out) if out.ok => out.text().trim().to_string(),
        _ => return String::new(),
    };
    let mut args: Vec<String> = ["diff", "--no-color", "--no-ext-diff", "--no-renames", &base, onto, "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(files.iter().map(|f| format!(":(literal){f}")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match git::git(repo, repo, &args, &[], THEIR_DIFF_BYTES).await {
        Ok(out) if out.ok => {
            let mut text = out.text().trim_end_matches('\u{FFFD}').to_string();
            if out.cut {
                text.push_str("\n… (cut: the rest is in git diff)");
            }
            text
        }
        _ => String::new(),
    }
}

/// Asks the member, in a King's message to it on the work thread, to
/// resolve the conflicts in `files` (the King's branch `from` at `onto`
/// merged in), then follows its run ([`follow`]), holding `claim`. The
/// message's seq.
pub(super) async fn ask(
    co: &Arc<Coord>,
    claim: Claim,
    w: &Worktree,
    (from, onto): (&str, &str),
    files: &[String],
    asker: (Option<ClientId>, Option<String>),
) -> Result<u64, ErrorObjectOwned> {
    let mut mark = Mark {
        member: w.member.clone(),
        first: 0,
        attempt: 1,
        from: from.into(),
        onto: onto.into(),
        nonce: random_id(8),
    };
    let (seq, runs) = request(co, w, &mark, files, asker.clone()).await?;
    mark.first = seq;
    let waiting = Waiting { runs, exchange: None, stopped: false, said: None };
    tokio::spawn(follow(co.clone(), claim, w.clone(), mark, waiting, asker));
    Ok(seq)
}

/// The King's message to the member asking it (the `mark.attempt`th time)
/// to resolve the conflicts in `files`: its seq and the member's runs.
async fn request(
    co: &Arc<Coord>,
    w: &Worktree,
    mark: &Mark,
    files: &[String],
    (client, path): (Option<ClientId>, Option<String>),
) -> Result<(u64, Vec<String>), ErrorObjectOwned> {
    let (from, onto) = (mark.from.as_str(), mark.onto.as_str());
    let list = |note: &dyn Fn(&str) -> Option<String>| {
        let line = |f: &String| match note(f) {
            Some(note) => format!("- {f}: {note}"),
            None => format!("- {f}"),
        };
        files.iter().map(line).collect::<Vec<_>>().join("\n")
    };
    let body = if mark.attempt == 1 {
        let theirs = their_changes(w, onto, files).await;
        let theirs = if theirs.is_empty() {
            String::new()
        } else {
            format!("\n\nWhat {from} changed in them since your work began:\n\n```diff\n{theirs}\n```")
        };
        // A conflict git wrote no marker for is told as what it is.
        let conflicts = open(w).await?.conflicts().await.map_err(git_error)?;
        let note = |f: &str| conflicts.iter().find(|c| c.path == f).and_then(|c| c.without_markers(from));
        let noted = files.iter().filter(|f| note(f).is_some()).count();
        let those = match noted {
            0 => "Those files in your worktree now hold git's conflict markers (`<<<<<<<`, `=======`, `>>>>>>>`). ",
            n if n == files.len() => "",
            _ => "The others in your worktree now hold git's conflict markers (`<<<<<<<`, `=======`, `>>>>>>>`). ",
        };
        format!(
            "Bring your work up to date: kd merged {} into your branch {}, and it conflicts in:\n\n{}\n\n\
             {those}Resolve each conflict so that both sides' changes work together, and remove every marker; \
             change nothing else. kd commits the merge when your run ends.{theirs}",
            kd_proto::work::named_commit(from, onto),
            w.branch,
            list(&note)
        )
    } else {
        format!(
            "Conflict markers are still in:\n\n{}\n\nResolve those conflicts and remove every marker \
             (`<<<<<<<`, `=======`, `>>>>>>>`): kd commits the merge of {from} only once none is left.",
            list(&|_| None)
        )
    };
    let req =
        send::Request { tag: Some(mark.id()), ..crate::work::to_member(&w.thread, &w.member, body, (client, path)) };
    let sent = send::send(&co.council, req).await?;
    Ok((sent.message.seq, sent.runs.iter().map(|r| r.run.id.clone()).collect()))
}

/// What became of the merge after the member's run.
enum After {
    /// kd's word on the outcome.
    Said(String),
    /// Markers are left in these files: the member is told again.
    Again(Vec<String>),
}

/// What [`follow`] waits on before it looks at the merge.
struct Waiting {
    /// The member's runs.
    runs: Vec<String>,
    /// The exchange a restart resumed: its end, and whether the member
    /// answered in it.
    exchange: Option<Arc<Live>>,
    /// The member's run was stopped (not asked again).
    stopped: bool,
    /// Why a restart did not resume the request, said before the outcome.
    said: Option<String>,
}

/// Follows the member's resolving runs: once each ended, the merge is
/// concluded (kd's commit at the run's end found no marker), or the member
/// is told again, or the merge is undone. kd says the outcome answering
/// the first request (`mark.first`). `_claim` is held until then.
async fn follow(
    co: Arc<Coord>,
    _claim: Claim,
    w: Worktree,
    mut mark: Mark,
    mut waiting: Waiting,
    asker: (Option<ClientId>, Option<String>),
) {
    let body = loop {
        let mut stopped = waiting.stopped;
        for id in &waiting.runs {
            let run = co.council.agents.runs.all().into_iter().find(|r| r.id == *id);
            if let Some(run) = run {
                run.done().await;
                stopped |= run.stop_reason().is_some();
            }
        }
        if let Some(ex) = &waiting.exchange {
            ex.ended().await;
            stopped |= !answered(&co, ex.id, &mark.member).await;
        }
        quiet(&co, &w).await;
        if co.council.agents.is_closed() {
            return;
        }
        let again = mark.attempt < TRIES && !stopped;
        match settle_after(&co, &w, &mark, again).await {
            Ok(After::Said(body)) => break body,
            Ok(After::Again(left)) => {
                mark.attempt += 1;
                match request(&co, &w, &mark, &left, asker.clone()).await {
                    Ok((_, runs)) => waiting = Waiting { runs, exchange: None, stopped: false, said: None },
                    Err(e) => break format!("kd could not ask {} again: {}", w.member, e.message()),
                }
            }
            Err(e) => break format!("kd could not bring {}'s work up to date: {}", w.member, e.message()),
        }
    };
    let body = match waiting.said {
        Some(why) => format!("{why}. {body}"),
        None => body,
    };
    say(&co, &w.thread, mark.first, body).await;
}

/// Whether `member` answered in exchange `x` (its answer's step done).
async fn answered(co: &Coord, x: crate::db::exchanges::ExchangeId, member: &str) -> bool {
    match co.council.agents.db.exchange_steps(x).await {
        Ok(steps) => steps
            .iter()
            .any(|s| s.key.member == member && s.key.purpose == Purpose::Answer && s.state == StepState::Done),
        Err(e) => {
            tracing::warn!("cannot read whether {member} answered: {e}");
            false
        }
    }
}

/// Returns once no exchange under way on the work's thread has a step of
/// its member and no run of the member is in flight there: nothing is
/// looked at, concluded or undone in a worktree a run works in (or is
/// about to).
async fn quiet(co: &Coord, w: &Worktree) {
    let c = &co.council;
    loop {
        if let Some(ex) = c.exchanges.current(&w.thread).filter(|ex| !ex.has_ended())
            && asks(co, ex.id, &w.member).await
        {
            ex.ended().await;
            continue;
        }
        let runs = c.agents.runs.list(Some(&w.thread));
        let Some(run) = runs.iter().find(|r| r.member == w.member) else { return };
        run.done().await;
    }
}

/// Whether exchange `x` asks `member`: a step of it, or its plan names it
/// among those who answer (a turn yet to come); an exchange whose plan
/// names no one (a hand-off, a completion, a retry) is taken to ask it.
async fn asks(co: &Coord, x: crate::db::exchanges::ExchangeId, member: &str) -> bool {
    let db = &co.council.agents.db;
    let (steps, plan) = match (db.exchange_steps(x).await, db.exchange(x).await) {
        (Ok(steps), Ok(x)) => (steps, x.plan),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!("cannot read whether {member} is asked: {e}");
            return true;
        }
    };
    steps.iter().any(|s| s.key.member == member) || named(&plan, member)
}

/// Whether `plan` names `member` among those who answer (a plan that is
/// not a journal of rounds is taken to).
fn named(plan: &serde_json::Value, member: &str) -> bool {
    match crate::council::exchange::Journal::from_plan(plan) {
        // Auto-round turns come only when there are rounds after the first.
        Some(j) => j.first.iter().any(|m| m == member) || j.rounds > 1 && j.turns.iter().any(|m| m == member),
        None => true,
    }
}

/// Writes kd's word on the rebase answering its first request `first` —
/// once: a word already there (a follower before a restart) stands.
async fn say(co: &Coord, thread: &str, first: u64, body: String) {
    let db = &co.council.agents.db;
    match said(co, thread, first).await {
        Ok(true) => return tracing::info!(thread, "the rebase's outcome was said already"),
        Ok(false) => {}
        Err(e) => tracing::warn!(thread, "cannot read whether the rebase's outcome was said: {e}"),
    }
    let m = NewMessage {
        reply_to: Some(first),
        correlation_id: Some(format!("rebase-{first}")),
        ..NewMessage::new(thread, KD, vec![KING.to_string()], MessageKind::System, body)
    };
    if let Err(e) = db.append_message(m).await {
        tracing::warn!(thread, "the rebase's outcome was not written: {e}");
    }
}

/// Whether kd's word on the rebase answering `first` is on `thread`
/// already (kd's replies to it read whole, the rest as an outline).
async fn said(co: &Coord, thread: &str, first: u64) -> Result<bool, crate::db::DbError> {
    let db = &co.council.agents.db;
    let after = db.messages(thread.to_string(), Page { bodies: false, ..Page::all_after(first) }).await?;
    for m in after.iter().filter(|m| m.from == KD && m.reply_to == Some(first)) {
        let whole = db.messages(thread.to_string(), Page::one(m.seq)).await?;
        if whole.iter().any(|m| m.is_kd_answer_to(first)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What became of the merge after the member's `mark.attempt`th run
/// (`again`: it may be asked again).
async fn settle_after(co: &Arc<Coord>, w: &Worktree, mark: &Mark, again: bool) -> Result<After, ErrorObjectOwned> {
    let (from, onto, attempt) = (mark.from.as_str(), mark.onto.as_str(), mark.attempt);
    let member = &w.member;
    let tree = open(w).await?;
    let resolved = |head: &str| {
        format!(
            "{member}'s work is up to date with {from}: {member} resolved the conflicts and kd committed the merge \
             ({}). `kd accept {member}` merges it.",
            short(head)
        )
    };
    if tree.merging().await.map_err(git_error)?.is_none() {
        let head = tree.head().await.map_err(git_error)?;
        let holds = git::is_ancestor(Path::new(&w.repo), onto, &head).await.map_err(git_error)?;
        return Ok(After::Said(if holds {
            resolved(&head)
        } else {
            format!("The merge of {from} into {member}'s work is no longer in progress: nothing was committed.")
        }));
    }
    let left = tree.unresolved().await.map_err(git_error)?;
    if left.is_empty() {
        // Resolved, but the run's commit did not conclude it (it failed).
        let head = conclude(co, w).await?;
        return Ok(After::Said(resolved(&head)));
    }
    if again {
        return Ok(After::Again(left));
    }
    let why = if attempt < TRIES { " (its run was stopped)".to_string() } else { format!(" after {attempt} tries") };
    let files = left.join(", ");
    if let Err(e) = tree.merge_abort().await {
        // A file the merge brought was changed since: left as it is,
        // nothing of the member's lost (and it reads as not committed).
        return Ok(After::Said(format!(
            "{member}'s work was not brought up to date: conflict markers remain in {files}{why}, and kd could not \
             undo the merge ({e}): it is left in progress in {}, {} as it was, every commit of {member}'s kept. kd \
             rebase {member} asks {member} again; or kd reject {member}.",
            w.path, w.branch
        )));
    }
    // What its runs changed besides the markers is the member's work:
    // committed as at a run's end, which also clears the word that its
    // last run was not committed (that was the merge's markers).
    let message = format!("{} (left when bringing it up to date failed)", w.task);
    let kept = match commit(&co.council.agents.db, &w.thread, member, &WorkRun::of(w), &message, &at_once).await {
        Ok(Committed::Commit(None)) => String::new(),
        Ok(Committed::Commit(Some(c))) => {
            format!(" What its runs changed besides is committed on top ({}).", short(&c))
        }
        Ok(Committed::Tampered(why)) => format!(" Its worktree is not as kd made it — {why}."),
        Ok(Committed::Unrecorded { why, .. }) => {
            format!(
                " kd committed what its runs changed besides, but could not record it: {why} (kd rebase {member} records it)."
            )
        }
        Err(why) => format!(" What its runs changed besides is not committed: {why}."),
    };
    publish(co, &w.thread, member).await;
    Ok(After::Said(format!(
        "{member}'s work was not brought up to date: conflict markers remain in {files}{why}. kd undid the merge: {} \
         is as it was, every commit of {member}'s kept.{kept} Merge it into yours yourself in {} (git merge \
         refs/heads/{}, resolving the conflicts there; kd accept {member} then finds it in your branch), or kd reject \
         {member}.",
        w.branch, w.repo, w.branch
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_names_who_answers_first_and_who_takes_turns_only_with_rounds_after_it() {
        use crate::council::exchange::Journal;
        use kd_proto::types::Mode;
        let plan = |rounds: u32| {
            let first = vec!["codex".to_string()];
            let turns = vec!["codex".to_string(), "claude".to_string()];
            let style = Default::default();
            Journal { mode: Mode::Sequential, rounds, first, turns, style, timeout_s: None, vote: false, beside: false }
                .to_plan()
        };
        assert!(named(&plan(1), "codex"), "asked first");
        assert!(!named(&plan(1), "claude"), "no round after the first: its turn never comes");
        assert!(named(&plan(3), "claude"), "its turn comes in round 2");
        assert!(!named(&plan(3), "gemini"), "not a member of it");
        assert!(named(&serde_json::json!({"route": "handoff"}), "claude"), "a plan of no rounds: taken to ask it");
    }
    use crate::db::exchanges::Kind;
    use kd_proto::exchange::ExchangeState;

    fn exchange(seq: u64, correlation_id: Option<String>) -> Exchange {
        Exchange {
            id: 1,
            thread: "t1".into(),
            seq,
            kind: Kind::Work,
            correlation_id,
            plan: serde_json::Value::Null,
            state: ExchangeState::Open,
            reason: None,
            plan_done: false,
            result: None,
            resumes: 0,
            created_at_ms: 0,
            path: None,
        }
    }

    #[test]
    fn a_requests_mark_reads_back_from_its_exchange_the_first_naming_itself() {
        let mark = Mark {
            member: "claude".into(),
            first: 0,
            attempt: 1,
            from: "feature/x y".into(),
            onto: "a".repeat(40),
            nonce: random_id(8),
        };
        let read = Mark::of(&exchange(7, Some(mark.id()))).expect("a rebase's request");
        assert_eq!(read, Mark { first: 7, ..mark.clone() }, "the first request is the exchange's own message");
        let again = Mark { first: 7, attempt: 2, ..mark };
        assert_eq!(Mark::of(&exchange(9, Some(again.id()))), Some(again), "a second request names the first");
    }

    #[test]
    fn an_exchange_of_anything_else_carries_no_mark() {
        assert_eq!(Mark::of(&exchange(3, None)), None);
        assert_eq!(Mark::of(&exchange(3, Some("fix-claude-1".into()))), None);
        assert_eq!(Mark::of(&exchange(3, Some(format!("{MARKED}not json")))), None);
    }
}
