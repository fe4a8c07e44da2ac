//! The council judges the work (F-W4): reviewers are given a member's diff
//! and each answers with a verdict — approve or request changes, with its
//! reasons ([`review`]); after a best-of-N task every member ranks the
//! others' diffs, anonymised as `Response A`, `Response B`, … as `kd ask
//! --vote` ranks answers, and the tally names the winner ([`super::vote`]).
//! Reviews and ballots advise: their runs have a prompt of their own, so
//! they run read-only, never in a worktree.

use std::path::Path;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::KING;
use kd_proto::types::{MessageKind, Purpose, Style};
use kd_proto::work::{MemberDiff, WorkState, Worktree};

use super::{git_error, member_diff, worktree};
use crate::agent::registry::{Claim, Place};
use crate::client::ClientId;
use crate::coord::completion::kd_message;
use crate::coord::{Coord, check_members};
use crate::council::Launch;
use crate::db::messages::NewMessage;
use crate::git;

/// Most bytes of one diff put in a reviewer's or voter's prompt; past it
/// the diff is summarised by file, with the biggest hunks kept.
pub const PROMPT_DIFF_BYTES: usize = 48 << 10;

/// A diff as a reviewer reads it: the stat, then the patch, or — when the
/// patch is over `max` — the stat and the largest files' hunks that fit.
pub fn diff_text(d: &MemberDiff, max: usize) -> String {
    let (added, removed): (u64, u64) = d.files.iter().fold((0, 0), |(a, r), f| (a + f.added, r + f.removed));
    let mut out = format!("{} changed, +{added} −{removed}\n", files(d.files.len()));
    for f in &d.files {
        let counts = if f.binary { "binary".to_string() } else { format!("+{} −{}", f.added, f.removed) };
        out.push_str(&format!("  {}  {counts}\n", f.path));
    }
    let patch = d.patch.as_deref().unwrap_or_default();
    if patch.len() + out.len() <= max && !d.truncated {
        out.push('\n');
        out.push_str(patch);
        return out;
    }
    // Too large: the biggest files' sections first, as many as fit.
    let mut sections: Vec<&str> = split_files(patch);
    sections.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.push_str("\nThe diff is too large to show whole; the largest files' changes follow.\n");
    for s in sections {
        if out.len() + s.len() > max {
            continue;
        }
        out.push('\n');
        out.push_str(s);
    }
    out
}

/// A patch cut at each `diff --git` line.
fn split_files(patch: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = patch.match_indices("\ndiff --git ").map(|(i, _)| i + 1).collect();
    if patch.starts_with("diff --git ") {
        starts.insert(0, 0);
    }
    let mut out = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(patch.len());
        out.push(&patch[s..end]);
    }
    out
}

/// The reviewers' prompt: what was asked (`what`), then the diff.
fn review_prompt(what: &str, diff: &str) -> String {
    format!(
        "[Review]\n{what}\n\n{diff}\n\n---\nReview it: is it correct, complete, and well made? Say what is wrong \
         and what should change; a remark on particular lines goes on a line of its own as `PATH:LINE: remark` (or \
         `PATH:FIRST-LAST: remark`), the lines of the changed file. End with your verdict on a line of its own, \
         exactly one of:\n\nVERDICT: APPROVE\nVERDICT: REQUEST CHANGES"
    )
}

/// A reviewer's verdict: what follows the last `VERDICT:` of its answer,
/// wherever it is on its line, Markdown emphasis (`**`, `_`, `` ` ``)
/// ignored, as models write it.
pub fn verdict(text: &str) -> Option<bool> {
    let plain: String = text.chars().filter(|c| !matches!(c, '*' | '_' | '`')).collect::<String>().to_ascii_uppercase();
    let at = plain.rfind("VERDICT:")?;
    let v = plain[at + "VERDICT:".len()..].trim_start();
    if v.starts_with("APPROVE") {
        Some(true)
    } else if v.starts_with("REQUEST") {
        Some(false)
    } else {
        None
    }
}

/// What is reviewed.
pub enum Subject {
    /// A member's work on the thread.
    Member(String),
    /// A git revision of the thread's workspace.
    Rev(String),
}

