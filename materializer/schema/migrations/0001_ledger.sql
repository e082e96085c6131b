-- 0001: the materializer's state: fences, the trusted ledger, dedup keys,
-- receipts of refused records and consumed positions. Table names are part
-- of the contract: operators and analytics query them.
--
-- Until the ledger had a migration line of its own, these tables were the
-- lease store's migration 2; IF NOT EXISTS lets such a database adopt them
-- unchanged.

-- Per lease, the generation the materializer currently accepts. Advanced
-- only by a barrier whose HMAC verifies, signed for this lease, with a
-- larger token (FM11).
CREATE TABLE IF NOT EXISTS fences (
    lease             text        PRIMARY KEY,
    token             bigint      NOT NULL,
    owner             text        NOT NULL,
    producer_id       bigint      NOT NULL,
    producer_epoch    integer     NOT NULL,
    barrier_partition integer     NOT NULL,
    barrier_offset    bigint      NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The ledger: the one source downstream readers may trust.
CREATE TABLE IF NOT EXISTS accepted_records (
    lease       text        NOT NULL,
    token       bigint      NOT NULL,
    batch_id    text        NOT NULL,
    seq         integer     NOT NULL,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    key         bytea,
    value       bytea,
    headers     jsonb       NOT NULL DEFAULT '{}',
    accepted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (topic, partition, "offset"),
    UNIQUE (lease, batch_id, seq)
);

-- Dedup across generations: a (lease, batch_id, seq) is applied once.
CREATE TABLE IF NOT EXISTS applied_keys (
    lease    text    NOT NULL,
    batch_id text    NOT NULL,
    seq      integer NOT NULL,
    PRIMARY KEY (lease, batch_id, seq)
);

-- Every refused record, with its reason: a refused write that vanishes is
-- a missing incident receipt (FM15).
CREATE TABLE IF NOT EXISTS rejected_records (
    lease       text,
    token       bigint,
    batch_id    text,
    seq         integer,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    reason      text        NOT NULL CHECK (reason IN
                    ('stale', 'unfenced', 'duplicate', 'bad_barrier', 'malformed')),
    detail      text        NOT NULL DEFAULT '',
    rejected_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (topic, partition, "offset")
);

CREATE INDEX IF NOT EXISTS rejected_records_lease ON rejected_records (lease, reason);

-- The next offset to apply per partition, advanced by compare-and-set in
-- the transaction that applies the records (FM13, FM14). Kafka group
-- offsets are only a hint.
CREATE TABLE IF NOT EXISTS consumer_positions (
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    PRIMARY KEY (topic, partition)
);
