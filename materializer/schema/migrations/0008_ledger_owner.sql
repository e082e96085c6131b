-- 0008: who keeps this database's fences and checkpoints (FM85).
--
-- The Postgres ledger ('ledger', materialize --sinks postgres) and a
-- kafka-only trusted sink's mirror ('mirror') both write fences and
-- checkpoints, each by its own judging: sharing one database, the
-- mirror's fences made the ledger refuse valid records (bad_barrier,
-- stale). The first of them to start claims the database (one row); the
-- other refuses to start. A database a ledger has already applied
-- records to is the ledger's.
CREATE TABLE ledger_owner (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    kind       text NOT NULL CHECK (kind IN ('ledger', 'mirror')),
    claimed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO ledger_owner (kind) SELECT 'ledger' WHERE EXISTS (SELECT 1 FROM consumer_positions);
