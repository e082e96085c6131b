package materializer

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The trusted sink's mirror: with no Postgres ledger, the sink keeps the
// ledger database's fences and checkpoints tables (a row per lease and
// partition, a row per lease) from its state, so that the gateway's
// checkpoint read (GET /v1/leases/{name}/checkpoint), which waits for the
// caller's fence and then reads the lease's checkpoint, answers as with
// the ledger (docs/ledger.md, "The trusted topic").
//
// The mirror of a chunk is written after the chunk's Kafka commit, its
// fences and checkpoints in one Postgres transaction, chunk after chunk
// in offset order per partition; a failed mirror stops Run, and the next
// owner of the partition mirrors its whole state before it reads a
// record. So a fence row never moves ahead of a checkpoint committed
// before it, which is what makes the read's answer final for every
// earlier generation. Both statements only move rows forward (a larger
// token; a newer checkpoint), so mirroring again is harmless. A chunk's
// mirror also moves the partition's consumer_positions row to the offset
// past the chunk: a checkpoint read of a lease that moved partitions waits
// for the ledger's position on its earlier partitions (FM82), and `routes
// set-partitions` for every partition's, and with the mirror that
// position is the sink's.

// mirrored is what a chunk changed of the state the mirror keeps.
type mirrored struct {
	fences      map[string]fenceState
	checkpoints map[string]checkpointState
}

func (x mirrored) empty() bool { return len(x.fences) == 0 && len(x.checkpoints) == 0 }

// mirror writes x for partition key in one transaction: checkpoints
// first, then fences, then the position next (one transaction: a reader
// sees all or none). next < 0 writes no position.
func (t *TrustedSink) mirror(ctx context.Context, key partitionKey, x mirrored, next int64) error {
	if t.cfg.Mirror == nil || (x.empty() && next < 0) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	var b pgx.Batch
	for lease, c := range x.checkpoints {
		b.Queue(qUpsertCheckpoint, lease, c.Token, c.Owner, c.Batch, key.topic, key.partition, c.Offset, c.Value, checkpointType(c.Type))
	}
	for lease, f := range x.fences {
		b.Queue(qAdvanceFence, lease, f.Token, f.Owner, f.ProducerID, int32(f.Epoch), key.partition, f.Offset)
	}
	if next >= 0 {
		b.Queue(qMirrorPosition, key.topic, key.partition, next)
	}
	return pgx.BeginFunc(ctx, t.cfg.Mirror, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, &b).Close()
	})
}
