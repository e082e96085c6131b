package materializer

import "strings"

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

// qLockFences reads the fences of the chunk's leases on the chunk's
// partition under row locks for the rest of the transaction: the verdicts
// of the chunk are judged against them in offset order. A fence guards
// one lease on one partition (migration 0004): Kafka orders records only
// within a partition, and a lease that moved after its route grew has
// older generations on another one (FM31).
const qLockFences = `SELECT lease, token FROM fences WHERE barrier_partition = $2 AND lease = ANY($1) FOR UPDATE`

// qAdvanceFence installs a new generation: only after the barrier verified
// (HMAC, lease binding) and its token is above the current fence, checked
// by the caller under qLockFence's lock; the WHERE repeats the order so a
// fence can never move down.
const qAdvanceFence = `
INSERT INTO fences (lease, token, owner, producer_id, producer_epoch, barrier_partition, barrier_offset)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (lease, barrier_partition) DO UPDATE
   SET token = EXCLUDED.token, owner = EXCLUDED.owner, producer_id = EXCLUDED.producer_id,
       producer_epoch = EXCLUDED.producer_epoch, barrier_offset = EXCLUDED.barrier_offset, updated_at = clock_timestamp()
 WHERE fences.token < EXCLUDED.token`

// qCreateStage makes the session's stage: the chunk's data records of the
// generation in force, copied in for qApplyStaged and gone at the end of
// the transaction. Being temporary, it is the session's own and writes no
// WAL. Every statement names its columns; changing them needs a new table
// name, since a pooled session may keep the table of an older version
// (fencegate_stage2 added digest, and headers may be NULL: a
// metadata-only row). Only a chunk that does not go straight into the
// ledger fills it (qCopySavepoint).
const qCreateStage = `
CREATE TEMP TABLE IF NOT EXISTS fencegate_stage2 (
    "offset" bigint NOT NULL, token bigint NOT NULL, seq integer NOT NULL, first boolean NOT NULL,
    lease text NOT NULL, owner_id text NOT NULL, batch_id text NOT NULL, headers text,
    key bytea, value bytea, digest bytea
) ON COMMIT DELETE ROWS`

// stageTable and stageColumns are what COPY fills (stage.Values' order):
// fixed-width columns first, the record's bytes last.
var (
	stageTable   = []string{"fencegate_stage2"}
	stageColumns = []string{"offset", "token", "seq", "first", "lease", "owner_id", "batch_id", "headers", "key", "value", "digest"}
)

// qKnownKey asks whether a dedup key is in the ledger on the chunk's
// partition: the first data record's, before its chunk is copied straight
// into the ledger. A known key (a redelivery) sends the chunk through the
// stage without trying the COPY; the answer only saves work, the unique
// key still decides.
const qKnownKey = `
SELECT EXISTS (SELECT 1 FROM accepted_records WHERE lease = $1 AND owner_id = $2 AND batch_id = $3 AND seq = $4 AND partition = $5)`

// qCopySavepoint opens the subtransaction in which a chunk whose data
// records all have distinct dedup keys is copied straight into the ledger
// (ledgerTable, ledgerColumns). The ledger's unique constraint on the key
// (accepted_records_dedup_key) is the dedup rule: a key applied before
// fails the COPY with unique_violation, and qRollbackCopy undoes the COPY
// alone, after which the chunk takes the staged path, which files every
// duplicate exactly. Nothing else runs between the savepoint and the COPY.
const (
	qCopySavepoint = `SAVEPOINT fencegate_copy`
	qRollbackCopy  = `ROLLBACK TO SAVEPOINT fencegate_copy`
)

// ledgerTable and ledgerColumns are what the straight COPY fills
// (ledgerRows.Values' order); accepted_at takes its default.
var (
	ledgerTable   = []string{"accepted_records"}
	ledgerColumns = []string{"lease", "owner_id", "token", "batch_id", "seq", "topic", "partition", "offset", "key", "value", "headers", "digest"}
)

