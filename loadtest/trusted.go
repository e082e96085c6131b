package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/materializer"
)

// trustedEntry is the trusted scenario of the table: a stack started
// WithTrusted, whose trusted topic is checked as the ledger is.
func trustedEntry() entry {
	return entry{name: "trusted", proves: "the trusted topic holds each acknowledged batch once, in order, as the ledger does",
		flags:  []string{"--trusted"},
		on:     func(_ Scenario, s *stack.Stack) bool { return s != nil && s.Trusted },
		check:  func(ctx context.Context, r *runner, rep *report.Report) error { return r.checkTrusted(ctx, rep) },
		report: "trusted"}
}

// trustedRecord is one record of the trusted topic, by its provenance.
type trustedRecord struct {
	key       string // batchKey
	seq       int
	partition int32
	pv        materializer.Provenance
}

// checkTrusted waits until the trusted sink's group has passed every
// partition's end, then checks the trusted topic as checkLedger checks
// the ledger, the two against each other, and the order per partition
// and lease.
func (r *runner) checkTrusted(ctx context.Context, rep *report.Report) error {
	start := time.Now()
	if err := r.waitTrustedCaughtUp(ctx); err != nil {
		return err
	}
	catchUp := time.Since(start)
	recs, err := r.readTrusted()
	if err != nil {
		return err
	}
	tc := &report.TrustedCheck{Records: int64(len(recs)), MaterializerKills: r.matKills.Load(), CatchUpS: catchUp.Seconds(),
		SecondJoins: r.trustedJoins.Load(), SecondLeaves: r.trustedLeaves.Load(), SecondJoinMaxS: float64(r.trustedJoinMs.Load()) / 1000}
	counts := map[string][2]int64{}
	seqs := map[string]map[int]bool{}
	for _, t := range recs {
		c := counts[t.key]
		c[0]++
		if seqs[t.key] == nil {
			seqs[t.key] = map[int]bool{}
		}
		if !seqs[t.key][t.seq] {
			seqs[t.key][t.seq] = true
			c[1]++
		}
		counts[t.key] = c
	}
	r.compareAcked(&tc.LedgerCheck, counts)
	tc.OutOfOrder = outOfOrder(recs)
	if r.stack.Materialize {
		if err := r.compareWithLedger(ctx, tc, seqs); err != nil {
			return err
		}
	}
	tc.Finish()
	rep.Trusted = tc
	return nil
}

// outOfOrder counts records whose source offset does not rise within
// their partition, or whose token falls within their lease.
func outOfOrder(recs []trustedRecord) int64 {
	var n int64
	last := map[int32]int64{}
	token := map[string]int64{}
	for _, t := range recs {
		if off, ok := last[t.partition]; ok && t.pv.Offset <= off {
			n++
		}
		last[t.partition] = t.pv.Offset
		if t.pv.Token < token[t.pv.Lease] {
			n++
		}
		token[t.pv.Lease] = max(token[t.pv.Lease], t.pv.Token)
	}
	return n
}

// compareWithLedger counts the records in one of the ledger and the
// trusted topic and not the other.
func (r *runner) compareWithLedger(ctx context.Context, tc *report.TrustedCheck, trusted map[string]map[int]bool) error {
	rows, err := r.stack.Pool.Query(ctx, `SELECT lease, owner_id, batch_id, seq FROM accepted_records WHERE topic = $1`, r.stack.Topic())
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var lease, owner, batch string
		var seq int
		if err := rows.Scan(&lease, &owner, &batch, &seq); err != nil {
			return err
		}
		if trusted[lease+"|"+owner+"|"+batch][seq] {
			seen++
		} else {
			tc.NotInTrusted++
		}
	}
	total := 0
	for _, s := range trusted {
		total += len(s)
	}
	tc.NotInLedger = int64(total - seen)
	return rows.Err()
}

// readTrusted reads every partition of the trusted topic read_committed
// to its end, in offset order per partition.
func (r *runner) readTrusted() ([]trustedRecord, error) {
	topic := r.stack.TrustedTopic()
	ends, err := r.stack.Kafka.LastStableOffsets(context.Background(), topic, stack.Partitions)
	if err != nil {
		return nil, err
	}
	cm, err := r.stack.Kafka.ConfigMap()
	if err != nil {
		return nil, err
	}
	for k, v := range (kafka.ConfigMap{"group.id": "fencegate-loadtest-trusted", "isolation.level": "read_committed",
		"enable.auto.commit": false, "enable.metrics.push": false, "go.logs.channel.enable": false}) {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for p, end := range ends {
		if end > 0 {
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: kafka.OffsetBeginning})
		}
	}
	if err := c.Assign(tps); err != nil {
		return nil, err
	}
	return readToEnds(c, tps, ends)
}

// readToEnds polls c until every partition of tps is read to its end.
func readToEnds(c *kafka.Consumer, tps []kafka.TopicPartition, ends []int64) ([]trustedRecord, error) {
	var out []trustedRecord
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if m, ok := c.Poll(100).(*kafka.Message); ok {
			t, err := provenanceOf(m)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
		pos, err := c.Position(tps)
		if err != nil {
			return nil, err
		}
		done := true
		for _, tp := range pos {
			done = done && int64(tp.Offset) >= ends[tp.Partition]
		}
		if done {
			return out, nil
		}
	}
	return nil, fmt.Errorf("the trusted topic was not read to its end within 2 minutes")
}

func provenanceOf(m *kafka.Message) (trustedRecord, error) {
	for _, h := range m.Headers {
		if h.Key != materializer.HeaderTrusted {
			continue
		}
		var pv materializer.Provenance
		if err := json.Unmarshal(h.Value, &pv); err != nil {
			return trustedRecord{}, fmt.Errorf("trusted record at offset %d: %w", m.TopicPartition.Offset, err)
		}
		return trustedRecord{key: pv.Lease + "|" + pv.Owner + "|" + pv.Batch, seq: pv.Seq, partition: m.TopicPartition.Partition, pv: pv}, nil
	}
	return trustedRecord{}, fmt.Errorf("trusted record at offset %d has no %s header", m.TopicPartition.Offset, materializer.HeaderTrusted)
}

// waitTrustedCaughtUp waits (waitProgress) until the trusted sink's
// group offset of every partition reaches the lease topic's last stable
// offset.
func (r *runner) waitTrustedCaughtUp(ctx context.Context) error {
	ends, err := r.stack.Kafka.LastStableOffsets(ctx, r.stack.Topic(), stack.Partitions)
	if err != nil {
		return err
	}
	if err := waitProgress(ctx, ends, stall, r.stack.TrustedOffsets); err != nil {
		return fmt.Errorf("the trusted sink made %w; its last lines in the materializer's log:\n%s\n%s", err, r.stack.TrustedSinkLog(), r.sinkStacks())
	}
	return nil
}

// sinkStacks says where a stalled trusted sink waits: the materializer's
// goroutines that run the sink's code, all of them kept in a file.
func (r *runner) sinkStacks() string {
	all, err := r.stack.MaterializerGoroutines()
	if err != nil {
		return fmt.Sprintf("its goroutines: not read: %v", err)
	}
	f, err := os.CreateTemp("", "fencegate-loadtest-materializer-goroutines-*.txt")
	where := "not kept: " + fmt.Sprint(err)
	if err == nil {
		_, _ = f.WriteString(all)
		_ = f.Close()
		where = "all in " + f.Name()
	}
	return fmt.Sprintf("its goroutines in the trusted sink (%s):\n%s", where, materializer.SinkGoroutines(all))
}
