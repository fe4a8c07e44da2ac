-- What a message, or the run writing it, is to a multicast completion
-- (F-X2): ballot, tally, synthesis or merge (NULL for everything else).
-- Never edit after it lands.
ALTER TABLE messages ADD COLUMN purpose TEXT;
ALTER TABLE runs ADD COLUMN purpose TEXT;
