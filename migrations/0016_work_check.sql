-- A check in every worktree, and fix until green (issue 34 items 1-2): the
-- check (`work.check`) of a member's last commit — its status, exit code,
-- duration, the commit, the output's tail, when it started — and how many
-- times a member whose check fails is sent back to fix it (`until_green`)
-- and was so far (`fixes`). Never edit after it lands.

ALTER TABLE worktrees ADD COLUMN check_status TEXT CHECK (check_status IS NULL OR check_status = 'running'
    OR check_status = 'pass' OR check_status = 'fail' OR check_status = 'timeout' OR check_status = 'error');
ALTER TABLE worktrees ADD COLUMN check_commit TEXT;
ALTER TABLE worktrees ADD COLUMN check_exit INTEGER;
ALTER TABLE worktrees ADD COLUMN check_ms INTEGER;
ALTER TABLE worktrees ADD COLUMN check_output TEXT;
ALTER TABLE worktrees ADD COLUMN check_at INTEGER;
ALTER TABLE worktrees ADD COLUMN until_green INTEGER NOT NULL DEFAULT 0;
ALTER TABLE worktrees ADD COLUMN fixes INTEGER NOT NULL DEFAULT 0;
