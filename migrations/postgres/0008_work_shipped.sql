-- A member's branch pushed for a pull request (issue 34 item 5): where,
-- which commit, when, and the pull request's (or compare page's) URL, as
-- the JSON of kd_proto's `Shipped`. Never edit after it lands.

ALTER TABLE worktrees ADD COLUMN shipped text;
