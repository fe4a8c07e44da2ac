//! Line comments on a member's work, sent back as one review (issue 34
//! item 3): the King comments on lines of a member's diff — its new side at
//! the work's head, lines a hunk of it shows, context lines included
//! ([`add`]); a council reviewer's `PATH:LINE: text` lines become its
//! comments ([`from_review`]); every pending comment goes to the member as
//! one King's message, each with its file, lines and hunk, and the member
//! revises in its worktree — a work run like any other ([`send`]). A
//! comment is resolved when a later commit of the member changes its lines
//! (the old side of the diff from the comment's commit to the work's head:
//! kd looks as each work run of the member is committed,
//! [`super::after`], and again when comments are listed or sent,
//! [`refresh`]) or by the King ([`resolve`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::comment::{Comment, CommentState, ReviewSent};
use kd_proto::names::KING;
use kd_proto::work::{WorkState, Worktree};

use super::hunks::{self, FileDiff};
use super::{git_error, worktree};
use crate::client::ClientId;
use crate::coord::Coord;
use crate::council::send;
use crate::db::{Db, now_ms, random_id};
use crate::git;

/// Most bytes of a comment's text.
pub const MAX_BODY: usize = 8 << 10;
/// Most bytes of the hunk kept with a comment.
const HUNK_BYTES: usize = 4 << 10;
/// Lines of the hunk kept on each side of the comment's.
const HUNK_CONTEXT: u32 = 3;
/// Most bytes of one file's diff read.
const FILE_DIFF_BYTES: usize = 4 << 20;
/// Most bytes of the King's message carrying a review: the comments past
/// it stay pending for the next.
const REVIEW_BYTES: usize = 200 << 10;

/// The diff of one file from `from` to `to` with `context` lines of
/// context, parsed.
async fn file_diff(repo: &Path, from: &str, to: &str, path: &str, context: u32) -> Result<FileDiff, ErrorObjectOwned> {
    let u = format!("-U{context}");
    let args = ["--literal-pathspecs", "diff", "--no-color", "--no-ext-diff", "--no-renames", &u, from, to, "--", path];
    let out = git::git(repo, repo, &args, &[], FILE_DIFF_BYTES).await.map_err(git_error)?;
    if !out.ok {
        return Err(ErrorCode::Internal.error(format!("git diff {from} {to} -- {path}: {}", out.stderr)));
    }
    Ok(hunks::parse(&out.text()))
}

/// `work.comment`: the King's (or a reviewer's, `author`) pending comment
/// on lines `first..=last` of `path` in the member's diff at its head.
/// Refused, naming what is there, when the path is not in the diff or the
/// lines are not in one of its hunks (new side).
pub async fn add(
    db: &Db,
    w: &Worktree,
    author: &str,
    path: &str,
    (first, last): (u32, u32),
    body: &str,
) -> Result<Comment, ErrorObjectOwned> {
    let member = &w.member;
    if !w.state.takes_work() {
        return Err(ErrorCode::Conflict
            .error(format!("{member}'s work is {}: comments are for work the member still does", w.state.as_str())));
    }
    if first == 0 || last < first {
        return Err(ErrorCode::InvalidArgument.error(format!("lines {first}-{last}: say LINE or FIRST-LAST, from 1")));
    }
    let repo = Path::new(&w.repo);
    let files = git::diff_stat(repo, &w.base, &w.head).await.map_err(git_error)?;
    if files.is_empty() {
        return Err(ErrorCode::InvalidArgument
            .error(format!("{member}'s work changes nothing yet (kd diff {member}): there is no line to comment on")));
    }
    let Some(stat) = files.iter().find(|f| f.path == path) else {
        let names: Vec<&str> = files.iter().take(20).map(|f| f.path.as_str()).collect();
        let more = if files.len() > 20 { format!(" and {} more", files.len() - 20) } else { String::new() };
        return Err(ErrorCode::InvalidArgument
            .error(format!("{path} is not in {member}'s diff; its files: {}{more}", names.join(", "))));
    };
    if stat.binary {
        return Err(ErrorCode::InvalidArgument.error(format!("{path} is a binary file of {member}'s diff: no lines")));
    }
    let diff = file_diff(repo, &w.base, &w.head, path, HUNK_CONTEXT).await?;
    let Some(hunk) = diff.hunk_of(first, last) else {
        let lines = if first == last { format!("line {first}") } else { format!("lines {first}-{last}") };
        let shown = diff.ranges();
        let why = if shown.is_empty() {
            format!("{member}'s diff deletes {path}")
        } else {
            format!("{member}'s diff of {path} shows lines {shown} (new side)")
        };
        return Err(ErrorCode::InvalidArgument.error(format!("{lines} of {path} is not in the diff: {why}")));
    };
    let c = Comment {
        id: format!("c{}", random_id(7)),
        thread: w.thread.clone(),
        member: member.clone(),
        author: author.to_string(),
        path: path.to_string(),
        line: first,
        end_line: last,
        commit: w.head.clone(),
        body: body.to_string(),
        hunk: hunk.excerpt(first, last, HUNK_CONTEXT, HUNK_BYTES),
        state: CommentState::Pending,
        created_at_ms: now_ms(),
        sent_seq: None,
        sent_at_ms: None,
        resolved_by: None,
        resolved_at_ms: None,
    };
    db.add_comment(c.clone()).await?;
    Ok(c)
}

