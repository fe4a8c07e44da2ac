-- Line comments on a member's work (issue 34): the King's, or a council
-- reviewer's, on lines of the new side of a member's diff; sent to the
-- member as one review, resolved by a later commit changing their lines or
-- by the King. Never edit after it lands.

-- `commit_id` is the member's commit (the work's head) the comment was made
-- on; `line`..`end_line` the lines of `path` there. `hunk` is the diff's
-- text around them then. `sent_seq` is the King's message that carried it;
-- `resolved_by` the member's commit that changed its lines (none: the King
-- resolved it).
CREATE TABLE work_comments (
    id          TEXT PRIMARY KEY,
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member      TEXT NOT NULL,
    author      TEXT NOT NULL,
    path        TEXT NOT NULL,
    line        BIGINT NOT NULL,
    end_line    BIGINT NOT NULL,
    commit_id   TEXT NOT NULL,
    body        TEXT NOT NULL,
    hunk        TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'resolved')),
    created_at  BIGINT NOT NULL,
    sent_seq    BIGINT,
    sent_at     BIGINT,
    resolved_by TEXT,
    resolved_at BIGINT
);
CREATE INDEX work_comments_by_work ON work_comments (thread_id, member, created_at);