/// `work.review`: the King's message asking `to` (default: every member
/// but the author) to review a diff; each reviewer answers it with a
/// verdict, and once all answered kd says what they decided. Returns the
/// request's seq.
pub async fn review(
    co: &Arc<Coord>,
    thread: &str,
    subject: Subject,
    to: Option<Vec<String>>,
    (client, path): (Option<ClientId>, Option<String>),
) -> Result<u64, ErrorObjectOwned> {
    let (t, config) = co.thread(thread, path.as_deref()).await?;
    let db = &co.council.agents.db;
    // A member's work reviewed: its reviewers' `PATH:LINE: text` lines
    // become their comments on it (`super::comments`).
    let mut commented: Option<Worktree> = None;
    let (d, name, what, author) = match subject {
        Subject::Member(member) => {
            let w = worktree(db, thread, &member).await?;
            commented = Some(w.clone());
            if w.state == WorkState::Working {
                return Err(
                    ErrorCode::Conflict.error(format!("{member} is still working: review its work once its run ended"))
                );
            }
            // Its branch lacks the last run's changes: a review of it
            // would judge work the member has moved on from.
            super::settle::refuse_uncommitted(&w, "reviewing", "Nothing was asked")?;
            let d = member_diff(&w, false, PROMPT_DIFF_BYTES as u64 * 4).await?;
            let check = super::check::prompt_text(&w).map(|c| format!("\n\n{c}")).unwrap_or_default();
            let what = format!(
                "The King gave {member} this task:\n\n{}\n\n{member} did it on branch {}.{check}\n\nHere is its diff \
                 from {}:",
                w.task,
                w.branch,
                short(&w.base)
            );
            (d, format!("{member}'s work"), what, Some(member))
        }
        Subject::Rev(rev) => {
            let repo = git::top(Path::new(&t.workspace)).await.map_err(git_error)?;
            let head = git::commit_of(&repo, &rev).await.map_err(git_error)?.ok_or_else(|| {
                ErrorCode::InvalidArgument
                    .error(format!("{rev} names no commit of {} (nor a member with work here)", repo.display()))
            })?;
            let base = git::review_base(&repo, &head).await.map_err(git_error)?;
            let w = Worktree {
                thread: t.id.clone(),
                member: rev.clone(),
                task: String::new(),
                repo: repo.display().to_string(),
                path: repo.display().to_string(),
                branch: rev.clone(),
                base: base.clone(),
                head: head.clone(),
                state: WorkState::Done,
                files: 0,
                added: 0,
                removed: 0,
                removed_at_ms: None,
                created_at_ms: 0,
                last_run: None,
                check: None,
                until_green: 0,
                fixes: 0,
                shipped: None,
                uncommitted: None,
            };
            let d = member_diff(&w, false, PROMPT_DIFF_BYTES as u64 * 4).await?;
            let what =
                format!("The King asks for a review of {rev} ({}), its diff from {}:", short(&head), short(&base));
            (d, rev, what, None)
        }
    };
    let reviewers: Vec<String> = match to {
        Some(to) if !to.is_empty() => {
            check_members(&config, &to, false)?;
            config.council.members.iter().filter(|m| to.contains(m)).cloned().collect()
        }
        _ => config.council.members.iter().filter(|m| Some(*m) != author.as_ref()).cloned().collect(),
    };
    if reviewers.is_empty() {
        return Err(ErrorCode::InvalidArgument.error("no reviewers: name them with --to"));
    }
    if d.files.is_empty() {
        return Err(ErrorCode::Conflict.error(format!("{name} changes nothing: there is nothing to review")));
    }
    let body = format!("Review {name} ({} changed).", files(d.files.len()));
    let request = db.append_message(NewMessage::new(&t.id, KING, reviewers.clone(), MessageKind::King, body)).await?;
    let launch = Launch {
        thread: t.clone(),
        config,
        style: Style::Council,
        timeout: None,
        client,
        prompt: Some(review_prompt(&what, &diff_text(&d, PROMPT_DIFF_BYTES))),
        work: Default::default(),
    };
    let place = Place { reply_to: Some(request.seq), round: Some(1), exchange: Some(request.seq), ..Place::default() };
    let runs: Vec<_> =
        reviewers.iter().filter_map(|r| launch.start(&co.council, r, place).map(Claim::into_run)).collect();
    let (co, seq) = (co.clone(), request.seq);
    tokio::spawn(async move {
        let (mut approve, mut changes, mut silent) = (Vec::new(), Vec::new(), Vec::new());
        let mut noted = Vec::new();
        for run in runs {
            run.done().await;
            let answer = run.message().filter(|m| m.kind == MessageKind::Agent);
            if let (Some(w), Some(m)) = (&commented, &answer) {
                let (n, skipped) = super::comments::from_review(&co.council.agents.db, w, &run.member, &m.body).await;
                noted.push(super::comments::noted(&run.member, n, &skipped));
            }
            let said = answer.and_then(|m| verdict(&m.body));
            match said {
                Some(true) => approve.push(run.member.clone()),
                Some(false) => changes.push(run.member.clone()),
                None => silent.push(run.member.clone()),
            }
        }
        let names = |v: &[String]| if v.is_empty() { String::new() } else { format!(" ({})", v.join(", ")) };
        let mut body = format!(
            "Review of {name}: {} approve{}, {} request changes{}.",
            approve.len(),
            names(&approve),
            changes.len(),
            names(&changes)
        );
        if !silent.is_empty() {
            body.push_str(&format!(" No verdict from {}.", silent.join(", ")));
        }
        body.push_str(&noted.concat());
        if let Some(w) = commented.as_ref().filter(|_| noted.iter().any(|n| !n.is_empty())) {
            body.push_str(&advice(&w.member));
        }
        let message = kd_message(&t.id, seq, body, &format!("review-{seq}"), Purpose::Merge);
        if let Err(e) = co.council.agents.db.append_message(message).await {
            tracing::warn!("the review's outcome was not written: {e}");
        }
    });
    Ok(request.seq)
}

