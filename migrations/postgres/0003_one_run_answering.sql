-- One run per member per thread, cluster-wide: a member answers one
-- question at a time on a thread (its next run waits for this one's end).
-- Each node keeps it by its own queue; the database keeps it across nodes.
CREATE UNIQUE INDEX runs_one_streaming ON runs (thread_id, member) WHERE status = 'streaming';
