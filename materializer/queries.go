package materializer

// Every query of the materializer, named and commented with the rule it
// protects. All run inside the one transaction that applies a chunk of one
// partition's records.

// qEnsurePosition creates a partition's position at offset 0 once.
const qEnsurePosition = `
INSERT INTO consumer_positions (topic, partition, next_offset) VALUES ($1, $2, 0)
ON CONFLICT (topic, partition) DO NOTHING`

// qReadPosition reads where a partition's processing resumes.
const qReadPosition = `SELECT next_offset FROM consumer_positions WHERE topic = $1 AND partition = $2`

// qAdvancePosition is the compare-and-set on the consumed position (FM14):
// it matches only if nobody advanced the partition since we read it. It
// runs first in the transaction, so its row lock also serialises two
// materializers on one partition; the loser matches no row, rolls back and
// re-reads from the stored position.
const qAdvancePosition = `
UPDATE consumer_positions SET next_offset = $4
 WHERE topic = $1 AND partition = $2 AND next_offset = $3`

// qLockFences reads the fences of the chunk's leases under row locks for
// the rest of the transaction: the verdicts of the chunk are judged
// against them in offset order.
const qLockFences = `SELECT lease, token FROM fences WHERE lease = ANY($1) FOR UPDATE`

// qAdvanceFence installs a new generation: only after the barrier verified
// (HMAC, lease binding) and its token is above the current fence, checked
// by the caller under qLockFence's lock; the WHERE repeats the order so a
// fence can never move down.
const qAdvanceFence = `
INSERT INTO fences (lease, token, owner, producer_id, producer_epoch, barrier_partition, barrier_offset)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (lease) DO UPDATE
   SET token = EXCLUDED.token, owner = EXCLUDED.owner, producer_id = EXCLUDED.producer_id,
       producer_epoch = EXCLUDED.producer_epoch, barrier_partition = EXCLUDED.barrier_partition,
       barrier_offset = EXCLUDED.barrier_offset, updated_at = clock_timestamp()
 WHERE fences.token < EXCLUDED.token`

// qApplyData applies a data record of the generation in force: its dedup
// key (lease, owner, batch id, seq) is remembered, and the record enters
// the ledger only if the key is new; otherwise its receipt says duplicate.
// The key is the owner's: another owner's batch with the same id is a
// different batch and must not be filed as a duplicate (FM26). It returns
// whether the record was accepted. One statement, so the pipeline needs no
// answer before it sends the next record's.
const qApplyData = `
WITH k AS (
    INSERT INTO applied_keys (lease, owner_id, batch_id, seq) VALUES ($1::text, $12::text, $3::text, $4::int)
    ON CONFLICT DO NOTHING RETURNING 1
), a AS (
    INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", key, value, headers)
    SELECT $1::text, $12::text, $2::bigint, $3::text, $4::int, $5::text, $6::int, $7::bigint, $8::bytea, $9::bytea, $10::jsonb
     WHERE EXISTS (SELECT 1 FROM k)
    RETURNING 1
), d AS (
    INSERT INTO rejected_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", reason, detail)
    SELECT $1::text, $12::text, $2::bigint, $3::text, $4::int, $5::text, $6::int, $7::bigint, 'duplicate', $11::text
     WHERE NOT EXISTS (SELECT 1 FROM k)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM k)`

// qReject writes the receipt of a refused record.
const qReject = `
INSERT INTO rejected_records (lease, token, batch_id, seq, topic, partition, "offset", reason, detail, owner_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
