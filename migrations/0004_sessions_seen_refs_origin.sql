-- What trying kd as a new user showed was missing. Never edit after it lands.

-- The last message seq a session's agent was given: a resumed session is
-- sent every later message it has not seen, its own excepted.
ALTER TABLE sessions ADD COLUMN seen_seq INTEGER;

-- Files a message refers to (Kingdom's `refs:` front matter), as a JSON list.
ALTER TABLE messages ADD COLUMN refs TEXT NOT NULL DEFAULT '[]';

-- Where an imported thread came from (e.g. `kingdom:/repo/.kd/branches/main/threads/council-a8b3`),
-- so that importing the same directory again adds nothing.
ALTER TABLE threads ADD COLUMN origin TEXT;
CREATE UNIQUE INDEX threads_by_origin ON threads (origin) WHERE origin IS NOT NULL;

-- The order runs were started in: an answer's place in its thread is fixed
-- when its run starts, whenever it finishes.
ALTER TABLE runs ADD COLUMN ordinal INTEGER;
