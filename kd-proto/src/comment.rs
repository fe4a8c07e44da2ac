//! Line comments on a member's work (issue 34): the King — or a council
//! reviewer, whose `PATH:LINE: text` lines kd records — comments on lines
//! of a member's diff (its new side); the pending comments go to the
//! member as one King's message (`work.send_review`), and the member
//! revises in its worktree. A comment is resolved when a later commit of
//! the member changes its lines, or by the King. The methods are
//! `WorkApi`'s (`work.comment`, `work.comments`, `work.send_review`,
//! `work.resolve_comment`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a comment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommentState {
    /// Not sent to the member yet.
    Pending,
    /// Sent to the member in a review (`work.send_review`).
    Sent,
    /// A later commit of the member changed its lines, or the King
    /// resolved it.
    Resolved,
}

impl CommentState {
    pub fn as_str(self) -> &'static str {
        match self {
            CommentState::Pending => "pending",
            CommentState::Sent => "sent",
            CommentState::Resolved => "resolved",
        }
    }

    pub fn parse(s: &str) -> Option<CommentState> {
        Some(match s {
            "pending" => CommentState::Pending,
            "sent" => CommentState::Sent,
            "resolved" => CommentState::Resolved,
            _ => return None,
        })
    }
}

/// One comment on lines of a member's diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Comment {
    pub id: String,
    /// The work thread, and whose work the comment is on.
    pub thread: String,
    pub member: String,
    /// Who wrote it: `king`, or the reviewer member whose review it came
    /// from.
    pub author: String,
    /// The file, as in the diff (relative to the repository's top).
    pub path: String,
    /// The first and last line commented on (1-based, the new side of the
    /// diff at `commit`; equal for one line).
    pub line: u32,
    pub end_line: u32,
    /// The member's commit (the work's head) the comment was made on.
    pub commit: String,
    pub body: String,
    /// The diff's lines around the comment at `commit`: the hunk's header
    /// and the hunk's lines near the comment.
    pub hunk: String,
    pub state: CommentState,
    pub created_at_ms: i64,
    /// The King's message it was sent in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_seq: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at_ms: Option<i64>,
    /// The member's commit that changed its lines (none when the King
    /// resolved it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at_ms: Option<i64>,
}

impl Comment {
    /// `src/a.rs:12` or `src/a.rs:12-14`.
    pub fn location(&self) -> String {
        if self.end_line > self.line {
            format!("{}:{}-{}", self.path, self.line, self.end_line)
        } else {
            format!("{}:{}", self.path, self.line)
        }
    }
}

/// What `work.send_review` sent.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReviewSent {
    /// The King's message carrying the comments.
    pub seq: u64,
    /// The comments it carried, now `sent`.
    pub comments: Vec<Comment>,
    /// The member's run revising its work (its id).
    pub runs: Vec<String>,
}
