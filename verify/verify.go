// Package verify checks fencegate's invariants on what Kafka holds, read
// the way downstream readers must read it (read_committed, with
// confluent-kafka-go). The gateway tests, the materializer tests and the
// load harness use it.
//
// It must never read through the gateway or the ledger, nor import either:
// a checker that shared their code could not catch their faults.
//
//   - I2 no stale write: in a lease partition, no data record with token T
//     appears after a barrier with token > T, and every data record's
//     token equals the latest preceding barrier's.
//   - I3 no acked loss: every batch answered 2xx is present, committed, in
//     order, with all its records.
package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/kafkaconn"
)

// Record is one committed record of a lease partition: its position and
// what its fencegate headers say.
type Record struct {
	Offset    int64
	Timestamp time.Time
	barrier.Stamp
	// Marker: a rollout marker (barrier.IsMarker), written by the admin
	// API's rollout to every partition of a pattern: neither a lease's
	// data nor its barrier.
	Marker bool
	Key    []byte
	Value  []byte
}

// ReadPartition reads topic/partition from the beginning to its end with
// isolation.level=read_committed, over conn (TLS, SASL as configured).
//
// The end is the high watermark when the call starts, not the last stable
// offset: a read_committed reader gets nothing past the first record of a
// transaction still open, so records committed after that record by other
// producers stay out of reach until the transaction ends. ReadPartition
// waits for that (a commit, an abort, or the broker aborting it at the
// producer's transaction.timeout.ms) and fails at timeout naming the
// offset where the open transaction holds readers, rather than returning
// a prefix of the partition as if it were the whole. (librdkafka's
// QueryWatermarkOffsets on a read_committed consumer answers the last
// stable offset as the high end, which is why the end is listed here with
// read_uncommitted.)
func ReadPartition(conn kafkaconn.Config, topic string, partition int32, timeout time.Duration) ([]Record, error) {
	var recs []Record
	err := EachMessage(conn, topic, partition, timeout, func(m *kafka.Message) { recs = append(recs, parse(m)) })
	return recs, err
}

// EachMessage reads topic/partition as ReadPartition does and hands each
// committed record to each, whole (headers included), in offset order.
func EachMessage(conn kafkaconn.Config, topic string, partition int32, timeout time.Duration, each func(*kafka.Message)) error {
	deadline := time.Now().Add(timeout)
	ends, err := listEnds(conn, topic, partition, timeout)
	if err != nil {
		return err
	}
	if ends.high <= ends.low {
		return nil // empty partition
	}
	cm, err := conn.ConfigMap()
	if err != nil {
		return err
	}
	for k, v := range (kafka.ConfigMap{"group.id": "fencegate-verify",
		"isolation.level": "read_committed", "enable.auto.commit": false,
		"go.logs.channel.enable": false, "enable.metrics.push": false}) {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return err
	}
	defer c.Close()
	tp := kafka.TopicPartition{Topic: &topic, Partition: partition, Offset: kafka.OffsetBeginning}
	if err := c.Assign([]kafka.TopicPartition{tp}); err != nil {
		return err
	}
	err = readUntil(c, tp, ends.high, deadline, each)
	if err != nil {
		// Where the readers are held, for the error: the last stable
		// offset now.
		if now, lerr := listEnds(conn, topic, partition, 10*time.Second); lerr == nil && now.stable < ends.high {
			err = fmt.Errorf("%w; the last stable offset is %d: a transaction open since that offset has not ended, and read_committed readers see nothing after it", err, now.stable)
		}
	}
	return err
}

// logEnds are a partition's offsets as ListOffsets answers them.
type logEnds struct {
	low, high, stable int64 // log start, high watermark, last stable offset
}

// listEnds lists the log start offset, the high watermark
// (read_uncommitted) and the last stable offset (read_committed) of
// topic/partition.
func listEnds(conn kafkaconn.Config, topic string, partition int32, timeout time.Duration) (logEnds, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	opts, err := conn.KgoOpts()
	if err != nil {
		return logEnds{}, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return logEnds{}, err
	}
	defer cl.Close()
	var e logEnds
	for _, q := range []struct {
		isolation int8
		timestamp int64
		into      *int64
	}{{0, -2, &e.low}, {0, -1, &e.high}, {1, -1, &e.stable}} {
		if *q.into, err = listOffset(ctx, cl, topic, partition, q.isolation, q.timestamp); err != nil {
			return logEnds{}, err
		}
	}
	return e, nil
}

// readUntil polls until the consumer's position reaches high (aborted
// records and transaction markers advance the position without being
// returned), handing each record to each.
func readUntil(c *kafka.Consumer, tp kafka.TopicPartition, high int64, deadline time.Time, each func(*kafka.Message)) error {
	n := 0
	for {
		pos, err := c.Position([]kafka.TopicPartition{tp})
		if err == nil && len(pos) == 1 && int64(pos[0].Offset) >= high {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("read %s[%d]: reached %d records before the deadline, end is offset %d", *tp.Topic, tp.Partition, n, high)
		}
		ev := c.Poll(50)
		switch m := ev.(type) {
		case *kafka.Message:
			n++
			each(m)
		case kafka.Error:
			if m.IsFatal() {
				return m
			}
		}
	}
}

