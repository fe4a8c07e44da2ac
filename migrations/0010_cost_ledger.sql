-- What answers cost, where it can be indexed (issue 21, Scale): summing
-- `json_extract(messages.run, …)` over every message made one thread's
-- cost read the whole registry. Never edit after it lands.

-- The ledger: one row per message a run wrote (answer, failure or
-- interruption), with what its agent reported, bounded (db/cost.rs:
-- MAX_ANSWER_USD, MAX_ANSWER_TOKENS). Written in the transaction that
-- writes the message; it goes with its message.
CREATE TABLE costs (
    thread_id     TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    member        TEXT NOT NULL,
    -- The King's message whose exchange the run belongs to, and its round.
    exchange      INTEGER,
    round         INTEGER,
    -- The UTC day (Unix ms / 86,400,000, rounded down) and time written.
    day           INTEGER NOT NULL,
    at            INTEGER NOT NULL,
    cost_usd      REAL NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq),
    FOREIGN KEY (thread_id, seq) REFERENCES messages (thread_id, seq) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
-- The answers of one day after a time (`since` within that day).
CREATE INDEX costs_by_day ON costs (day, at);

-- The ledger summed per thread, member and day, kept in step by the
-- triggers below: a report across threads reads these rows, as many as
-- the threads, members and days, however many answers there were.
CREATE TABLE cost_days (
    thread_id     TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    member        TEXT NOT NULL,
    day           INTEGER NOT NULL,
    cost_usd      REAL NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    answers       INTEGER NOT NULL,
    PRIMARY KEY (thread_id, member, day)
) STRICT, WITHOUT ROWID;

-- The answers already written: each message whose run metadata names a
-- run (an imported message names a backend but was no run here), bounded
-- as a new answer is (`cost::Entry`): a cost that is a positive number, up
-- to $1,000,000; a token count that is a number from 1, rounded down, up
-- to 10^12; anything else 0.
INSERT INTO costs (thread_id, seq, member, exchange, round, day, at, cost_usd, input_tokens, output_tokens)
SELECT m.thread_id, m.seq, m.sender, r.exchange, r.round,
       (m.created_at - ((m.created_at % 86400000) + 86400000) % 86400000) / 86400000, m.created_at,
       CASE WHEN m.c > 0 THEN min(m.c, 1e6) ELSE 0.0 END,
       CASE WHEN m.i >= 1 THEN CAST(min(m.i, 1e12) AS INTEGER) ELSE 0 END,
       CASE WHEN m.o >= 1 THEN CAST(min(m.o, 1e12) AS INTEGER) ELSE 0 END
FROM (
    SELECT thread_id, seq, sender, created_at, json_extract(run, '$.run_id') AS run_id,
           CASE json_type(run, '$.cost_usd') WHEN 'integer' THEN json_extract(run, '$.cost_usd')
               WHEN 'real' THEN json_extract(run, '$.cost_usd') END AS c,
           CASE json_type(run, '$.usage.input_tokens') WHEN 'integer' THEN json_extract(run, '$.usage.input_tokens')
               WHEN 'real' THEN json_extract(run, '$.usage.input_tokens') END AS i,
           CASE json_type(run, '$.usage.output_tokens') WHEN 'integer' THEN json_extract(run, '$.usage.output_tokens')
               WHEN 'real' THEN json_extract(run, '$.usage.output_tokens') END AS o
    FROM messages WHERE run IS NOT NULL
) m LEFT JOIN runs r ON r.id = m.run_id
WHERE m.run_id IS NOT NULL;

-- Token sums are capped below SQLite's largest integer (reached only by
-- millions of answers of 10^12 tokens in one thread, member and day).
INSERT INTO cost_days (thread_id, member, day, cost_usd, input_tokens, output_tokens, answers)
SELECT thread_id, member, day, total(cost_usd), CAST(min(total(input_tokens), 9e18) AS INTEGER),
       CAST(min(total(output_tokens), 9e18) AS INTEGER), count(*)
FROM costs GROUP BY thread_id, member, day;

CREATE TRIGGER costs_insert AFTER INSERT ON costs BEGIN
    INSERT INTO cost_days (thread_id, member, day, cost_usd, input_tokens, output_tokens, answers)
    VALUES (new.thread_id, new.member, new.day, new.cost_usd, new.input_tokens, new.output_tokens, 1)
    ON CONFLICT (thread_id, member, day) DO UPDATE SET
        cost_usd = cost_usd + excluded.cost_usd,
        input_tokens = min(input_tokens + excluded.input_tokens, 9000000000000000000),
        output_tokens = min(output_tokens + excluded.output_tokens, 9000000000000000000),
        answers = answers + 1;
END;

CREATE TRIGGER costs_delete AFTER DELETE ON costs BEGIN
    UPDATE cost_days SET
        cost_usd = cost_usd - old.cost_usd,
        input_tokens = input_tokens - old.input_tokens,
        output_tokens = output_tokens - old.output_tokens,
        answers = answers - 1
    WHERE thread_id = old.thread_id AND member = old.member AND day = old.day;
    DELETE FROM cost_days WHERE thread_id = old.thread_id AND member = old.member AND day = old.day AND answers <= 0;
END;