/// The way on a review's outcome names when reviewers noted lines: for
/// the King at a terminal (a pull request's body leaves it out).
pub fn advice(member: &str) -> String {
    format!(" kd comments {member} lists them; kd review --send {member} sends them.")
}

/// `1 file`, `3 files`.
fn files(n: usize) -> String {
    if n == 1 { "1 file".into() } else { format!("{n} files") }
}

use kd_proto::work::short_commit as short;

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::work::FileStat;

    #[test]
    fn verdicts_are_read_from_the_last_verdict_line() {
        assert_eq!(verdict("Looks good.\nVERDICT: APPROVE"), Some(true));
        assert_eq!(verdict("verdict: request changes — the test fails"), Some(false));
        assert_eq!(verdict("VERDICT: APPROVE\nOn second thought:\nVERDICT: REQUEST CHANGES"), Some(false));
        assert_eq!(verdict("no verdict here"), None);
        assert_eq!(verdict("Missing tests.\n\n**VERDICT: REQUEST CHANGES**"), Some(false), "bold, as models write it");
        assert_eq!(verdict("Missing tests. VERDICT: REQUEST CHANGES"), Some(false), "inline");
        assert_eq!(verdict("_Verdict:_ `approve`"), Some(true));
        assert_eq!(verdict("VERDICT: maybe"), None);
    }

    fn diff(patch: &str, files: &[(&str, u64)]) -> MemberDiff {
        MemberDiff {
            member: "m".into(),
            branch: "kd/t/m".into(),
            base: "b".into(),
            head: "h".into(),
            state: WorkState::Done,
            files: files
                .iter()
                .map(|(p, a)| FileStat { path: p.to_string(), added: *a, removed: 0, binary: false })
                .collect(),
            patch: Some(patch.into()),
            truncated: false,
            check: None,
            highlighted: None,
            commits: None,
        }
    }

    #[test]
    fn a_small_diff_is_given_whole_and_a_large_one_by_its_biggest_files() {
        let small = diff("diff --git a/x b/x\n+1\n", &[("x", 1)]);
        let text = diff_text(&small, 1000);
        assert!(text.starts_with("1 file changed, +1 −0\n  x  +1 −0\n") && text.ends_with("+1\n"), "{text}");
        let big_file = format!("diff --git a/big b/big\n{}", "+line\n".repeat(100));
        let patch = format!("diff --git a/a b/a\n+a\n{big_file}diff --git a/c b/c\n+c\n");
        let large = diff(&patch, &[("a", 1), ("big", 100), ("c", 1)]);
        let text = diff_text(&large, 300);
        assert!(text.contains("too large to show whole"), "{text}");
        assert!(text.contains("diff --git a/a b/a") && text.contains("diff --git a/c b/c"), "{text}");
        assert!(!text.contains("diff --git a/big"), "the biggest that does not fit is left out: {text}");
        assert!(text.len() <= 300 + 100, "{}", text.len());
    }
}
