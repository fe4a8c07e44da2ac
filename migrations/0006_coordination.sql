-- The coordination layer (SPEC §7, seed 002). Never edit after it lands.

-- How a message between members was routed: point_to_point, multicast,
-- broadcast, reply or emergency (NULL for the King's questions and answers).
ALTER TABLE messages ADD COLUMN route TEXT;

-- Members' inboxes: a routed message kept for a member (queued, copied, or
-- delivered by a run), until it is given in a prompt or processed.
CREATE TABLE inbox (
    id        INTEGER PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member    TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    sender    TEXT NOT NULL,
    type      TEXT NOT NULL,
    role      TEXT NOT NULL CHECK (role = 'to' OR role = 'cc'),
    status    TEXT NOT NULL DEFAULT 'pending',
    queued_at INTEGER NOT NULL,
    read_at   INTEGER,
    done_at   INTEGER
) STRICT;
CREATE INDEX inbox_by_member ON inbox (member, thread_id, status, id);

-- Who has sent or received a routed message in a thread.
CREATE TABLE participants (
    thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    name      TEXT NOT NULL,
    first_at  INTEGER NOT NULL,
    last_at   INTEGER NOT NULL,
    PRIMARY KEY (thread_id, name)
) STRICT;

-- queue.subscribe: a member's delivery mode for a message type, over its
-- configuration, per workspace.
CREATE TABLE delivery_overrides (
    workspace TEXT NOT NULL,
    member    TEXT NOT NULL,
    type      TEXT NOT NULL,
    mode      TEXT NOT NULL CHECK (mode = 'immediate' OR mode = 'queued'),
    PRIMARY KEY (workspace, member, type)
) STRICT;

-- Acknowledgements owed for emergency broadcasts.
CREATE TABLE acks (
    broadcast TEXT NOT NULL,
    thread_id TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL,
    member    TEXT NOT NULL,
    acked_at  INTEGER,
    how       TEXT,
    PRIMARY KEY (broadcast, member)
) STRICT;
CREATE INDEX acks_by_thread ON acks (thread_id, member, acked_at);
