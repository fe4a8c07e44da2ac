-- The thread lifecycle (SPEC §8, F-L2). Never edit after it lands.
-- What a thread came to: written when it is archived (or summarized).
ALTER TABLE threads ADD COLUMN summary TEXT;
-- Who wrote it: a member's name, or kd for the extractive summary.
ALTER TABLE threads ADD COLUMN summary_by TEXT;
