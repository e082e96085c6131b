-- 0006: the latest accepted checkpoint of each lease (docs/design.md,
-- "Checkpoints"; FM48).
--
-- A batch may carry a checkpoint: one more record of the batch's own
-- Kafka transaction, after its data, flagged fencegate-checkpoint. The
-- materializer judges it against the fence like data; a current one moves
-- the lease's row here in the transaction that applies it, only forward:
-- a larger token, or the same token at a larger offset. A stale or
-- unfenced one gets a receipt in rejected_records, as data does.
--
-- One row per lease, not per partition: a lease moves partitions only
-- when none of its route's leases is live (FM31), and the token compared
-- first orders the generations across partitions; within a token, offsets
-- compare on the one partition a generation writes to.
CREATE TABLE checkpoints (
    lease      text        PRIMARY KEY,
    token      bigint      NOT NULL,
    owner_id   text        NOT NULL,
    batch_id   text        NOT NULL,
    topic      text        NOT NULL,
    partition  integer     NOT NULL,
    "offset"   bigint      NOT NULL,
    value      bytea       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
