-- kd registry on PostgreSQL, schema version 1 (its own counter: PG 1 is
-- SQLite's version 12). Never edit after it lands: add 0002_….sql, and the
-- same change to SQLite's migrations in the same commit.
--
-- A translation of migrations/0001…0012 as they stand at SQLite version 12,
-- plus the columns and tables several nodes sharing one registry need
-- (nodes; node_id on threads, runs, sessions, locks, exchanges; leases).
-- Rules of the translation:
-- * Times are Unix milliseconds (bigint), computed by kdd as in SQLite;
--   every integer column is bigint, so every row reads as i64.
-- * Text is COLLATE "C" (byte order = SQLite's BINARY), so every ORDER BY
--   and comparison gives SQLite's result whatever the database's locale.
-- * JSON columns stay text holding the very JSON text kdd wrote (key order
--   and number formatting survive; clients compare it).
-- * SQLite's implicit rowid, where kdd orders by it (threads, sessions,
--   participants), is an identity column named rowid; INTEGER PRIMARY KEYs
--   are identity columns.
-- * counters.fencing_token is the sequence fencing_token; search_indexed is
--   gone: messages are indexed as they are written (generated tsvector).
-- * cost_days is kept in step with costs by plpgsql triggers, as SQLite's.

CREATE EXTENSION IF NOT EXISTS unaccent;

-- FTS5's `porter unicode61 remove_diacritics 2`: English stems, accents
-- off, and no stop words (FTS5 has none: "how" and "the" are found).
CREATE TEXT SEARCH DICTIONARY kd_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION kd (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION kd ALTER MAPPING FOR asciiword, asciihword, hword_asciipart WITH kd_stem;
ALTER TEXT SEARCH CONFIGURATION kd ALTER MAPPING FOR word, hword, hword_part WITH unaccent, kd_stem;

-- Fencing tokens of locks: increasing across every resource.
CREATE SEQUENCE fencing_token AS bigint MINVALUE 1 START 1 CACHE 1;

-- The kdd processes sharing this registry (one row per node id).
CREATE TABLE nodes (
    id           text COLLATE "C" PRIMARY KEY,
    host         text COLLATE "C" NOT NULL,
    pid          bigint NOT NULL,
    socket       text COLLATE "C" NOT NULL,
    kdd_version  text COLLATE "C" NOT NULL,
    started_at   timestamptz NOT NULL,
    -- Database clock: one clock decides every expiry.
    heartbeat_at timestamptz NOT NULL,
    -- The node's own now_ms() at its last heartbeat (skew = clock_ms - db now).
    clock_ms     bigint NOT NULL,
    -- +1 at every start: a restarted node is a new holder of everything.
    incarnation  bigint NOT NULL,
    state        text COLLATE "C" NOT NULL CHECK (state IN ('live', 'stopped', 'dead')),
    reaped_at    timestamptz
);

CREATE TABLE threads (
    id               text COLLATE "C" PRIMARY KEY,
    rowid            bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    workspace        text COLLATE "C" NOT NULL,
    branch           text COLLATE "C",
    title            text COLLATE "C",
    status           text COLLATE "C" NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'idle', 'archived')),
    lineage          text COLLATE "C" NOT NULL DEFAULT 'trunk' CHECK (lineage IN ('trunk', 'branch')),
    parent_id        text COLLATE "C" REFERENCES threads (id) ON DELETE SET NULL,
    members          text COLLATE "C" NOT NULL DEFAULT '[]',
    created_at       bigint NOT NULL,
    last_activity_at bigint NOT NULL,
    -- Highest seq handed out; the next message gets last_seq + 1.
    last_seq         bigint NOT NULL DEFAULT 0,
    context_mode     text COLLATE "C" NOT NULL DEFAULT 'history' CHECK (context_mode IN ('history', 'resume')),
    -- Where an imported thread came from.
    origin           text COLLATE "C",
    -- What a thread came to, and who wrote it (a member, or kd).
    summary          text COLLATE "C",
    summary_by       text COLLATE "C",
    -- The node whose host holds the workspace (the creator); NULL: any.
    -- A node names itself on every connection (`-c kd.node=…`).
    node_id          text COLLATE "C" DEFAULT current_setting('kd.node', true),
    search           tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('kd', coalesce(title, '')), 'A')
        || setweight(to_tsvector('kd', coalesce(summary, '')), 'B')) STORED
);
CREATE INDEX threads_by_activity ON threads (last_activity_at DESC);
CREATE INDEX threads_by_workspace ON threads (workspace, last_activity_at DESC);
CREATE UNIQUE INDEX threads_by_origin ON threads (origin) WHERE origin IS NOT NULL;
-- One trunk per workspace and git branch (F-L1).
CREATE UNIQUE INDEX one_trunk ON threads (workspace, coalesce(branch, '')) WHERE lineage = 'trunk';
CREATE INDEX threads_search ON threads USING gin (search);

