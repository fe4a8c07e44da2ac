-- kd registry, schema version 1. Never edit after it lands: add 0002_….sql.
-- Times are Unix milliseconds. List columns hold JSON arrays of names.
-- CHECKs use OR chains, not IN lists: SQLite builds an ephemeral table for
-- an IN list on every row written.

CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT;
INSERT INTO counters (name, value) VALUES ('fencing_token', 0);

CREATE TABLE threads (
    id               TEXT PRIMARY KEY,
    workspace        TEXT NOT NULL,
    branch           TEXT,
    title            TEXT,
    status           TEXT NOT NULL DEFAULT 'active' CHECK (status = 'active' OR status = 'idle' OR status = 'archived'),
    lineage          TEXT NOT NULL DEFAULT 'trunk' CHECK (lineage = 'trunk' OR lineage = 'branch'),
    parent_id        TEXT REFERENCES threads (id) ON DELETE SET NULL,
    members          TEXT NOT NULL DEFAULT '[]',
    created_at       INTEGER NOT NULL,
    last_activity_at INTEGER NOT NULL,
    -- Highest seq handed out; the next message gets last_seq + 1.
    last_seq         INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX threads_by_activity ON threads (last_activity_at DESC);
CREATE INDEX threads_by_workspace ON threads (workspace, last_activity_at DESC);

-- The current thread of each workspace + git branch ('' when not in git).
CREATE TABLE current_threads (
    workspace TEXT NOT NULL,
    branch    TEXT NOT NULL,
    thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    PRIMARY KEY (workspace, branch)
) STRICT;

CREATE TABLE messages (
    id         INTEGER PRIMARY KEY,
    thread_id  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    sender     TEXT NOT NULL,
    recipients TEXT NOT NULL DEFAULT '[]',
    cc         TEXT NOT NULL DEFAULT '[]',
    reply_to   INTEGER,
    kind       TEXT NOT NULL CHECK (kind = 'king' OR kind = 'agent' OR kind = 'system' OR kind = 'error' OR kind = 'interrupted'),
    body       TEXT NOT NULL,
    round      INTEGER,
    created_at INTEGER NOT NULL,
    run        TEXT,
    UNIQUE (thread_id, seq)
) STRICT;

CREATE TABLE sessions (
    id                 TEXT PRIMARY KEY,
    thread_id          TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent              TEXT NOT NULL,
    backend_session_id TEXT,
    status             TEXT NOT NULL CHECK (status = 'active' OR status = 'completed' OR status = 'expired' OR status = 'idle' OR status = 'archived'),
    holder             TEXT,
    pid                INTEGER,
    started_at         INTEGER NOT NULL,
    last_active_at     INTEGER NOT NULL,
    metadata           TEXT NOT NULL DEFAULT '{}'
) STRICT;
-- Single resume: at most one active session per thread and agent.
CREATE UNIQUE INDEX sessions_one_active ON sessions (thread_id, agent) WHERE status = 'active';
CREATE INDEX sessions_by_thread ON sessions (thread_id, agent);

CREATE TABLE locks (
    resource    TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    pid         INTEGER,
    token       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT;

-- The event log (F-R6). Not tied to threads by a foreign key: it is an
-- audit trail and outlives what it describes.
CREATE TABLE conversation_events (
    id             INTEGER PRIMARY KEY,
    at             INTEGER NOT NULL,
    kind           TEXT NOT NULL,
    thread_id      TEXT,
    session_id     TEXT,
    agent          TEXT,
    sender         TEXT,
    recipients     TEXT NOT NULL DEFAULT '[]',
    correlation_id TEXT,
    data           TEXT NOT NULL DEFAULT '{}'
) STRICT;
-- Only the thread filter is indexed: the agent filter also matches senders
-- and recipients (no index helps), and every event insert pays per index.
CREATE INDEX events_by_thread ON conversation_events (thread_id, id);
