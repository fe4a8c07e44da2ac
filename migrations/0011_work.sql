-- Members do the work (issue 23, F-W1..W6): a member given a task works in
-- a git worktree of its own on a branch of its own. Never edit after it
-- lands.

-- One member's worktree of a work thread. `head` is the branch's last
-- commit kd knows (the base until kd committed the member's changes);
-- `files`, `added`, `removed` the diff's size from base to head.
CREATE TABLE worktrees (
    thread_id  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member     TEXT NOT NULL,
    task       TEXT NOT NULL,
    repo       TEXT NOT NULL,
    path       TEXT NOT NULL,
    branch     TEXT NOT NULL,
    base       TEXT NOT NULL,
    head       TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state = 'working' OR state = 'done' OR state = 'accepted'
                                    OR state = 'rejected' OR state = 'superseded'),
    files      INTEGER NOT NULL DEFAULT 0,
    added      INTEGER NOT NULL DEFAULT 0,
    removed    INTEGER NOT NULL DEFAULT 0,
    vote       INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    removed_at INTEGER,
    PRIMARY KEY (thread_id, member)
) STRICT;
CREATE INDEX worktrees_by_repo ON worktrees (repo, created_at);

-- What kd did with a work run's changes: the commit it made on the
-- member's branch (none: nothing changed), and what the run should be
-- told about (writes its agent refused, the setup's output).
ALTER TABLE runs ADD COLUMN work_commit TEXT;
ALTER TABLE runs ADD COLUMN work_note TEXT;
