-- Why kd could not commit a member's last run (issue 31 item 9, stop 62):
-- its changes are in the worktree only until a later commit goes through.
-- Never edit after it lands.

ALTER TABLE worktrees ADD COLUMN uncommitted TEXT;
