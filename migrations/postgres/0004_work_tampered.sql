-- A member's work whose worktree's .git is not what kd made (issue 31
-- item 9): kd does not commit it and marks it `tampered`. Never edit after
-- it lands.
ALTER TABLE worktrees DROP CONSTRAINT worktrees_state_check;
ALTER TABLE worktrees ADD CONSTRAINT worktrees_state_check
    CHECK (state IN ('working', 'done', 'accepted', 'rejected', 'superseded', 'tampered'));
