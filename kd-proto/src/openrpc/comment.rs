//! Line comments on members' work (issue 34) in the OpenRPC document: the
//! King's comments on lines of a member's diff, sent back as one review.

use super::Builder;
use crate::comment::{Comment, ReviewSent};
use crate::error::ErrorCode::*;

pub(super) fn methods(b: &mut Builder) {
    b.method::<Comment>(
        "work.comment",
        "comment",
        "Add the King's pending comment on lines of a member's diff: the new side of base..head (the work's last \
         commit), lines one hunk of that diff shows (added or context lines). Refused (invalid_argument) when the \
         path is not in the diff (the diff's files named) or the lines are not in one hunk (the hunks' new-side \
         line ranges named); conflict when the work is accepted, rejected, superseded or tampered. The comment \
         records the commit it was made on and the hunk around it.",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", true, "whose work")
        .param::<String>("path", true, "the file, as the diff names it (relative to the repository's top)")
        .param::<u32>("line", true, "the first line (1-based, new side)")
        .param::<u32>("end_line", false, "the last line (default: line)")
        .param::<String>("body", true, "the comment (at most 8 KiB)")
        .errors(&[InvalidArgument, NotFound, Conflict]);
    b.method::<Vec<Comment>>(
        "work.comments",
        "comments",
        "The comments on a work thread's work (of one member), oldest first: pending, sent (with the King's message \
         that carried them) or resolved. A comment whose lines a later commit of the member changed (the old side \
         of the diff from its commit to the work's head) is resolved as it is listed.",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", false, "only this member's work")
        .errors(&[InvalidArgument, NotFound]);
    b.method::<ReviewSent>(
        "work.send_review",
        "sent",
        "Send every pending comment on a member's work as one King's message to it (the King's own message first, \
         then each comment with its file, lines and hunk); the member revises in its worktree — a work run like any \
         other, committed when it ends. The comments become sent. Refused when there is none pending \
         (invalid_argument), while the member works or when its work is settled (conflict).",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", true, "whose work")
        .param::<String>("message", false, "the King's words before the comments")
        .path_param()
        .errors(&[InvalidArgument, NotFound, Conflict]);
    b.method::<Comment>(
        "work.resolve_comment",
        "comment",
        "Mark a comment resolved by the King (one resolved already is returned as it is).",
    );
    b.param::<String>("id", true, "the comment's id (work.comments lists them)").errors(&[InvalidArgument, NotFound]);
}
