//! The King's methods on members' work (`kd_proto::work`, F-W1..W6): the
//! parameters checked here, the work done by [`crate::work`]. An agent's
//! process may not call them (see [`super::confine`]).

use jsonrpsee::Extensions;
use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::comment::{Comment, ReviewSent};
use kd_proto::work::{Accepted, MemberDiff, PullRequest, RebaseOutcome, Rebased, WorkApiServer, WorkStarted, Worktree};

use super::error::invalid;
use super::{Rpc, validate};
use crate::client::ClientId;
use crate::work::review::Subject;
use crate::work::{self, comments, settle};

/// Longest task, in bytes: the King's message and every commit's.
const MAX_TASK_BYTES: usize = 64 << 10;

fn member(name: &str) -> RpcResult<()> {
    validate::addressees("member", std::slice::from_ref(&name.to_string()))
}

#[async_trait]
impl WorkApiServer for Rpc {
    async fn work_start(
        &self,
        ext: &Extensions,
        workspace: String,
        task: String,
        to: Option<Vec<String>>,
        vote: Option<bool>,
        path: Option<String>,
        until_green: Option<u32>,
    ) -> RpcResult<WorkStarted> {
        validate::workspace(&workspace)?;
        validate::search_path(path.as_deref())?;
        if task.trim().is_empty() {
            return Err(invalid("task is empty: say what the members should do"));
        }
        if task.len() > MAX_TASK_BYTES {
            return Err(invalid(format!("task is longer than {MAX_TASK_BYTES} bytes")));
        }
        if let Some(to) = &to {
            validate::addressees("to", to)?;
        }
        if until_green.is_some_and(|n| n > crate::config::work::MAX_FIX_ROUNDS) {
            return Err(invalid(format!("until_green is at most {}", crate::config::work::MAX_FIX_ROUNDS)));
        }
        let client = ext.get::<ClientId>().copied();
        let t = work::Task { workspace, task, to, vote: vote.unwrap_or(false), client, path, until_green };
        work::start(&self.d.coord, t).await
    }

    async fn work_list(&self, workspace: Option<String>, thread: Option<String>) -> RpcResult<Vec<Worktree>> {
        if let Some(ws) = &workspace {
            validate::workspace(ws)?;
        }
        if let Some(t) = &thread {
            validate::thread_id(t)?;
        }
        work::list(&self.d.db, workspace, thread).await
    }

    async fn work_diff(
        &self,
        thread: String,
        member: Option<String>,
        stat: Option<bool>,
        max_bytes: Option<u64>,
        highlight: Option<bool>,
        commits: Option<bool>,
    ) -> RpcResult<Vec<MemberDiff>> {
        validate::thread_id(&thread)?;
        if let Some(m) = &member {
            self::member(m)?;
        }
        let max = max_bytes.unwrap_or(work::PATCH_BYTES).min(work::PATCH_BYTES * 8);
        let wants = (highlight.unwrap_or(false), commits.unwrap_or(false));
        work::diff(&self.d.db, thread, member, stat.unwrap_or(false), max, wants).await
    }

    async fn work_review(
        &self,
        ext: &Extensions,
        thread: String,
        member: Option<String>,
        rev: Option<String>,
        to: Option<Vec<String>>,
        path: Option<String>,
    ) -> RpcResult<u64> {
        validate::thread_id(&thread)?;
        validate::search_path(path.as_deref())?;
        crate::council::runs_here(&self.d.db, &thread).await?;
        let subject = match (member, rev) {
            (Some(m), None) => {
                self::member(&m)?;
                Subject::Member(m)
            }
            (None, Some(r)) if !r.is_empty() && r.len() <= 256 && !r.contains('\0') => Subject::Rev(r),
            (None, Some(_)) => return Err(invalid("rev is not a usable git revision")),
            _ => return Err(invalid("name what to review: member (whose work) or rev (a git revision), not both")),
        };
        if let Some(to) = &to {
            validate::addressees("to", to)?;
        }
        work::review::review(&self.d.coord, &thread, subject, to, (ext.get::<ClientId>().copied(), path)).await
    }