-- The current thread of each workspace + git branch ('' when not in git).
CREATE TABLE current_threads (
    workspace text COLLATE "C" NOT NULL,
    branch    text COLLATE "C" NOT NULL,
    thread_id text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    PRIMARY KEY (workspace, branch)
);

CREATE TABLE messages (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id  text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    sender     text COLLATE "C" NOT NULL,
    recipients text COLLATE "C" NOT NULL DEFAULT '[]',
    cc         text COLLATE "C" NOT NULL DEFAULT '[]',
    reply_to   bigint,
    kind       text COLLATE "C" NOT NULL CHECK (kind IN ('king', 'agent', 'system', 'error', 'interrupted')),
    body       text COLLATE "C" NOT NULL,
    round      bigint,
    created_at bigint NOT NULL,
    run        text COLLATE "C",
    -- A retried answer names the failed message it replaces.
    replaces   bigint,
    -- Files a message refers to, as a JSON list.
    refs       text COLLATE "C" NOT NULL DEFAULT '[]',
    -- point_to_point, multicast, broadcast, reply or emergency.
    route      text COLLATE "C",
    -- ballot, tally, synthesis or merge (F-X2).
    purpose    text COLLATE "C",
    -- Indexed up to the first 100,000 characters, as FTS5's index was.
    search     tsvector GENERATED ALWAYS AS (to_tsvector('kd', left(body, 100000))) STORED,
    UNIQUE (thread_id, seq)
);
CREATE INDEX messages_search ON messages USING gin (search) WITH (fastupdate = on);

CREATE TABLE sessions (
    id                 text COLLATE "C" PRIMARY KEY,
    rowid              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    thread_id          text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent              text COLLATE "C" NOT NULL,
    backend_session_id text COLLATE "C",
    status             text COLLATE "C" NOT NULL CHECK (status IN ('active', 'completed', 'expired', 'idle', 'archived')),
    holder             text COLLATE "C",
    pid                bigint,
    started_at         bigint NOT NULL,
    last_active_at     bigint NOT NULL,
    metadata           text COLLATE "C" NOT NULL DEFAULT '{}',
    -- The last message seq the session's agent was given.
    seen_seq           bigint,
    -- The holder's node while active.
    node_id            text COLLATE "C" DEFAULT current_setting('kd.node', true)
);
-- Single resume: at most one active session per thread and agent.
CREATE UNIQUE INDEX sessions_one_active ON sessions (thread_id, agent) WHERE status = 'active';
CREATE INDEX sessions_by_thread ON sessions (thread_id, agent);

CREATE TABLE locks (
    resource    text COLLATE "C" PRIMARY KEY,
    holder      text COLLATE "C" NOT NULL,
    pid         bigint,
    token       bigint NOT NULL,
    acquired_at bigint NOT NULL,
    expires_at  bigint NOT NULL,
    -- The holder pid's node.
    node_id     text COLLATE "C" DEFAULT current_setting('kd.node', true)
);

