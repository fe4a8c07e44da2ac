-- Streaming cost stays proportional: every byte an agent streams is stored
-- about once. Never edit after it lands.

-- The text a run has streamed so far, saved as it grows: each save appends
-- only what is new (in id order), instead of rewriting `runs.partial`
-- whole. Deleted when the run's message is written; after a crash the
-- pieces, joined, are the interrupted run's message. (`runs.partial` is
-- still read, for runs a previous kdd left in flight.)
CREATE TABLE run_partials (
    id     INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    text   TEXT NOT NULL
);
CREATE INDEX run_partials_by_run ON run_partials (run_id, id);

-- A `message` event refers to its message (thread and seq) instead of
-- copying its body; events.list reads the body from the message.
UPDATE conversation_events SET data = json_remove(data, '$.body') WHERE kind = 'message';
