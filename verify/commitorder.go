package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/kafkaconn"
)

// LogRecord is one record of a partition as the log holds it, aborted
// records and transaction markers included: what a read_uncommitted
// reader that keeps control records sees.
type LogRecord struct {
	Offset        int64
	ProducerID    int64
	ProducerEpoch int16
	Transactional bool
	// Control: a transaction marker; Commit says which kind.
	Control bool
	Commit  bool
	// Marker: a rollout marker (see Record).
	Marker bool
	barrier.Stamp
}

// ReadLog reads topic/partition from the beginning to its end with
// read_uncommitted, keeping control records, over conn (TLS, SASL as
// configured).
func ReadLog(conn kafkaconn.Config, topic string, partition int32, timeout time.Duration) ([]LogRecord, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	opts, err := conn.KgoOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	high, err := highWatermark(ctx, cl, topic, partition)
	if err != nil {
		return nil, err
	}
	var out []LogRecord
	for next := int64(0); next < high; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("read log %s[%d]: at offset %d of %d: %w", topic, partition, next, high, err)
		}
		for _, e := range fs.Errors() {
			return out, fmt.Errorf("read log %s[%d]: %w", topic, partition, e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, logRecord(r))
			next = r.Offset + 1
		})
	}
	return out, nil
}

func highWatermark(ctx context.Context, cl *kgo.Client, topic string, partition int32) (int64, error) {
	return listOffset(ctx, cl, topic, partition, 0, -1)
}

