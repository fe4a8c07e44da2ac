-- A member's work whose worktree's .git is not what kd made (issue 31
-- item 9): kd does not commit it and marks it `tampered`. SQLite cannot
-- change a CHECK constraint, so the table is made again with the same rows.
-- Never edit after it lands.

CREATE TABLE worktrees_new (
    thread_id  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member     TEXT NOT NULL,
    task       TEXT NOT NULL,
    repo       TEXT NOT NULL,
    path       TEXT NOT NULL,
    branch     TEXT NOT NULL,
    base       TEXT NOT NULL,
    head       TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state = 'working' OR state = 'done' OR state = 'accepted'
                                    OR state = 'rejected' OR state = 'superseded' OR state = 'tampered'),
    files      INTEGER NOT NULL DEFAULT 0,
    added      INTEGER NOT NULL DEFAULT 0,
    removed    INTEGER NOT NULL DEFAULT 0,
    vote       INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    removed_at INTEGER,
    PRIMARY KEY (thread_id, member)
) STRICT;
INSERT INTO worktrees_new (thread_id, member, task, repo, path, branch, base, head, state, files, added, removed,
                           vote, created_at, removed_at)
    SELECT thread_id, member, task, repo, path, branch, base, head, state, files, added, removed,
           vote, created_at, removed_at
    FROM worktrees;
DROP TABLE worktrees;
ALTER TABLE worktrees_new RENAME TO worktrees;
CREATE INDEX worktrees_by_repo ON worktrees (repo, created_at);
