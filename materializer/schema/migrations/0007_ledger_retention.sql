-- 0007: the ledger bounded (docs/design.md, "Retention and the dedup
-- window"; FM71, FM72).
--
-- Metadata-only rows: a materializer run with --ledger-values drop keeps
-- an accepted record's place (topic, partition, offset), its stamp and
-- its dedup key, but not its key, value or headers: digest is the
-- SHA-256 of those three (materializer.Digest), so a reader can still
-- prove that a record of the raw topic is the one the ledger accepted.
-- A row either keeps its bytes (digest NULL) or only their digest
-- (key, value and headers NULL): a NULL value alone is a Kafka
-- tombstone, and digest IS NOT NULL is how a reader is told the value
-- is gone. The checks are NOT VALID: every existing row keeps its bytes
-- and satisfies them, and a large ledger is not scanned under lock.
ALTER TABLE accepted_records ADD COLUMN digest bytea;
ALTER TABLE accepted_records ALTER COLUMN headers DROP NOT NULL;
ALTER TABLE accepted_records ADD CONSTRAINT accepted_records_kept_or_digest CHECK (
    (digest IS NULL AND headers IS NOT NULL) OR
    (octet_length(digest) = 32 AND key IS NULL AND value IS NULL AND headers IS NULL)) NOT VALID;

-- The retention the materializer promises (fencegate materialize
-- --ledger-retention), one row: rows of accepted_records, rejected_records
-- and kept_records younger than it are never pruned, so a retry applied
-- within it of its key's first acceptance is filed as a duplicate.
-- retention NULL keeps every row forever; no row means the default
-- (materializer.DefaultLedgerRetention). Fences, positions, rollout marks
-- and checkpoints are state and are never pruned.
CREATE TABLE ledger_retention (
    only_row   boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    retention  interval    CHECK (retention > interval '0'),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- ledger_records tells a reader which rows lost their bytes: dropped is
-- true for a metadata-only row (key, value and headers NULL, digest
-- set). Kept records always keep their bytes.
CREATE OR REPLACE VIEW ledger_records AS
    SELECT topic, partition, "offset", lease, token, owner_id, batch_id, seq, key, value, headers,
           NULL::text AS kept, digest, digest IS NOT NULL AS dropped
      FROM accepted_records
    UNION ALL
    SELECT topic, partition, "offset", lease, token, owner_id, batch_id, seq, key, value, headers,
           verdict AS kept, NULL::bytea AS digest, false AS dropped
      FROM kept_records;
