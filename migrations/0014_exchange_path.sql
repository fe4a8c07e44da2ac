-- The PATH of the client that asked (issue 31): the agents of an exchange
-- are found on it and run with it, in every round and after a restart.
-- NULL: the daemon's own PATH. Never edit after it lands.
ALTER TABLE exchanges ADD COLUMN path TEXT;
