-- 0009: the ledger's dedup key is per lease and partition, as its fences
-- are (0004) and as the trusted topic's dedup window is (FM84):
-- (lease, owner_id, batch_id, seq, partition).
--
-- Kafka orders records only within a partition. Keyed per lease alone, a
-- batch its owner resent after the route grew (the lease moved from
-- partition 1 to 17) was accepted on whichever partition the ledger
-- applied first: the live ledger kept partition 1's copy, a rebuild that
-- applied partition 17 first kept the other, and the trusted topic, whose
-- window is per lease and partition, kept both. Now every sink and every
-- rebuild judges each partition from its own records alone: the resent
-- batch is kept once on each partition, by all of them.
--
-- The constraint is rebuilt under the table's lock: on a large ledger
-- this migration takes as long as building the index.
ALTER TABLE accepted_records DROP CONSTRAINT accepted_records_dedup_key;
ALTER TABLE accepted_records ADD CONSTRAINT accepted_records_dedup_key UNIQUE (lease, owner_id, batch_id, seq, partition);

CREATE OR REPLACE VIEW applied_keys AS
    SELECT lease, owner_id, batch_id, seq, partition FROM accepted_records;

COMMENT ON VIEW applied_keys IS
    'The dedup keys of the ledger: a (lease, owner_id, batch_id, seq) is applied once per partition (accepted_records_dedup_key).';
