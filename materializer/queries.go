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

// qLockFence reads a lease's fence under a row lock for the rest of the
// transaction.
const qLockFence = `SELECT token FROM fences WHERE lease = $1 FOR UPDATE`

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

// qApplyKey remembers a dedup key; no row returned means it was applied
// before (duplicate).
const qApplyKey = `
INSERT INTO applied_keys (lease, batch_id, seq) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING RETURNING 1`

// qAccept writes a record into the ledger.
const qAccept = `
INSERT INTO accepted_records (lease, token, batch_id, seq, topic, partition, "offset", key, value, headers)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// qReject writes the receipt of a refused record.
const qReject = `
INSERT INTO rejected_records (lease, token, batch_id, seq, topic, partition, "offset", reason, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