// listOffset answers ListOffsets for one partition: timestamp -1 the end
// of the log (the high watermark with isolation 0, read_uncommitted; the
// last stable offset with 1, read_committed), -2 its start.
func listOffset(ctx context.Context, cl *kgo.Client, topic string, partition int32, isolation int8, timestamp int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = partition, timestamp
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("list offsets: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			switch {
			case t.Topic != topic || p.Partition != partition:
			case p.ErrorCode != 0:
				return 0, fmt.Errorf("list offsets %s[%d]: error code %d", topic, partition, p.ErrorCode)
			default:
				return p.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("list offsets %s[%d]: no answer", topic, partition)
}

func logRecord(r *kgo.Record) LogRecord {
	lr := LogRecord{Offset: r.Offset, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch,
		Transactional: r.Attrs.IsTransactional(), Control: r.Attrs.IsControl()}
	if lr.Control {
		var k kmsg.ControlRecordKey
		if err := k.ReadFrom(r.Key); err == nil {
			lr.Commit = k.Type == kmsg.ControlRecordKeyTypeCommit
		}
		return lr
	}
	hs := make([]kafka.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = kafka.Header{Key: h.Key, Value: h.Value}
	}
	lr.Stamp, _ = barrier.ReadStamp(hs)
	lr.Marker = barrier.IsMarker(hs)
	return lr
}

// committedTxn is one committed transaction's records and where its
// commit marker sits.
type committedTxn struct {
	records []LogRecord
	marker  int64
}

// transactions replays the log's markers: each committed transaction with
// its records, in marker order, and every record outside any transaction.
func transactions(log []LogRecord) (committed []committedTxn, bare []LogRecord) {
	open := map[int64][]LogRecord{} // producer id -> records since its last marker
	for _, r := range log {
		switch {
		case r.Control && r.Commit:
			committed = append(committed, committedTxn{records: open[r.ProducerID], marker: r.Offset})
			delete(open, r.ProducerID)
		case r.Control:
			delete(open, r.ProducerID)
		case !r.Transactional:
			bare = append(bare, r)
		default:
			open[r.ProducerID] = append(open[r.ProducerID], r)
		}
	}
	return committed, bare
}

// generation is a committed barrier: where the generation starts and the
// producer it names.
type generation struct {
	offset int64
	pid    int64
	epoch  int16
}

// CommitOrder checks I2 in commit order on one partition's whole log (see
// ReadLog), which a read_committed reader cannot see:
//
//   - nothing in a lease partition is outside a transaction;
//   - no transaction of generation N has its commit marker after the first
//     record of a later generation's committed barrier (a late commit of
//     an old generation would pass an offset-order check);
//   - every committed data record follows its own generation's committed
//     barrier and comes from that barrier's producer (ownProducer: its
//     producer id, its epoch or a later one below the next generation's,
//     as transaction version 2 bumps the epoch at each commit).
func CommitOrder(log []LogRecord) []Violation {
	committed, bare := transactions(log)
	var out []Violation
	for _, r := range bare {
		out = append(out, Violation{"I2", r.Offset, fmt.Sprintf("non-transactional record of %q token %d in a lease partition", r.Lease, r.Token)})
	}
	gens := map[string]map[int64]generation{} // lease -> token -> barrier
	for _, t := range committed {
		for _, r := range t.records {
			if r.Barrier && r.Lease != "" {
				if gens[r.Lease] == nil {
					gens[r.Lease] = map[int64]generation{}
				}
				if _, seen := gens[r.Lease][r.Token]; !seen {
					gens[r.Lease][r.Token] = generation{r.Offset, r.ProducerID, r.ProducerEpoch}
				}
			}
		}
	}
	for _, t := range committed {
		for _, r := range t.records {
			if !r.Barrier && !r.Marker {
				out = append(out, judgeCommitted(r, t.marker, gens[r.Lease])...)
			}
		}
	}
	return out
}

// ownProducer reports whether r comes from its generation's producer:
// the producer id its barrier names, at the barrier's epoch or past it
// (under Kafka's transaction version 2 the coordinator bumps the epoch at
// every commit, so one generation's transactions carry growing epochs),
// and below the epoch of any later generation's barrier of the same
// producer id (data stamped with an old token by a newer producer is a
// producer no barrier of that token names).
func ownProducer(r LogRecord, own generation, gens map[int64]generation) bool {
	if own.pid != r.ProducerID || r.ProducerEpoch < own.epoch {
		return false
	}
	for token, g := range gens {
		if barrier.Judge(token, r.Token) == barrier.Stale && g.pid == r.ProducerID && g.epoch <= r.ProducerEpoch {
			return false
		}
	}
	return true
}

// judgeCommitted checks one committed data record against the lease's
// committed barriers.
func judgeCommitted(r LogRecord, marker int64, gens map[int64]generation) []Violation {
	var out []Violation
	own, ok := gens[r.Token]
	switch {
	case !ok || own.offset > r.Offset:
		out = append(out, Violation{"I2", r.Offset, fmt.Sprintf("data of %q token %d without its generation's barrier before it", r.Lease, r.Token)})
	case !ownProducer(r, own, gens):
		out = append(out, Violation{"I2", r.Offset, fmt.Sprintf("data of %q token %d from producer %d epoch %d; its barrier names %d epoch %d",
			r.Lease, r.Token, r.ProducerID, r.ProducerEpoch, own.pid, own.epoch)})
	}
	for token, g := range gens {
		if barrier.Judge(token, r.Token) == barrier.Stale && g.offset < marker {
			out = append(out, Violation{"I2", marker, fmt.Sprintf("transaction of %q token %d committed at %d, after the barrier of token %d at %d",
				r.Lease, r.Token, marker, token, g.offset)})
		}
	}
	return out
}

// Describe says what the whole log holds at offset off: the record (its
// producer id, epoch and stamp) and the marker that ended its transaction
// (commit or abort, and where), or that the offset holds no record. It is
// for reports of I3 failures: whether an acknowledged batch was never
// written, or written and aborted, and by which producer.
func Describe(log []LogRecord, off int64) string {
	for i, r := range log {
		if r.Offset != off {
			continue
		}
		what := fmt.Sprintf("offset %d: producer %d epoch %d, lease %q token %d batch %q seq %d, transactional %v",
			r.Offset, r.ProducerID, r.ProducerEpoch, r.Lease, r.Token, r.Batch, r.Seq, r.Transactional)
		for _, m := range log[i+1:] {
			if m.Control && m.ProducerID == r.ProducerID {
				kind := "ABORT"
				if m.Commit {
					kind = "COMMIT"
				}
				return fmt.Sprintf("%s; ended by %s at offset %d (epoch %d); before it, this producer's %s",
					what, kind, m.Offset, m.ProducerEpoch, history(log[:i], r.ProducerID))
			}
		}
		return what + "; no marker after it (transaction still open)"
	}
	return fmt.Sprintf("offset %d: no record in the log", off)
}

// history lists the last transactions of producer pid in log: first
// offset, epoch and how each ended.
func history(log []LogRecord, pid int64) string {
	var out []string
	first := int64(-1)
	for _, r := range log {
		switch {
		case r.ProducerID != pid:
		case !r.Control && first < 0:
			first = r.Offset
		case r.Control:
			kind := "abort"
			if r.Commit {
				kind = "commit"
			}
			out = append(out, fmt.Sprintf("[%d..%d %s e%d]", first, r.Offset, kind, r.ProducerEpoch))
			first = -1
		}
	}
	if len(out) > 6 {
		out = out[len(out)-6:]
	}
	return fmt.Sprint(out)
}

// CheckPartition reads one lease partition both ways and checks every
// invariant a partition shows: I2 in offset order on what read_committed
// readers see (NoStaleWrite), I2 in commit order on the whole log with
// its markers (CommitOrder), and I3 for the acknowledged batches
// (NoAckedLoss). Tests use it so that no caller forgets one of the three.
func CheckPartition(conn kafkaconn.Config, topic string, partition int32, acked []Batch, timeout time.Duration) ([]Record, []Violation, error) {
	recs, err := ReadPartition(conn, topic, partition, timeout)
	if err != nil {
		return nil, nil, err
	}
	whole, err := ReadLog(conn, topic, partition, timeout)
	if err != nil {
		return recs, nil, err
	}
	vs := append(NoStaleWrite(recs), CommitOrder(whole)...)
	return recs, append(vs, NoAckedLoss(recs, acked)...), nil
}
