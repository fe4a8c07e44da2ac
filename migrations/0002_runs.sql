-- Agent runs and each thread's context mode. Never edit after it lands.

ALTER TABLE threads ADD COLUMN context_mode TEXT NOT NULL DEFAULT 'history'
    CHECK (context_mode = 'history' OR context_mode = 'resume');

-- One agent invocation. Rows of runs in flight (waiting, streaming) hold
-- the agent's pid and its start time, and the text streamed so far, saved
-- about once a second, so that a daemon that died can record them as
-- interrupted and make sure their processes are gone.
CREATE TABLE runs (
    id          TEXT PRIMARY KEY,
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member      TEXT NOT NULL,
    backend     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status = 'waiting' OR status = 'streaming' OR status = 'done' OR status = 'error'
                                     OR status = 'timed_out' OR status = 'cancelled' OR status = 'interrupted'),
    pid         INTEGER,
    pid_start   INTEGER,
    session_id  TEXT,
    reply_to    INTEGER,
    round       INTEGER,
    partial     TEXT NOT NULL DEFAULT '',
    started_at  INTEGER NOT NULL,
    ended_at    INTEGER,
    message_seq INTEGER,
    error       TEXT
) STRICT;
CREATE INDEX runs_by_thread ON runs (thread_id, started_at);
CREATE INDEX runs_in_flight ON runs (status) WHERE status = 'waiting' OR status = 'streaming';
