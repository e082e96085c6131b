-- 0005: what the ledger keeps while a route pattern's fleet moves onto the
-- gateway (docs/design.md#rollout, FM21).
--
-- The rollout state reaches the materializer in the log itself: a signed
-- rollout marker on every partition of the pattern's topic. rollout_marks
-- is the state each partition's markers have set so far, advanced in the
-- transaction that applies the marker, like a fence: a rebuild from
-- offset 0 judges every record by the state in force where it was written.
CREATE TABLE rollout_marks (
    topic     text    NOT NULL,
    partition integer NOT NULL,
    pattern   text    NOT NULL,
    state     text    NOT NULL CHECK (state IN ('observe', 'gated', 'enforced')),
    version   bigint  NOT NULL,
    "offset"  bigint  NOT NULL,
    PRIMARY KEY (topic, partition, pattern)
);

-- Records the materializer would refuse (stale, unfenced, or written
-- without any fencegate stamp: a direct client's old binary) but keeps,
-- because their pattern is in observe or gated where they were written.
-- verdict is what they would have been refused as. They are not in
-- accepted_records and never take part in dedup: a reader that wants
-- every record any worker wrote reads ledger_records.
CREATE TABLE kept_records (
    topic     text        NOT NULL,
    partition integer     NOT NULL,
    "offset"  bigint      NOT NULL,
    verdict   text        NOT NULL CHECK (verdict IN ('stale', 'unfenced', 'malformed')),
    detail    text        NOT NULL DEFAULT '',
    lease     text,
    token     bigint,
    owner_id  text,
    batch_id  text,
    seq       integer,
    key       bytea,
    value     bytea,
    headers   jsonb       NOT NULL DEFAULT '{}',
    kept_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (topic, partition, "offset")
);

-- The ledger with what was kept, in one shape: kept is NULL for a fenced
-- record (accepted_records) and the would-be verdict for a kept one.
CREATE VIEW ledger_records AS
    SELECT topic, partition, "offset", lease, token, owner_id, batch_id, seq, key, value, headers,
           NULL::text AS kept
      FROM accepted_records
    UNION ALL
    SELECT topic, partition, "offset", lease, token, owner_id, batch_id, seq, key, value, headers,
           verdict AS kept
      FROM kept_records;