/// Resolves the open comments on the thread's work (of `member`) whose
/// lines a later commit of the member changed: the old side of the diff
/// from the comment's commit to the work's head.
pub async fn refresh(db: &Db, thread: &str, member: Option<&str>) -> Result<(), ErrorObjectOwned> {
    let open: Vec<Comment> = db
        .comments(thread.to_string(), member.map(Into::into))
        .await?
        .into_iter()
        .filter(|c| c.state != CommentState::Resolved)
        .collect();
    let mut trees: HashMap<String, Option<Worktree>> = HashMap::new();
    let mut diffs: HashMap<(String, String), Option<FileDiff>> = HashMap::new();
    for c in open {
        if !trees.contains_key(&c.member) {
            let w = db.worktree(thread.to_string(), c.member.clone()).await?;
            trees.insert(c.member.clone(), w);
        }
        let Some(Some(w)) = trees.get(&c.member) else { continue };
        if w.head == c.commit {
            continue;
        }
        let key = (c.commit.clone(), c.path.clone());
        if !diffs.contains_key(&key) {
            let d = match file_diff(Path::new(&w.repo), &c.commit, &w.head, &c.path, 0).await {
                Ok(d) => Some(d),
                Err(e) => {
                    tracing::debug!("comment {}: no diff from {} to {}: {}", c.id, c.commit, w.head, e.message());
                    None
                }
            };
            diffs.insert(key.clone(), d);
        }
        if diffs.get(&key).and_then(Option::as_ref).is_some_and(|d| d.changes_old(c.line, c.end_line)) {
            db.resolve_comment(c.id.clone(), Some(w.head.clone()), now_ms()).await?;
        }
    }
    Ok(())
}

/// `work.comments`: the comments on the thread's work (of `member`),
/// oldest first, those a later commit resolved said so.
pub async fn list(db: &Db, thread: &str, member: Option<&str>) -> Result<Vec<Comment>, ErrorObjectOwned> {
    db.thread(thread.to_string()).await?;
    if let Some(m) = member {
        worktree(db, thread, m).await?;
    }
    refresh(db, thread, member).await?;
    Ok(db.comments(thread.to_string(), member.map(Into::into)).await?)
}

/// `work.resolve_comment`: the King resolves a comment (one resolved
/// already stays as it was).
pub async fn resolve(db: &Db, id: &str) -> Result<Comment, ErrorObjectOwned> {
    Ok(db.resolve_comment(id.to_string(), None, now_ms()).await?)
}

