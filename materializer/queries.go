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

// qCreateStage makes the session's stage: the chunk's data records of the
// generation in force, copied in for qApplyStaged and gone at the end of
// the transaction. Being temporary, it is the session's own and writes no
// WAL. Every statement names its columns; changing them needs a new table
// name, since a pooled session may keep the table of an older version.
const qCreateStage = `
CREATE TEMP TABLE IF NOT EXISTS fencegate_stage (
    "offset" bigint NOT NULL, token bigint NOT NULL, seq integer NOT NULL, first boolean NOT NULL,
    lease text NOT NULL, owner_id text NOT NULL, batch_id text NOT NULL, headers text NOT NULL,
    key bytea, value bytea
) ON COMMIT DELETE ROWS`

// stageTable and stageColumns are what COPY fills (stage.Values' order):
// fixed-width columns first, the record's bytes last.
var (
	stageTable   = []string{"fencegate_stage"}
	stageColumns = []string{"offset", "token", "seq", "first", "lease", "owner_id", "batch_id", "headers", "key", "value"}
)

// qApplyStaged applies the staged data records in one statement. A
// record's dedup key (lease, owner, batch id, seq) is remembered, and the
// record enters the ledger, only if the key is new to the ledger and
// first in the chunk; every other staged record gets a duplicate receipt.
// The key is the owner's: another owner's batch with the same id is a
// different batch and must not be filed as a duplicate (FM26). Keys are
// inserted in key order, so two transactions never wait for each other's
// keys in opposite orders. It returns the offsets of the duplicates.
const qApplyStaged = `
WITH k AS (
    INSERT INTO applied_keys (lease, owner_id, batch_id, seq)
    SELECT lease, owner_id, batch_id, seq FROM fencegate_stage WHERE first
     ORDER BY lease, owner_id, batch_id, seq
    ON CONFLICT DO NOTHING
    RETURNING lease, owner_id, batch_id, seq
), a AS (
    INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", key, value, headers)
    SELECT s.lease, s.owner_id, s.token, s.batch_id, s.seq, $1, $2, s."offset", s.key, s.value, s.headers::jsonb
      FROM fencegate_stage s JOIN k USING (lease, owner_id, batch_id, seq) WHERE s.first
    RETURNING "offset"
), d AS (
    INSERT INTO rejected_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", reason, detail)
    SELECT lease, owner_id, token, batch_id, seq, $1, $2, "offset", 'duplicate',
           format('batch %s seq %s of owner %s already applied', to_json(batch_id), seq, to_json(owner_id))
      FROM fencegate_stage WHERE "offset" NOT IN (SELECT "offset" FROM a)
    RETURNING "offset"
)
SELECT "offset" FROM d`

// qReject writes the receipt of a refused record.
const qReject = `
INSERT INTO rejected_records (lease, token, batch_id, seq, topic, partition, "offset", reason, detail, owner_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