    async fn work_accept(
        &self,
        thread: String,
        member: String,
        squash: Option<bool>,
        check: Option<bool>,
    ) -> RpcResult<Accepted> {
        validate::thread_id(&thread)?;
        self::member(&member)?;
        settle::accept(&self.d.db, &self.d.hub, &thread, &member, squash.unwrap_or(false), check.unwrap_or(false)).await
    }

    async fn work_reject(&self, thread: String, member: String) -> RpcResult<Worktree> {
        validate::thread_id(&thread)?;
        self::member(&member)?;
        settle::reject(&self.d.db, &self.d.hub, &thread, &member).await
    }

    async fn work_check(
        &self,
        _ext: &Extensions,
        thread: String,
        member: String,
        path: Option<String>,
    ) -> RpcResult<Worktree> {
        validate::thread_id(&thread)?;
        self::member(&member)?;
        validate::search_path(path.as_deref())?;
        crate::council::runs_here(&self.d.db, &thread).await?;
        self.d.checks.check_now(&thread, &member, path).await
    }

    async fn work_rebase(
        &self,
        ext: &Extensions,
        thread: String,
        member: String,
        path: Option<String>,
    ) -> RpcResult<Rebased> {
        validate::thread_id(&thread)?;
        self::member(&member)?;
        validate::search_path(path.as_deref())?;
        let asker = (ext.get::<ClientId>().copied(), path.clone());
        let rebased = work::rebase::rebase(&self.d.coord, &thread, &member, asker).await?;
        // A merge kd committed (not the member's run), or one whose base kd
        // recorded only now, is checked here; a member's resolving run is
        // checked at its end.
        if rebased.outcome != RebaseOutcome::Resolving && rebased.commit.is_some() {
            self.d.checks.after_change(&thread, &member, path).await;
        }
        Ok(rebased)
    }

    async fn work_pr(
        &self,
        thread: String,
        member: String,
        accept: Option<bool>,
        path: Option<String>,
    ) -> RpcResult<PullRequest> {
        validate::thread_id(&thread)?;
        self::member(&member)?;
        validate::search_path(path.as_deref())?;
        crate::council::runs_here(&self.d.db, &thread).await?;
        work::pr::pr(&self.d.coord, &thread, &member, accept.unwrap_or(false), path).await
    }

    async fn work_comment(
        &self,
        thread: String,
        member: String,
        path: String,
        line: u32,
        end_line: Option<u32>,
        body: String,
    ) -> RpcResult<Comment> {
        validate::thread_id(&thread)?;
        self::member(&member)?;
        if path.is_empty() || path.len() > 4096 || path.contains('\0') {
            return Err(invalid("path is not a file of the diff"));
        }
        if body.trim().is_empty() {
            return Err(invalid("the comment is empty: say what should change"));
        }
        if body.len() > comments::MAX_BODY {
            return Err(invalid(format!("the comment is longer than {} bytes", comments::MAX_BODY)));
        }
        let w = work::worktree(&self.d.db, &thread, &member).await?;
        let lines = (line, end_line.unwrap_or(line));
        comments::add(&self.d.db, &w, kd_proto::names::KING, &path, lines, &body).await
    }

    async fn work_comments(&self, thread: String, member: Option<String>) -> RpcResult<Vec<Comment>> {
        validate::thread_id(&thread)?;
        if let Some(m) = &member {
            self::member(m)?;
        }
        comments::list(&self.d.db, &thread, member.as_deref()).await
    }

    async fn work_send_review(
        &self,
        ext: &Extensions,
        thread: String,
        member: String,
        message: Option<String>,
        path: Option<String>,
    ) -> RpcResult<ReviewSent> {
        validate::thread_id(&thread)?;
        self::member(&member)?;
        validate::search_path(path.as_deref())?;
        if message.as_ref().is_some_and(|m| m.len() > MAX_TASK_BYTES) {
            return Err(invalid(format!("message is longer than {MAX_TASK_BYTES} bytes")));
        }
        crate::council::runs_here(&self.d.db, &thread).await?;
        comments::send(&self.d.coord, &thread, &member, message, (ext.get::<ClientId>().copied(), path)).await
    }

    async fn work_resolve_comment(&self, id: String) -> RpcResult<Comment> {
        if id.is_empty() || id.len() > 32 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(invalid("id is not a comment's id (kd comments lists them)"));
        }
        comments::resolve(&self.d.db, &id).await
    }
}