/// The King's message carrying `comments`: the King's own words first,
/// then each comment with its file, lines, author and hunk.
pub fn review_message(member: &str, message: Option<&str>, comments: &[Comment]) -> String {
    let n = comments.len();
    let mut out = format!(
        "Review of your work, {member}: {n} comment{} on your diff. Revise your work in your worktree to address \
         each; kd commits it as usual.\n",
        if n == 1 { "" } else { "s" }
    );
    if let Some(m) = message.map(str::trim).filter(|m| !m.is_empty()) {
        out.push_str(&format!("\n{m}\n"));
    }
    for (i, c) in comments.iter().enumerate() {
        let by = if c.author == KING { String::new() } else { format!(" (from {}'s review)", c.author) };
        let lines =
            if c.end_line > c.line { format!("lines {}-{}", c.line, c.end_line) } else { format!("line {}", c.line) };
        out.push_str(&format!(
            "\n{}. {} ({lines}, at commit {}){by}:\n{}\n\n```diff\n{}```\n",
            i + 1,
            c.location(),
            kd_proto::work::short_commit(&c.commit),
            c.body.trim_end(),
            c.hunk
        ));
    }
    out
}

/// `work.send_review`: every pending comment on the member's work (those
/// that fit one message) as one King's message to the member, which
/// revises in its worktree; the comments become `sent`.
pub async fn send(
    co: &Arc<Coord>,
    thread: &str,
    member: &str,
    message: Option<String>,
    (client, path): (Option<ClientId>, Option<String>),
) -> Result<ReviewSent, ErrorObjectOwned> {
    let db = &co.council.agents.db;
    let w = worktree(db, thread, member).await?;
    match w.state {
        WorkState::Working => {
            return Err(
                ErrorCode::Conflict.error(format!("{member} is still working: send the review once its run ended"))
            );
        }
        s if !s.takes_work() => {
            return Err(
                ErrorCode::Conflict.error(format!("{member}'s work is {}: there is no work to revise", s.as_str()))
            );
        }
        _ => {}
    }
    refresh(db, thread, Some(member)).await?;
    let pending: Vec<Comment> = db
        .comments(thread.to_string(), Some(member.to_string()))
        .await?
        .into_iter()
        .filter(|c| c.state == CommentState::Pending)
        .collect();
    if pending.is_empty() {
        return Err(ErrorCode::InvalidArgument.error(format!(
            "no pending comments on {member}'s work: kd comment {member} PATH:LINE \"TEXT\" adds one"
        )));
    }
    // As many as fit one message, oldest first.
    let mut going: Vec<Comment> = Vec::new();
    for c in pending {
        going.push(c);
        if going.len() > 1 && review_message(member, message.as_deref(), &going).len() > REVIEW_BYTES {
            going.pop();
            break;
        }
    }
    let body = review_message(member, message.as_deref(), &going);
    let req = super::to_member(thread, member, body, (client, path));
    let sent = send::send(&co.council, req).await?;
    let ids = going.iter().map(|c| c.id.clone()).collect();
    let comments = db.send_comments(ids, sent.message.seq, now_ms()).await?;
    Ok(ReviewSent { seq: sent.message.seq, comments, runs: sent.runs.iter().map(|r| r.run.id.clone()).collect() })
}

/// A council reviewer's `PATH:LINE: text` lines on the member's work `w`,
/// recorded as its comments; returns how many were recorded and the
/// locations refused (not in the diff).
pub async fn from_review(db: &Db, w: &Worktree, reviewer: &str, answer: &str) -> (usize, Vec<String>) {
    let (mut recorded, mut skipped) = (0, Vec::new());
    for (path, first, last, text) in hunks::review_lines(answer).into_iter().take(100) {
        let text: String = text.chars().take(MAX_BODY).collect();
        match add(db, w, reviewer, &path, (first, last), &text).await {
            Ok(_) => recorded += 1,
            Err(e) => {
                tracing::debug!("{reviewer}'s comment on {path}:{first} is not recorded: {}", e.message());
                skipped.push(if first == last { format!("{path}:{first}") } else { format!("{path}:{first}-{last}") });
            }
        }
    }
    (recorded, skipped)
}

/// What kd says of a reviewer's recorded comments in the review's outcome
/// (nothing when it wrote none).
pub fn noted(reviewer: &str, recorded: usize, skipped: &[String]) -> String {
    let mut out = String::new();
    if recorded > 0 {
        out.push_str(&format!(
            " {recorded} line comment{} from {reviewer} recorded.",
            if recorded == 1 { "" } else { "s" }
        ));
    }
    if !skipped.is_empty() {
        out.push_str(&format!(" Not in the diff, not recorded: {} ({reviewer}).", skipped.join(", ")));
    }
    out
}