// qApplyStaged applies the staged data records in one statement. A
// record enters the ledger only if its dedup key (lease, owner, batch id,
// seq) is new to the ledger on the chunk's partition (ledger migration
// 0009: per lease and partition, as the fences and the trusted topic's
// window, FM84) and first in the chunk; every other staged
// record gets a duplicate receipt. The arbiter is the ledger's own unique
// constraint on the key (accepted_records_dedup_key; applied_keys is a
// view of it): a conflict on anything else, such as an offset already in
// the ledger, is an error, not a duplicate. The key is the owner's:
// another owner's batch with the same id is a different batch and must not
// be filed as a duplicate (FM26). Keys are inserted in byte order (the
// straight COPY's order too), so two transactions never wait for each
// other's keys in opposite orders. It returns the offsets of the
// duplicates.
const qApplyStaged = `
WITH a AS (
    INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", key, value, headers, digest)
    SELECT lease, owner_id, token, batch_id, seq, $1, $2, "offset", key, value, headers::jsonb, digest
      FROM fencegate_stage2 WHERE first
     ORDER BY lease COLLATE "C", owner_id COLLATE "C", batch_id COLLATE "C", seq
    ON CONFLICT (lease, owner_id, batch_id, seq, partition) DO NOTHING
    RETURNING "offset"
), d AS (
    INSERT INTO rejected_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", reason, detail)
    SELECT lease, owner_id, token, batch_id, seq, $1, $2, "offset", 'duplicate',
           format('batch %s seq %s of owner %s already applied', to_json(batch_id), seq, to_json(owner_id))
      FROM fencegate_stage2 WHERE "offset" NOT IN (SELECT "offset" FROM a)
    RETURNING "offset"
)
SELECT "offset" FROM d`

// qReject writes the receipt of a refused record.
const qReject = `
INSERT INTO rejected_records (lease, token, batch_id, seq, topic, partition, "offset", reason, detail, owner_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// qLockMarks reads the rollout state each pattern's markers set on the
// chunk's partition so far, under row locks for the transaction (FM21):
// the chunk's records are judged against them in offset order, as
// against the fences.
const qLockMarks = `SELECT pattern, state, version FROM rollout_marks WHERE topic = $1 AND partition = $2 FOR UPDATE`

// qAdvanceMark installs a rollout marker's state on its partition; the
// WHERE repeats the caller's check that versions only grow.
const qAdvanceMark = `
INSERT INTO rollout_marks (topic, partition, pattern, state, version, "offset")
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (topic, partition, pattern) DO UPDATE
   SET state = EXCLUDED.state, version = EXCLUDED.version, "offset" = EXCLUDED."offset"
 WHERE rollout_marks.version < EXCLUDED.version`

// qKeep keeps a record its pattern's rollout state does not let the
// ledger refuse (observe, gated), with the verdict it would have had.
const qKeep = `
INSERT INTO kept_records (topic, partition, "offset", verdict, detail, lease, token, owner_id, batch_id, seq, key, value, headers)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::text::jsonb)`

// qUpsertCheckpoint keeps a lease's checkpoint record of the generation in
// force (judged by the caller under the fence's lock) when it is newer
// than the lease's row: a larger token, or the same token at a larger
// offset. Token first: the row is per lease, and a lease that moved
// partitions (FM31) has its older generations' offsets on another one.
const qUpsertCheckpoint = `
INSERT INTO checkpoints (lease, token, owner_id, batch_id, topic, partition, "offset", value, value_type)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (lease) DO UPDATE
   SET token = EXCLUDED.token, owner_id = EXCLUDED.owner_id, batch_id = EXCLUDED.batch_id, topic = EXCLUDED.topic,
       partition = EXCLUDED.partition, "offset" = EXCLUDED."offset", value = EXCLUDED.value,
       value_type = EXCLUDED.value_type, updated_at = clock_timestamp()
 WHERE EXCLUDED.token > checkpoints.token OR (EXCLUDED.token = checkpoints.token AND EXCLUDED."offset" > checkpoints."offset")`

// qSetRetention records the retention the materializer promises
// (ledger_retention): NULL keeps the ledger forever. Prune reads it
// (qReadRetention) and never deletes a row younger than it (FM71).
const qSetRetention = `
INSERT INTO ledger_retention (retention) VALUES (make_interval(secs => $1::double precision))
ON CONFLICT (only_row) DO UPDATE SET retention = EXCLUDED.retention, updated_at = clock_timestamp()`

// qReadRetention reads the recorded retention: no row is the default
// (DefaultLedgerRetention), a NULL retention is forever.
const qReadRetention = `SELECT retention IS NULL, coalesce(date_part('epoch', retention), 0) FROM ledger_retention`

// qClock is the ledger's clock: accepted_at, rejected_at and kept_at are
// its clock_timestamp(), so the prune cutoff is measured on the same
// clock (a skewed host could otherwise prune inside the window).
const qClock = `SELECT clock_timestamp()`

// qPrunePartitions lists the partitions the ledger holds rows of: every
// row of the three pruned tables was written in the transaction that
// advanced its partition's position.
const qPrunePartitions = `SELECT topic, partition FROM consumer_positions ORDER BY topic, partition`

// The prune statements delete, from one partition's rows from offset $3
// on, the first $5 by offset that are older than the cutoff $4; with $6
// (dry run) they delete nothing and count the same rows. Each is one
// short statement of its own: it locks at most $5 rows, which no apply
// transaction writes again (the materializer only inserts, at the
// partition's head), and the cutoff is at least the retention older than
// now (Prune), so no row the dedup window needs is deleted (FM71). They
// return how many rows were (or would be) deleted, how many the batch
// looked at, whether all of those were old (the partition's oldest rows
// go first: offsets are applied in order, so a young row ends the
// partition's prune), and the last offset looked at (the next batch
// starts after it). a is the batch, d its deletions: the batch's old
// rows, deleted by a range of the primary key (a join to the batch could
// be planned as a scan of the table per row). The range holds no other
// rows: new rows of the partition come after every row it has.
var qPruneAccepted = pruneQuery("accepted_records", "accepted_at")

// qPruneRejected is qPruneAccepted for refusal receipts (FM15 keeps
// them for the retention, not forever).
var qPruneRejected = pruneQuery("rejected_records", "rejected_at")

// qPruneKept is qPruneAccepted for the records a rollout kept (FM21).
var qPruneKept = pruneQuery("kept_records", "kept_at")

// pruneQuery is the prune statement of one record table whose rows are
// timed by column at (both the package's own names, never input).
func pruneQuery(table, at string) string {
	return strings.NewReplacer("{table}", table, "{at}", at).Replace(`
