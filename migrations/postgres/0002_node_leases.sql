-- Each node's own lease (kdd --cluster-lease-ms): a node is live while its
-- last heartbeat is younger than *its* lease, whatever the lease of the
-- node judging it.
ALTER TABLE nodes ADD COLUMN lease_ms bigint NOT NULL DEFAULT 15000 CHECK (lease_ms > 0);
