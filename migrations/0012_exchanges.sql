-- Durable exchanges (issue 24): an exchange is a journal of steps, each
-- done at most once; kdd resumes the open ones at start. Never edit after
-- it lands. CHECKs use OR chains (see 0001).

-- One exchange: what began it (message `seq` of `thread_id`), what it is,
-- and its plan as begun. `plan_done` is set once its driver has taken every
-- planned step; from then on it is done as soon as no step is unfinished.
CREATE TABLE exchanges (
    id             INTEGER PRIMARY KEY,
    thread_id      TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq            INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind = 'council' OR kind = 'route' OR kind = 'completion' OR kind = 'work'
                                        OR kind = 'review' OR kind = 'retry'),
    correlation_id TEXT,
    plan           TEXT NOT NULL CHECK (json_valid(plan)),
    state          TEXT NOT NULL DEFAULT 'open' CHECK (state = 'open' OR state = 'done' OR state = 'stopped'),
    reason         TEXT,
    plan_done      INTEGER NOT NULL DEFAULT 0 CHECK (plan_done = 0 OR plan_done = 1),
    result         TEXT CHECK (result IS NULL OR json_valid(result)),
    cut_at         INTEGER,
    resumes        INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    ended_at       INTEGER,
    CHECK ((state = 'open') = (ended_at IS NULL)),
    CHECK (state <> 'stopped' OR reason IS NOT NULL)
) STRICT;
CREATE UNIQUE INDEX exchanges_by_seq ON exchanges (thread_id, seq, kind);
CREATE UNIQUE INDEX exchanges_by_correlation ON exchanges (thread_id, correlation_id)
    WHERE correlation_id IS NOT NULL;
CREATE INDEX exchanges_open ON exchanges (created_at) WHERE state = 'open';

-- One step: a member's answer in a round, a hand-off's answer, a ballot,
-- the tally, a merge, a synthesis, a review's verdicts; keyed so that it
-- exists once. `member` is '' for kd's own steps; `cause` is the seq of the
-- message handed off (a hand-off), else 0.
CREATE TABLE exchange_steps (
    id              INTEGER PRIMARY KEY,
    exchange_id     INTEGER NOT NULL REFERENCES exchanges (id) ON DELETE CASCADE,
    round           INTEGER NOT NULL,
    member          TEXT NOT NULL,
    purpose         TEXT NOT NULL CHECK (purpose = 'answer' OR purpose = 'handoff' OR purpose = 'ballot'
                                         OR purpose = 'tally' OR purpose = 'merge' OR purpose = 'synthesis'
                                         OR purpose = 'verdicts'),
    cause           INTEGER NOT NULL DEFAULT 0,
    state           TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state = 'pending' OR state = 'running' OR state = 'done' OR state = 'failed'
                           OR state = 'cancelled'),
    -- The run holding it (running), or that last held it.
    run_id          TEXT,
    -- The answer's place, fixed when it first starts.
    reply_to        INTEGER,
    -- kd's session the run held, and the backend's own id, saved as soon
    -- as the agent reports it.
    session_id      TEXT,
    backend_session TEXT,
    -- The interrupted (or failed) message the next answer replaces.
    replaces_seq    INTEGER,
    -- done: the answer; failed: its error message.
    message_seq     INTEGER,
    -- Runs started for it.
    attempts        INTEGER NOT NULL DEFAULT 0,
    -- failed or cancelled: why.
    reason          TEXT,
    data            TEXT CHECK (data IS NULL OR json_valid(data)),
    updated_at      INTEGER NOT NULL,
    CHECK (state <> 'running' OR run_id IS NOT NULL),
    CHECK (state <> 'done' OR message_seq IS NOT NULL),
    CHECK ((state <> 'failed' AND state <> 'cancelled') OR reason IS NOT NULL)
) STRICT;
CREATE UNIQUE INDEX exchange_steps_by_key ON exchange_steps (exchange_id, round, member, purpose, cause);
CREATE INDEX exchange_steps_by_run ON exchange_steps (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX exchange_steps_unfinished ON exchange_steps (exchange_id)
    WHERE state = 'pending' OR state = 'running';

-- The step a run was started for (none: a run of no exchange step, such as
-- a summary).
ALTER TABLE runs ADD COLUMN step_id INTEGER REFERENCES exchange_steps (id) ON DELETE SET NULL;