-- The event log (F-R6). Not tied to threads by a foreign key: it is an
-- audit trail and outlives what it describes.
CREATE TABLE conversation_events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             bigint NOT NULL,
    kind           text COLLATE "C" NOT NULL,
    thread_id      text COLLATE "C",
    session_id     text COLLATE "C",
    agent          text COLLATE "C",
    sender         text COLLATE "C",
    recipients     text COLLATE "C" NOT NULL DEFAULT '[]',
    correlation_id text COLLATE "C",
    data           text COLLATE "C" NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_thread ON conversation_events (thread_id, id);

-- Durable exchanges (issue 24): a journal of steps, each done at most once.
CREATE TABLE exchanges (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id      text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq            bigint NOT NULL,
    kind           text COLLATE "C" NOT NULL CHECK (kind IN ('council', 'route', 'completion', 'work', 'review', 'retry')),
    correlation_id text COLLATE "C",
    plan           text COLLATE "C" NOT NULL CHECK (plan::jsonb IS NOT NULL),
    state          text COLLATE "C" NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'done', 'stopped')),
    reason         text COLLATE "C",
    plan_done      bigint NOT NULL DEFAULT 0 CHECK (plan_done IN (0, 1)),
    result         text COLLATE "C" CHECK (result IS NULL OR result::jsonb IS NOT NULL),
    cut_at         bigint,
    resumes        bigint NOT NULL DEFAULT 0,
    created_at     bigint NOT NULL,
    updated_at     bigint NOT NULL,
    ended_at       bigint,
    -- The node that must drive it (the thread's owner when begun), the node
    -- driving it now, until when, and the lease's fencing token.
    node_id        text COLLATE "C" NOT NULL DEFAULT coalesce(current_setting('kd.node', true), 'local'),
    lease_owner    text COLLATE "C",
    lease_until    timestamptz,
    lease_epoch    bigint NOT NULL DEFAULT 0,
    CHECK ((state = 'open') = (ended_at IS NULL)),
    CHECK (state <> 'stopped' OR reason IS NOT NULL)
);
CREATE UNIQUE INDEX exchanges_by_seq ON exchanges (thread_id, seq, kind);
CREATE UNIQUE INDEX exchanges_by_correlation ON exchanges (thread_id, correlation_id)
    WHERE correlation_id IS NOT NULL;
CREATE INDEX exchanges_open ON exchanges (created_at) WHERE state = 'open';
CREATE INDEX exchanges_claimable ON exchanges (node_id, created_at) WHERE state = 'open';

