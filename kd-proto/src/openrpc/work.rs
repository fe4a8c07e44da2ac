//! Members' work (F-W1..W6) in the OpenRPC document: the King's methods on
//! the worktrees members implement a task in.

use super::Builder;
use crate::error::ErrorCode::*;
use crate::work::{Accepted, MemberDiff, WorkStarted, Worktree};

pub(super) fn methods(b: &mut Builder) {
    b.method::<WorkStarted>(
        "work.start",
        "started",
        "Give a task to members, each in a git worktree of its own: a new branch thread of the workspace's trunk \
         titled with the task; for each member a worktree of the King's HEAD on branch kd/<thread>/<member> under \
         the data directory; the King's message giving the task, which each member answers by doing it, run \
         writable in its worktree and nowhere else. kd commits what a member changed when each of its runs ends. \
         With vote, once every run ended the members rank the others' diffs, anonymised, each with its check's \
         result, and a tally names the winner. With work.check configured, the check runs in the worktree after \
         each commit; with until_green, a member whose check fails is sent back to fix it.",
    );
    b.param::<String>(
        "workspace",
        true,
        "the King's own tree (not a member's worktree): a directory of a git repository with a commit",
    )
    .param::<String>("task", true, "what to do, verbatim (at most 64 KiB)")
    .param::<Vec<String>>("to", false, "members (default: every member)")
    .param::<bool>("vote", false, "best of N: the members rank the diffs once all are done (two members at least)")
    .path_param()
    .param::<u32>(
        "until_green",
        false,
        "fix until green: a member whose check (work.check) does not pass is sent back to fix it, up to this many \
         times (default work.fix_rounds; at most 20; needs work.check; not with vote)",
    )
    .errors(&[InvalidArgument, NotFound]);
    b.method::<Vec<Worktree>>(
        "work.list",
        "worktrees",
        "The worktrees of a thread, or of a workspace's repository, or every one, newest first.",
    );
    b.param::<String>("workspace", false, "only this workspace's repository")
        .param::<String>("thread", false, "only this thread's")
        .errors(&[InvalidArgument, NotFound]);
    b.method::<Vec<MemberDiff>>(
        "work.diff",
        "diffs",
        "Each member's diff (or one member's) from the commit its worktree was made at to the last commit kd made of \
         its work: the files with lines added and removed, and the patch unless stat; with highlight, the patch \
         parsed file by file into numbered lines of syntax-highlighted tokens (text and class, never HTML: what kd web \
         draws); with commits, the member's commits.",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", false, "only this member's")
        .param::<bool>("stat", false, "the files only, no patch")
        .param::<u64>("max_bytes", false, "cut each patch here (default 1 MiB, at most 8 MiB)")
        .param::<bool>(
            "highlight",
            false,
            "also highlighted: each file's hunks and lines (numbered on both sides) as tokens classed by the \
             file's grammar (by extension, name or first line); a line over 2,000 bytes, and what is left after 2 s, \
             plain",
        )
        .param::<bool>("commits", false, "also the member's commits from the base, newest first (at most 50)")
        .errors(&[InvalidArgument, NotFound]);
    b.method::<u64>(
        "work.review",
        "seq",
        "Ask members for a verdict on a diff — a member's work on a work thread, or a git revision of the thread's \
         workspace (a commit in HEAD's history: that commit; a branch: what it adds since it left HEAD's history): a \
         King message to the reviewers, each given the diff (bounded: a large diff is summarised by file with the \
         largest files' changes) and the task, answering with its reasons and VERDICT: APPROVE or VERDICT: REQUEST \
         CHANGES; once all answered, a kd message counts them. Returns the request's seq.",
    );
    b.param::<String>("thread", true, "the thread the review is asked in (a member's work: its work thread)")
        .param::<String>("member", false, "whose work (or rev)")
        .param::<String>("rev", false, "a git revision of the workspace: a commit or a branch (or member)")
        .param::<Vec<String>>("to", false, "reviewers (default: every other member)")
        .path_param()
        .errors(&[InvalidArgument, NotFound, Conflict]);
    b.method::<Accepted>(
        "work.accept",
        "accepted",
        "Merge a member's branch into the current branch of the King's own tree, the workspace (a merge commit; one commit with \
         squash); the task's other members' finished work is superseded. Refused with conflict, nothing changed, \
         while the member works, when that tree has uncommitted changes (named), the merge would conflict \
         (the files named), the work is tampered (its worktree's .git is not what kd made) or its last run is not \
         committed (uncommitted: its changes are in the worktree only). With check, only says whether it would.",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", true, "whose work")
        .param::<bool>("squash", false, "one commit instead of a merge")
        .param::<bool>("check", false, "change nothing: only check")
        .errors(&[InvalidArgument, NotFound, Conflict]);
    b.method::<Worktree>("work.reject", "worktree", "Mark a member's work rejected (refused while it works).");
    b.param::<String>("thread", true, "the work thread").param::<String>("member", true, "whose work").errors(&[
        InvalidArgument,
        NotFound,
        Conflict,
    ]);
    b.method::<Worktree>(
        "work.check",
        "worktree",
        "Run the check (work.check, an argv) again in a member's worktree on its last commit, confined to the \
         worktree (it may write nowhere else), killed at work.check_timeout, its output's tail (16 KiB) kept. \
         Returns the worktree with check.status running; the result (pass, fail, timeout, error) is told on the \
         thread as a work event and in work.list. Refused while the member works, for settled or tampered work, \
         and when no check is configured.",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", true, "whose work")
        .path_param()
        .errors(&[InvalidArgument, NotFound, Conflict]);
}