func parse(m *kafka.Message) Record {
	st, _ := barrier.ReadStamp(m.Headers)
	return Record{Offset: int64(m.TopicPartition.Offset), Timestamp: m.Timestamp, Stamp: st, Marker: barrier.IsMarker(m.Headers), Key: m.Key, Value: m.Value}
}

// Violation is one breach of an invariant.
type Violation struct {
	Invariant string
	Offset    int64
	Detail    string
}

// String names the invariant, the offset and what was seen.
func (v Violation) String() string {
	return fmt.Sprintf("%s at offset %d: %s", v.Invariant, v.Offset, v.Detail)
}

// NoStaleWrite checks I2 for every lease in recs (one partition, offset
// order).
func NoStaleWrite(recs []Record) []Violation {
	var out []Violation
	fence := map[string]int64{} // lease -> token of its latest barrier
	for _, r := range recs {
		if r.Marker {
			continue
		}
		cur, seen := fence[r.Lease]
		if r.Barrier {
			// A barrier at or below the fence (a replica's late handover,
			// FM06) opens nothing: the fence stays, and data under it is
			// caught below. The materializer rejects such a barrier.
			fence[r.Lease] = max(cur, r.Token)
			continue
		}
		if !seen || barrier.Judge(cur, r.Token) != barrier.Current {
			out = append(out, Violation{"I2", r.Offset, fmt.Sprintf("data of %s token %d under barrier token %d", r.Lease, r.Token, cur)})
		}
	}
	return out
}

// Batch is an acknowledged batch: what the gateway answered 2xx.
type Batch struct {
	Lease   string
	Token   int64
	BatchID string
	Offsets []int64
}

// NoAckedLoss checks I3: every acknowledged batch is present at its
// offsets, committed, with its records in order and nothing else of the
// batch in between (no other copy of one of its records between its
// first and last offset); acked batches of one generation (lease and
// token) appear in acknowledgement order. An acknowledgement with no
// offsets says nothing of where the batch is and fails: it cannot be
// checked. Across generations the fence orders them: a batch an old
// generation committed before the new barrier may be answered after the
// new generation's first batches (its replica was paused between commit
// and reply).
func NoAckedLoss(recs []Record, acked []Batch) []Violation {
	byOffset := make(map[int64]Record, len(recs))
	copies := map[string][]int64{} // lease/token/batch -> offsets of its records
	for _, r := range recs {
		byOffset[r.Offset] = r
		if !r.Barrier {
			k := batchKey(r.Lease, r.Token, r.Batch)
			copies[k] = append(copies[k], r.Offset)
		}
	}
	var out []Violation
	type generation struct {
		lease string
		token int64
	}
	last := map[generation]int64{}
	for _, b := range acked {
		if len(b.Offsets) == 0 {
			out = append(out, Violation{"I3", -1, fmt.Sprintf("acked %s batch %s (token %d) with no offsets: nothing to check it by", b.Lease, b.BatchID, b.Token)})
			continue
		}
		gen := generation{b.Lease, b.Token}
		for seq, off := range b.Offsets {
			r, ok := byOffset[off]
			if !ok || r.Barrier || r.Lease != b.Lease || r.Token != b.Token || r.Batch != b.BatchID || r.Seq != seq {
				out = append(out, Violation{"I3", off, fmt.Sprintf("acked %s batch %s seq %d (token %d) missing or different: %+v", b.Lease, b.BatchID, seq, b.Token, r)})
			}
			if prev, ok := last[gen]; ok && off <= prev {
				out = append(out, Violation{"I3", off, fmt.Sprintf("acked %s batch %s (token %d) out of order", b.Lease, b.BatchID, b.Token)})
			}
			last[gen] = off
		}
		out = append(out, between(b, copies[batchKey(b.Lease, b.Token, b.BatchID)])...)
	}
	return out
}

// between flags the records of acked batch b (at offs) that lie between
// its first and last offset and are not at its offsets: another copy of
// one of its records inside it.
func between(b Batch, offs []int64) []Violation {
	own := make(map[int64]bool, len(b.Offsets))
	lo, hi := b.Offsets[0], b.Offsets[0]
	for _, off := range b.Offsets {
		own[off] = true
		lo, hi = min(lo, off), max(hi, off)
	}
	var out []Violation
	for _, off := range offs {
		if off > lo && off < hi && !own[off] {
			out = append(out, Violation{"I3", off, fmt.Sprintf("acked %s batch %s (token %d): another record of the batch between its offsets %d..%d", b.Lease, b.BatchID, b.Token, lo, hi)})
		}
	}
	return out
}

func batchKey(lease string, token int64, batch string) string {
	return fmt.Sprintf("%s/%d/%s", lease, token, batch)
}
