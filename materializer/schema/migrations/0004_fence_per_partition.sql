-- 0004: a fence guards one lease on one partition: the key of fences
-- becomes (lease, barrier_partition).
--
-- A lease lives on one partition while its route's partition count stays
-- the same, so every existing row (one per lease, on the partition of its
-- last barrier) keeps its meaning. After a route grows, a lease may move
-- (shard:17 from partition 1 to 17): its older barriers and data sit on
-- one partition and its newer ones on another, and Kafka orders records
-- only within a partition. A fence per lease would judge partition 1's
-- older generation against partition 17's newer one whenever a rebuild
-- happened to apply 17 first, so the ledger would depend on the order
-- partitions are applied in. Per partition, every verdict follows from
-- that partition's own records in offset order (docs/design.md,
-- "Placement"; FM31).

ALTER TABLE fences DROP CONSTRAINT IF EXISTS fences_pkey;
ALTER TABLE fences ADD CONSTRAINT fences_pkey PRIMARY KEY (lease, barrier_partition);

COMMENT ON TABLE fences IS
    'Per lease and partition, the generation the materializer accepts: advanced only by a verified barrier read from that partition with a larger token.';