-- One step of an exchange, keyed so that it exists once. `member` is ''
-- for kd's own steps; `cause` is the seq of the message handed off, else 0.
CREATE TABLE exchange_steps (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    exchange_id     bigint NOT NULL REFERENCES exchanges (id) ON DELETE CASCADE,
    round           bigint NOT NULL,
    member          text COLLATE "C" NOT NULL,
    purpose         text COLLATE "C" NOT NULL
                    CHECK (purpose IN ('answer', 'handoff', 'ballot', 'tally', 'merge', 'synthesis', 'verdicts')),
    cause           bigint NOT NULL DEFAULT 0,
    state           text COLLATE "C" NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'running', 'done', 'failed', 'cancelled')),
    run_id          text COLLATE "C",
    reply_to        bigint,
    session_id      text COLLATE "C",
    backend_session text COLLATE "C",
    replaces_seq    bigint,
    message_seq     bigint,
    attempts        bigint NOT NULL DEFAULT 0,
    reason          text COLLATE "C",
    data            text COLLATE "C" CHECK (data IS NULL OR data::jsonb IS NOT NULL),
    updated_at      bigint NOT NULL,
    CHECK (state <> 'running' OR run_id IS NOT NULL),
    CHECK (state <> 'done' OR message_seq IS NOT NULL),
    CHECK ((state <> 'failed' AND state <> 'cancelled') OR reason IS NOT NULL)
);
CREATE UNIQUE INDEX exchange_steps_by_key ON exchange_steps (exchange_id, round, member, purpose, cause);
CREATE INDEX exchange_steps_by_run ON exchange_steps (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX exchange_steps_unfinished ON exchange_steps (exchange_id) WHERE state IN ('pending', 'running');

-- One agent invocation. Rows of runs in flight hold the agent's pid and
-- start time, so that a daemon that died can record them as interrupted.
CREATE TABLE runs (
    id          text COLLATE "C" PRIMARY KEY,
    thread_id   text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member      text COLLATE "C" NOT NULL,
    backend     text COLLATE "C" NOT NULL,
    status      text COLLATE "C" NOT NULL
                CHECK (status IN ('waiting', 'streaming', 'done', 'error', 'timed_out', 'cancelled', 'interrupted')),
    pid         bigint,
    pid_start   bigint,
    session_id  text COLLATE "C",
    reply_to    bigint,
    round       bigint,
    partial     text COLLATE "C" NOT NULL DEFAULT '',
    started_at  bigint NOT NULL,
    ended_at    bigint,
    message_seq bigint,
    error       text COLLATE "C",
    -- The King's message whose exchange the run belongs to.
    exchange    bigint,
    replaces    bigint,
    -- The order runs were started in.
    ordinal     bigint,
    purpose     text COLLATE "C",
    -- What kd did with a work run's changes.
    work_commit text COLLATE "C",
    work_note   text COLLATE "C",
    -- The step the run was started for.
    step_id     bigint REFERENCES exchange_steps (id) ON DELETE SET NULL,
    -- Where its process runs.
    node_id     text COLLATE "C" NOT NULL DEFAULT coalesce(current_setting('kd.node', true), 'local')
);
CREATE INDEX runs_by_thread ON runs (thread_id, started_at);
CREATE INDEX runs_in_flight ON runs (status) WHERE status IN ('waiting', 'streaming');
CREATE INDEX runs_in_flight_by_node ON runs (node_id) WHERE status IN ('waiting', 'streaming');

-- The text a run has streamed so far, saved as it grows (in id order).
CREATE TABLE run_partials (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    text   text COLLATE "C" NOT NULL
);
CREATE INDEX run_partials_by_run ON run_partials (run_id, id);

-- Members' inboxes: a routed message kept for a member.
CREATE TABLE inbox (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member    text COLLATE "C" NOT NULL,
    seq       bigint NOT NULL,
    sender    text COLLATE "C" NOT NULL,
    type      text COLLATE "C" NOT NULL,
    role      text COLLATE "C" NOT NULL CHECK (role IN ('to', 'cc')),
    status    text COLLATE "C" NOT NULL DEFAULT 'pending',
    queued_at bigint NOT NULL,
    read_at   bigint,
    done_at   bigint
);
CREATE INDEX inbox_by_member ON inbox (member, thread_id, status, id);

-- Who has sent or received a routed message in a thread.
CREATE TABLE participants (
    thread_id text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    name      text COLLATE "C" NOT NULL,
    rowid     bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    first_at  bigint NOT NULL,
    last_at   bigint NOT NULL,
    PRIMARY KEY (thread_id, name)
);

-- queue.subscribe: a member's delivery mode for a message type.
CREATE TABLE delivery_overrides (
    workspace text COLLATE "C" NOT NULL,
    member    text COLLATE "C" NOT NULL,
    type      text COLLATE "C" NOT NULL,
    mode      text COLLATE "C" NOT NULL CHECK (mode IN ('immediate', 'queued')),
    PRIMARY KEY (workspace, member, type)
);

-- Acknowledgements owed for emergency broadcasts.
CREATE TABLE acks (
    broadcast text COLLATE "C" NOT NULL,
    thread_id text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq       bigint NOT NULL,
    member    text COLLATE "C" NOT NULL,
    acked_at  bigint,
    how       text COLLATE "C",
    PRIMARY KEY (broadcast, member)
);
CREATE INDEX acks_by_thread ON acks (thread_id, member, acked_at);

-- The cost ledger: one row per message a run wrote, bounded (db/cost.rs).
CREATE TABLE costs (
    thread_id     text COLLATE "C" NOT NULL,
    seq           bigint NOT NULL,
    member        text COLLATE "C" NOT NULL,
    exchange      bigint,
    round         bigint,
    -- The UTC day (Unix ms / 86,400,000, rounded down) and time written.
    day           bigint NOT NULL,
    at            bigint NOT NULL,
    cost_usd      double precision NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    PRIMARY KEY (thread_id, seq),
    FOREIGN KEY (thread_id, seq) REFERENCES messages (thread_id, seq) ON DELETE CASCADE
);
CREATE INDEX costs_by_day ON costs (day, at);

-- The ledger summed per thread, member and day, kept in step by triggers.
CREATE TABLE cost_days (
    thread_id     text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member        text COLLATE "C" NOT NULL,
    day           bigint NOT NULL,
    cost_usd      double precision NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    answers       bigint NOT NULL,
    PRIMARY KEY (thread_id, member, day)
);

-- Token sums are capped at 9e18 (below bigint's largest), as in SQLite.
CREATE FUNCTION costs_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cost_days (thread_id, member, day, cost_usd, input_tokens, output_tokens, answers)
    VALUES (NEW.thread_id, NEW.member, NEW.day, NEW.cost_usd, NEW.input_tokens, NEW.output_tokens, 1)
    ON CONFLICT (thread_id, member, day) DO UPDATE SET
        cost_usd = cost_days.cost_usd + excluded.cost_usd,
        input_tokens = least(cost_days.input_tokens::numeric + excluded.input_tokens, 9000000000000000000)::bigint,
        output_tokens = least(cost_days.output_tokens::numeric + excluded.output_tokens, 9000000000000000000)::bigint,
        answers = cost_days.answers + 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER costs_insert AFTER INSERT ON costs FOR EACH ROW EXECUTE FUNCTION costs_insert();

CREATE FUNCTION costs_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cost_days SET
        cost_usd = cost_usd - OLD.cost_usd,
        input_tokens = input_tokens - OLD.input_tokens,
        output_tokens = output_tokens - OLD.output_tokens,
        answers = answers - 1
    WHERE thread_id = OLD.thread_id AND member = OLD.member AND day = OLD.day;
    DELETE FROM cost_days
    WHERE thread_id = OLD.thread_id AND member = OLD.member AND day = OLD.day AND answers <= 0;
    RETURN NULL;
END;
$$;
CREATE TRIGGER costs_delete AFTER DELETE ON costs FOR EACH ROW EXECUTE FUNCTION costs_delete();

-- Members' worktrees of work threads (issue 23).
CREATE TABLE worktrees (
    thread_id  text COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member     text COLLATE "C" NOT NULL,
    task       text COLLATE "C" NOT NULL,
    repo       text COLLATE "C" NOT NULL,
    path       text COLLATE "C" NOT NULL,
    branch     text COLLATE "C" NOT NULL,
    base       text COLLATE "C" NOT NULL,
    head       text COLLATE "C" NOT NULL,
    state      text COLLATE "C" NOT NULL CHECK (state IN ('working', 'done', 'accepted', 'rejected', 'superseded')),
    files      bigint NOT NULL DEFAULT 0,
    added      bigint NOT NULL DEFAULT 0,
    removed    bigint NOT NULL DEFAULT 0,
    vote       bigint NOT NULL DEFAULT 0,
    created_at bigint NOT NULL,
    removed_at bigint,
    PRIMARY KEY (thread_id, member)
);
CREATE INDEX worktrees_by_repo ON worktrees (repo, created_at);
