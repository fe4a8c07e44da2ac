//! From members' work to shipping it (issue 34) in the OpenRPC document:
//! bringing a member's work up to date with the King's branch, and
//! shipping it as a pull request.

use super::Builder;
use crate::error::ErrorCode::*;
use crate::work::{PullRequest, Rebased};

pub(super) fn methods(b: &mut Builder) {
    b.method::<Rebased>(
        "work.rebase",
        "rebased",
        "Bring a member's work up to date with the King's current HEAD: what the member left uncommitted is \
         committed, then the King's HEAD is merged into the member's branch in its worktree (a merge, never a \
         rewrite: every commit of the member stays). up_to_date: its branch already holds it; merged: a clean merge, \
         committed. resolving: the merge conflicts (the files named) and is left in progress; a King's message (seq) \
         asks the member, in its worktree, to resolve the markers, told the files and what the King's side changed; \
         kd commits the merge at the end of its run only once no marker is left. Markers left, the member is told \
         again once; then the merge is undone (its branch as it was). kd's message answering seq says the outcome. \
         The work's base becomes the King's commit merged in. Refused while the member works, for settled or \
         tampered work.",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", true, "whose work")
        .path_param()
        .errors(&[InvalidArgument, NotFound, Conflict]);
    b.method::<PullRequest>(
        "work.pr",
        "pull_request",
        "Push a member's branch kd/<thread>/<member> to the remote (work.remote, default origin) under the same name \
         (never forced), then open a pull request into the King's current branch with gh pr create when gh is on \
         the PATH (path; a GitHub remote or one gh serves): titled with the task's first line, its body the task \
         and the council's latest review or vote of the work. Without gh (or for a GitLab remote) the host's page \
         to open one is given (GitHub, GitLab; from https, ssh and scp-style remote URLs) and note says why. git \
         and gh run by argv with the user's own configuration, bounded in time (push 120 s, gh 60 s) and stopped \
         with their process group when they overrun or the call goes away. Recorded on the work as shipped. With \
         accept, the work is accepted by the pull request (the task's others superseded); nothing is merged in the \
         King's tree. Refused with conflict, nothing pushed, without the remote, while the member works, for work \
         that changed nothing or is settled or tampered; a push that fails or overruns is a conflict with git's \
         reason; a gh that fails after the push is an internal error saying the branch was pushed.",
    );
    b.param::<String>("thread", true, "the work thread")
        .param::<String>("member", true, "whose work")
        .param::<bool>("accept", false, "accept the work by the pull request")
        .path_param()
        .errors(&[InvalidArgument, NotFound, Conflict, Internal]);
}
