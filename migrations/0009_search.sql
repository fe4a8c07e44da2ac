-- Full-text search (beyond every peer): every message body, thread title
-- and summary, in FTS5 indexes over the tables themselves (external
-- content), kept in step inside each write's transaction.
-- A message is indexed up to its first 100,000 characters: an agent's
-- 16 MiB answer would otherwise cost the writer tens of MiB to index.
-- Never edit after it lands.

CREATE VIRTUAL TABLE search_messages USING fts5(
    body, content = 'messages', content_rowid = 'id', tokenize = 'porter unicode61 remove_diacritics 2',
    prefix = '2 3 4'
);
INSERT INTO search_messages (rowid, body) SELECT id, substr(body, 1, 100000) FROM messages;
-- New messages are indexed in batches, after they are written (db/search.rs):
-- indexing each one in its append would halve the append rate. This is
-- the last message id indexed; a search first indexes what is newer.
INSERT INTO counters (name, value) SELECT 'search_indexed', coalesce(max(id), 0) FROM messages;
CREATE TRIGGER messages_search_delete AFTER DELETE ON messages
WHEN old.id <= (SELECT value FROM counters WHERE name = 'search_indexed') BEGIN
    INSERT INTO search_messages (search_messages, rowid, body) VALUES ('delete', old.id, substr(old.body, 1, 100000));
END;
CREATE TRIGGER messages_search_update AFTER UPDATE OF body ON messages
WHEN old.id <= (SELECT value FROM counters WHERE name = 'search_indexed') BEGIN
    INSERT INTO search_messages (search_messages, rowid, body) VALUES ('delete', old.id, substr(old.body, 1, 100000));
    INSERT INTO search_messages (rowid, body) VALUES (new.id, substr(new.body, 1, 100000));
END;

CREATE VIRTUAL TABLE search_threads USING fts5(
    title, summary, content = 'threads', content_rowid = 'rowid', tokenize = 'porter unicode61 remove_diacritics 2'
);
INSERT INTO search_threads (rowid, title, summary) SELECT rowid, title, summary FROM threads;
CREATE TRIGGER threads_search_insert AFTER INSERT ON threads BEGIN
    INSERT INTO search_threads (rowid, title, summary) VALUES (new.rowid, new.title, new.summary);
END;
CREATE TRIGGER threads_search_delete AFTER DELETE ON threads BEGIN
    INSERT INTO search_threads (search_threads, rowid, title, summary) VALUES ('delete', old.rowid, old.title, old.summary);
END;
CREATE TRIGGER threads_search_update AFTER UPDATE OF title, summary ON threads BEGIN
    INSERT INTO search_threads (search_threads, rowid, title, summary) VALUES ('delete', old.rowid, old.title, old.summary);
    INSERT INTO search_threads (rowid, title, summary) VALUES (new.rowid, new.title, new.summary);
END;
