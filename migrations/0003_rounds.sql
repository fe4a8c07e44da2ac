-- Council rounds and retries. Never edit after it lands.

-- A retried answer names the failed message it replaces; clients show it
-- in that message's place.
ALTER TABLE messages ADD COLUMN replaces INTEGER;

-- The King's message whose exchange a run belongs to.
ALTER TABLE runs ADD COLUMN exchange INTEGER;
ALTER TABLE runs ADD COLUMN replaces INTEGER;
