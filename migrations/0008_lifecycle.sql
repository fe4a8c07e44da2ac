-- The thread lifecycle (SPEC §8, F-L2). Never edit after it lands.
-- What a thread came to: written when it is archived (or summarized).
ALTER TABLE threads ADD COLUMN summary TEXT;
-- Who wrote it: a member's name, or kd for the extractive summary.
ALTER TABLE threads ADD COLUMN summary_by TEXT;

-- One trunk per workspace and git branch (F-L1). Databases from before
-- made a trunk of every new thread: the oldest stays the trunk, the others
-- become its branches.
UPDATE threads SET lineage = 'branch', parent_id = (
    SELECT t.id FROM threads t
    WHERE t.workspace = threads.workspace AND ifnull(t.branch, '') = ifnull(threads.branch, '')
      AND t.lineage = 'trunk'
    ORDER BY t.created_at, t.rowid LIMIT 1)
WHERE lineage = 'trunk' AND id != (
    SELECT t.id FROM threads t
    WHERE t.workspace = threads.workspace AND ifnull(t.branch, '') = ifnull(threads.branch, '')
      AND t.lineage = 'trunk'
    ORDER BY t.created_at, t.rowid LIMIT 1);
CREATE UNIQUE INDEX one_trunk ON threads (workspace, ifnull(branch, '')) WHERE lineage = 'trunk';
