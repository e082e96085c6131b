-- 0003: applied_keys becomes a view of accepted_records' dedup key.
--
-- Every key in applied_keys was written by the statement that wrote its
-- record into accepted_records, and accepted_records has carried the same
-- key as a unique constraint (accepted_records_dedup_key, migration 0002)
-- all along: the table was a second copy of that index, and writing it
-- cost a heap row, a btree entry and a speculative insertion per accepted
-- record. From here the ledger's own unique constraint is the one arbiter
-- of dedup (the materializer's ON CONFLICT names it), and applied_keys
-- stays readable under its name and columns for operators and analytics.
--
-- A key in applied_keys without its ledger row would be dedup memory that
-- the view cannot carry; no version of the materializer wrote one, and a
-- ledger holding one refuses this migration rather than forget the key.

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM applied_keys k
                WHERE NOT EXISTS (SELECT 1 FROM accepted_records a
                                   WHERE a.lease = k.lease AND a.owner_id = k.owner_id
                                     AND a.batch_id = k.batch_id AND a.seq = k.seq)) THEN
        RAISE EXCEPTION 'applied_keys holds keys that accepted_records does not; '
            'dedup would forget them: restore their ledger rows (or rebuild the ledger from offset 0) first';
    END IF;
END $$;

DROP TABLE applied_keys;

CREATE VIEW applied_keys AS
    SELECT lease, owner_id, batch_id, seq FROM accepted_records;

COMMENT ON VIEW applied_keys IS
    'The dedup keys of the ledger: a (lease, owner_id, batch_id, seq) is applied once (accepted_records_dedup_key).';
