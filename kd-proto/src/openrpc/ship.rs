//! From members' work to shipping it (issue 34) in the OpenRPC document:
//! bringing a member's work up to date with the King's branch.

use super::Builder;
use crate::error::ErrorCode::*;
use crate::work::Rebased;

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
}
