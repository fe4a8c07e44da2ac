-- The King in the loop (issue 33): every permission a member's CLI asks —
-- decided by the policy, by the King or by the timeout — is kept. Never
-- edit after it lands.

-- One permission a member's CLI asked. `tool` is the tool as the agent
-- described it (JSON of kd_proto::approval::ApprovalTool), `scopes` the
-- choices the CLI can honour (a JSON list). `node` is the kdd whose run
-- asked: a pending approval of a node that starts again is cancelled (its
-- runs died with it).
CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    thread_id    TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member       TEXT NOT NULL,
    run_id       TEXT,
    node_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    scopes       TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    decided_by   TEXT CHECK (decided_by IN ('policy', 'king', 'timeout')),
    scope        TEXT CHECK (scope IN ('once', 'run', 'thread')),
    message      TEXT,
    requested_at BIGINT NOT NULL,
    decided_at   BIGINT,
    expires_at   BIGINT
);
CREATE INDEX approvals_pending ON approvals (state, requested_at) WHERE state = 'pending';
CREATE INDEX approvals_by_thread ON approvals (thread_id, requested_at);