WITH a AS (
    SELECT "offset", {at} < $4 AS old FROM {table}
     WHERE topic = $1 AND partition = $2 AND "offset" >= $3 ORDER BY "offset" LIMIT $5
), d AS (
    DELETE FROM {table}
     WHERE topic = $1 AND partition = $2 AND "offset" BETWEEN $3 AND (SELECT max("offset") FROM a)
       AND {at} < $4 AND NOT $6
    RETURNING 1
)
SELECT CASE WHEN $6 THEN (SELECT count(*) FROM a WHERE old) ELSE (SELECT count(*) FROM d) END,
       (SELECT count(*) FROM a), coalesce((SELECT bool_and(old) FROM a), true),
       coalesce((SELECT max("offset") FROM a), -1)`)
}

// qClaimDatabase claims the ledger database for the ledger or the mirror
// unless either claimed it (FM85): the two must never write the same
// fences and checkpoints. A mirror never claims a database a ledger has
// applied records to.
const qClaimDatabase = `
INSERT INTO ledger_owner (kind) SELECT $1::text
 WHERE $1::text = 'ledger' OR NOT EXISTS (SELECT 1 FROM consumer_positions)
ON CONFLICT (one) DO NOTHING`

// qDatabaseOwner reads who keeps the ledger database (no row: nobody
// claimed it, and a ledger has applied records to it).
const qDatabaseOwner = `SELECT kind FROM ledger_owner`

// qMirrorPosition moves a partition's position forward to the offset past
// a chunk the trusted sink committed (its mirror, FM82); never back.
const qMirrorPosition = `
INSERT INTO consumer_positions (topic, partition, next_offset) VALUES ($1, $2, $3)
ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset
 WHERE consumer_positions.next_offset < EXCLUDED.next_offset`
