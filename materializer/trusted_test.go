package materializer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// newTrusted is a trusted sink of name on the bundle's routes.
func (b *testBundle) newTrusted(name string, mod func(*materializer.TrustedConfig), cmod func(*materializer.Config)) *materializer.TrustedSink {
	b.t.Helper()
	cfg := materializer.TrustedConfig{Name: name}
	if mod != nil {
		mod(&cfg)
	}
	ts, err := b.newMaterializer(cmod).Trusted(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return ts
}

// committed is the consumer group's committed offset of partition p (-1:
// none), stable offsets only, read with franz-go (committedOffset):
// librdkafka 2.11.1's admin ListConsumerGroupOffsets crashed the test
// binary against Apache Kafka brokers of a test's own.
func (b *testBundle) committed(group string, p int32) int64 {
	b.t.Helper()
	return committedOffset(b.t, b.kafka.Conn, group, b.topic, p)
}

// runTrustedUntil runs ts until its group's offset of partition passes
// lastOffset, or until it stops (its error).
func (b *testBundle) runTrustedUntil(ts *materializer.TrustedSink, partition int32, lastOffset int64) error {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- ts.Run(ctx) }()
	defer func() { cancel(); <-done }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(90 * time.Second)
	for b.committed(ts.GroupID(), partition) <= lastOffset {
		select {
		case err := <-done:
			done <- nil
			if err == nil {
				err = errors.New("stopped without error")
			}
			return err
		case <-tick.C:
		case <-deadline:
			b.t.Fatalf("group %s never passed offset %d of partition %d", ts.GroupID(), lastOffset, partition)
		}
	}
	return nil
}

// readAll reads topic/partition read_committed to its end.
func (b *testBundle) readAll(topic string, p int32) []*kafka.Message {
	b.t.Helper()
	cm, err := b.kafka.Conn.ConfigMap()
	if err != nil {
		b.t.Fatal(err)
	}
	cm["group.id"], cm["isolation.level"], cm["enable.auto.commit"] = "test-reader", "read_committed", false
	cm["go.logs.channel.enable"], cm["enable.metrics.push"] = false, false
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		b.t.Fatal(err)
	}
	defer c.Close()
	_, high, err := c.QueryWatermarkOffsets(topic, p, 10000)
	if err != nil {
		b.t.Fatal(err)
	}
	var out []*kafka.Message
	if high == 0 {
		return nil
	}
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.OffsetBeginning}}); err != nil {
		b.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m, ok := c.Poll(100).(*kafka.Message); ok {
			out = append(out, m)
		}
		pos, err := c.Position([]kafka.TopicPartition{{Topic: &topic, Partition: p}})
		if err == nil && int64(pos[0].Offset) >= high {
			return out
		}
	}
	b.t.Fatalf("%s/%d not read to %d", topic, p, high)
	return nil
}

// trustedView renders what a sink wrote for partition p as the ledger
// view (ledgerView) renders the Postgres ledger: accepted records in
// offset order, then receipts by offset.
func (b *testBundle) trustedView(ts *materializer.TrustedSink, p int32) string {
	b.t.Helper()
	trusted, receipts, _ := ts.Topics(b.topic)
	var sb strings.Builder
	for _, m := range b.readAll(trusted, p) {
		var pv materializer.Provenance
		own := map[string]string{}
		for _, h := range m.Headers {
			if h.Key == materializer.HeaderTrusted {
				if err := json.Unmarshal(h.Value, &pv); err != nil {
					b.t.Fatal(err)
				}
				continue
			}
			own[h.Key] = string(h.Value)
		}
		fmt.Fprintf(&sb, "%s %d %s %d %d %s %s %q\n", pv.Lease, pv.Token, pv.Batch, pv.Seq, pv.Offset, m.Value, b.jsonb(own), pv.Kept)
	}
	sb.WriteString("--\n")
	var rs []string
	for _, m := range b.readAll(receipts, p) {
		var rc materializer.Receipt
		if err := json.Unmarshal(m.Value, &rc); err != nil {
			b.t.Fatal(err)
		}
		rs = append(rs, fmt.Sprintf("%08d %s %s %d", rc.Offset, rc.Reason, rc.Lease, rc.Token))
	}
	sort.Strings(rs)
	sb.WriteString(strings.Join(rs, "\n"))
	return sb.String()
}

// jsonb renders headers as Postgres renders the ledger's jsonb.
func (b *testBundle) jsonb(h map[string]string) string {
	raw, _ := json.Marshal(h)
	var s string
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT $1::jsonb::text`, string(raw)).Scan(&s); err != nil {
		b.t.Fatal(err)
	}
	return s
}

// ledgerView renders the Postgres ledger of partition p like trustedView.
func (b *testBundle) ledgerView(p int32) string {
	b.t.Helper()
	var sb strings.Builder
	rows, err := b.db.Pool.Query(b.ctx, `SELECT lease, token, batch_id, seq, "offset", value, headers::text, coalesce(kept, '') FROM ledger_records
		WHERE partition = $1 ORDER BY "offset"`, p)
	if err != nil {
		b.t.Fatal(err)
	}
	for rows.Next() {
		var lease, batch, headers, kept string
		var token, off int64
		var seq int
		var value []byte
		if err := rows.Scan(&lease, &token, &batch, &seq, &off, &value, &headers, &kept); err != nil {
			b.t.Fatal(err)
		}
		fmt.Fprintf(&sb, "%s %d %s %d %d %s %s %q\n", lease, token, batch, seq, off, value, headers, kept)
	}
	rows.Close()
	sb.WriteString("--\n")
	var rs []string
	rows, err = b.db.Pool.Query(b.ctx, `SELECT "offset", reason, coalesce(lease, ''), coalesce(token, 0) FROM rejected_records WHERE partition = $1`, p)
	if err != nil {
		b.t.Fatal(err)
	}
	for rows.Next() {
		var off, token int64
		var reason, lease string
		if err := rows.Scan(&off, &reason, &lease, &token); err != nil {
			b.t.Fatal(err)
		}
		rs = append(rs, fmt.Sprintf("%08d %s %s %d", off, reason, lease, token))
	}
	rows.Close()
	sort.Strings(rs)
	sb.WriteString(strings.Join(rs, "\n"))
	return sb.String()
}

// trustedWorkload is the crash workload with a checkpoint and the
// worker's own headers.
func (b *testBundle) trustedWorkload() int64 {
	b.workload()
	own := data("shard:1", 4, "h", 0)
	own.headers = []kafka.Header{{Key: "b", Value: []byte("2")}, {Key: "a", Value: []byte("1")}}
	return b.write(1, own, cp("shard:1", 4, "h", 1, "pos-7"), data("shard:1", 4, "g4", 0))
}

// TestTrustedTopicEqualsTheLedger: the Kafka sink writes the records the
// Postgres ledger accepts, with the same refusals, for a workload of every
// verdict (docs/ledger.md, "The trusted topic"), and a rebuild (a sink of
// another name from offset 0) writes the same again.
func TestTrustedTopicEqualsTheLedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	want := b.ledgerView(1)
	if !strings.Contains(want, "malformed") || !strings.Contains(want, "duplicate") || !strings.Contains(want, "stale") {
		t.Fatalf("workload lacks a verdict:\n%s", want)
	}
	ts := b.newTrusted("trusted", nil, nil)
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatal(err)
	}
	if got := b.trustedView(ts, 1); got != want {
		t.Fatalf("trusted topic differs from the ledger:\n%s\nwant:\n%s", got, want)
	}
	counts := ts.Counts()
	if counts[materializer.Checkpoint] != 1 || counts[materializer.Barrier] == 0 {
		t.Fatalf("verdicts %v: want one checkpoint and the barriers", counts)
	}
	// A rebuild: a sink of another name from offset 0.
	rebuilt := b.newTrusted("rebuilt", nil, nil)
	if err := b.runTrustedUntil(rebuilt, 1, last); err != nil {
		t.Fatal(err)
	}
	if got := b.trustedView(rebuilt, 1); got != want {
		t.Fatalf("the rebuilt trusted topic differs:\n%s\nwant:\n%s", got, want)
	}
}

// TestTrustedHeadersByteExact: the worker's headers reach the trusted
// topic in their order, bytes that are not UTF-8 included, with one
// provenance header after them.
func TestTrustedHeadersByteExact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := data("shard:1", 3, "a", 0)
	r.headers = []kafka.Header{{Key: "z", Value: []byte{0xff, 0x01}}, {Key: "z", Value: []byte("again")}, {Key: "a", Value: nil}}
	last := b.write(1, bar("shard:1", 3), r)
	ts := b.newTrusted("trusted", nil, nil)
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatal(err)
	}
	trusted, _, _ := ts.Topics(b.topic)
	got := b.readAll(trusted, 1)
	if len(got) != 0 {
		// Headers not UTF-8, or a name twice, are malformed for the
		// ledger (userHeaders), so for the trusted topic too.
		t.Fatalf("a record the ledger refuses reached the trusted topic: %v", got[0].Headers)
	}
	ok := data("shard:1", 3, "b", 0)
	ok.headers = []kafka.Header{{Key: "z", Value: []byte("2")}, {Key: "a", Value: []byte("1")}}
	last = b.write(1, ok)
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatal(err)
	}
	got = b.readAll(trusted, 1)
	if len(got) != 1 || len(got[0].Headers) != 3 || got[0].Headers[0].Key != "z" || got[0].Headers[1].Key != "a" ||
		got[0].Headers[2].Key != materializer.HeaderTrusted || got[0].TopicPartition.Partition != 1 {
		t.Fatalf("trusted record: %v", got)
	}
	var pv materializer.Provenance
	if err := json.Unmarshal(got[0].Headers[2].Value, &pv); err != nil || pv.Offset != last || pv.Batch != "b" || pv.Token != 3 {
		t.Fatalf("provenance %s: %v", got[0].Headers[2].Value, err)
	}
	_ = barrier.HeaderLease
}

// TestFM54_TrustedCrashBeforeEachCommitLeavesNoTrace: the sink stops
// with a chunk's transaction open, before its commit, at each chunk in
// turn; the next instance of the same name resumes, and the trusted topic
// is the ledger's, each record once.
func TestFM54_TrustedCrashBeforeEachCommitLeavesNoTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	want := b.ledgerView(1)
	small := func(c *materializer.Config) { c.MaxBatch = 4 }
	for k := 1; ; k++ {
		name := fmt.Sprintf("crash%d", k)
		calls := 0
		crash := func(c *materializer.TrustedConfig) {
			c.Hooks.BeforeCommit = func(string, int32) error {
				if calls++; calls == k {
					return errCrash
				}
				return nil
			}
		}
		err := b.runTrustedUntil(b.newTrusted(name, crash, small), 1, last)
		if err == nil {
			if k == 1 {
				t.Fatal("no chunk was committed")
			}
			break // k is past the last chunk
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash %d: %v", k, err)
		}
		next := b.newTrusted(name, nil, small)
		if err := b.runTrustedUntil(next, 1, last); err != nil {
			t.Fatalf("after crash %d: %v", k, err)
		}
		if got := b.trustedView(next, 1); got != want {
			t.Fatalf("after a crash before commit %d:\n%s\nwant:\n%s", k, got, want)
		}
	}
}

// TestFM55_ZombieSinkFencedByTheBroker: an instance frozen before its
// commit loses its partitions (max.poll.interval.ms); the instance that
// takes them fences its producer and aborts its transaction, and the
// zombie's commit, when it wakes, is refused (fenced): the zombie then
// joins its group again as a new member (FM118's answer) and writes
// nothing twice: every record once.
func TestFM55_ZombieSinkFencedByTheBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	want := b.ledgerView(1)
	frozen, wake := make(chan struct{}), make(chan struct{})
	quick := func(c *materializer.Config) {
		c.Consumer = map[string]string{"session.timeout.ms": "6000", "max.poll.interval.ms": "6000", "heartbeat.interval.ms": "500"}
	}
	refused := newLineWatch("joining again")
	var once bool
	zombie := b.newTrusted("zombie", func(c *materializer.TrustedConfig) {
		c.Hooks.BeforeCommit = func(string, int32) error {
			if !once {
				once = true
				close(frozen)
				<-wake
			}
			return nil
		}
	}, func(c *materializer.Config) {
		quick(c)
		c.Logger = slog.New(slog.NewTextHandler(refused, nil))
	})
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	zdone := make(chan error, 1)
	go func() { zdone <- zombie.Run(ctx) }()
	select {
	case <-frozen:
	case err := <-zdone:
		t.Fatalf("the zombie stopped before its first commit: %v", err)
	}
	next := b.newTrusted("zombie", nil, quick)
	if err := b.runTrustedUntil(next, 1, last); err != nil {
		t.Fatal(err)
	}
	close(wake)
	select {
	case <-refused.seen:
	case err := <-zdone:
		t.Fatalf("the zombie stopped: %v, want its commit refused and the group joined again\n%s", err, refused.log.String())
	}
	if !strings.Contains(strings.ToLower(refused.log.String()), "fenced") {
		t.Fatalf("the zombie's commit was not refused as fenced:\n%s", refused.log.String())
	}
	cancel()
	if err := <-zdone; err != nil {
		t.Fatalf("the zombie after joining again: %v", err)
	}
	if got := b.trustedView(next, 1); got != want {
		t.Fatalf("with a zombie:\n%s\nwant:\n%s", got, want)
	}
}

// TestFM56_InstancesShareAndHandOverPartitions: two instances of one
// sink split the partitions through the group; one leaves mid-stream and
// its partitions move; the trusted topic is the ledger's on each
// partition.
func TestFM56_InstancesShareAndHandOverPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.trustedWorkload()
	b.write(2, bar("shard:2", 4), data("shard:2", 4, "x", 0))
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	first := b.newTrusted("shared", nil, nil)
	fdone := make(chan error, 1)
	go func() { fdone <- first.Run(ctx) }()
	second := b.newTrusted("shared", nil, nil)
	sctx, scancel := context.WithCancel(b.ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- second.Run(sctx) }()
	last1 := b.write(1, data("shard:1", 4, "more", 0), data("shard:1", 4, "more", 1))
	last2 := b.write(2, data("shard:2", 4, "x", 0), data("shard:2", 4, "y", 0), data("shard:2", 3, "old", 0))
	for _, p := range []struct {
		p    int32
		last int64
	}{{1, last1}, {2, last2}} {
		b.waitCommitted(first.GroupID(), p.p, p.last, fdone, sdone)
	}
	scancel() // the second leaves: its partitions move to the first
	if err := <-sdone; err != nil {
		t.Fatal(err)
	}
	last1 = b.write(1, data("shard:1", 4, "after", 0))
	last2 = b.write(2, data("shard:2", 4, "after", 0))
	b.waitCommitted(first.GroupID(), 1, last1, fdone)
	b.waitCommitted(first.GroupID(), 2, last2, fdone)
	b.runUntil(b.newMaterializer(nil), b.db, 1, last1)
	b.runUntil(b.newMaterializer(nil), b.db, 2, last2)
	for _, p := range []int32{1, 2} {
		if got, want := b.trustedView(first, p), b.ledgerView(p); got != want {
			t.Fatalf("partition %d:\n%s\nwant:\n%s", p, got, want)
		}
	}
	cancel()
	if err := <-fdone; err != nil {
		t.Fatal(err)
	}
}

// waitCommitted waits until group's offset of partition passes last;
// a sink that stops meanwhile (its Run's done channel) fails the test.
func (b *testBundle) waitCommitted(group string, p int32, last int64, dones ...chan error) {
	b.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(90 * time.Second)
	for b.committed(group, p) <= last {
		for _, done := range dones {
			select {
			case err := <-done:
				b.t.Fatalf("a sink stopped while group %s was below offset %d of partition %d: %v", group, last, p, err)
			default:
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			b.t.Fatalf("group %s never passed offset %d of partition %d", group, last, p)
		}
	}
}

// TestFM57_DedupWindowSurvivesRestartAndIsBounded: the window is
// restored from the state topic (a retry after a restart is a duplicate)
// and holds DedupWindow batches per lease: a retry of an older batch is
// accepted again, as docs/design.md says.
func TestFM57_DedupWindowSurvivesRestartAndIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.write(1, bar("shard:1", 3), data("shard:1", 3, "a", 0), data("shard:1", 3, "b", 0), data("shard:1", 3, "c", 0))
	window := func(c *materializer.TrustedConfig) { c.DedupWindow = 2 }
	if err := b.runTrustedUntil(b.newTrusted("window", window, nil), 1, last); err != nil {
		t.Fatal(err)
	}
	last = b.write(1, data("shard:1", 3, "c", 0), data("shard:1", 3, "a", 0))
	ts := b.newTrusted("window", window, nil)
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatal(err)
	}
	got := b.trustedView(ts, 1)
	want := "shard:1 3 a 0 1 shard:1/3/a/0 {} \"\"\n" +
		"shard:1 3 b 0 2 shard:1/3/b/0 {} \"\"\n" +
		"shard:1 3 c 0 3 shard:1/3/c/0 {} \"\"\n" +
		"shard:1 3 a 0 5 shard:1/3/a/0 {} \"\"\n" + // a was pushed out of the window by b and c
		"--\n00000004 duplicate shard:1 3" // c was in the window restored
	if got != want {
		t.Fatalf("window of 2 batches:\n%s\nwant:\n%s", got, want)
	}
}

func contextWithCancel(b *testBundle) (context.Context, context.CancelFunc) {
	return context.WithCancel(b.ctx)
}

// TestTrustedMirrorKeepsTheLedgersFencesAndCheckpoints: with no Postgres
// ledger, the sink's mirror leaves the ledger database's fences and
// checkpoints as the ledger would have them, so checkpoint reads answer;
// a new owner of the partition mirrors its whole state again.
func TestTrustedMirrorKeepsTheLedgersFencesAndCheckpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.trustedWorkload()
	ref := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(ref, nil), ref, 1, last)
	want := stateRows(t, ref)
	if !strings.Contains(want, "pos-7") {
		t.Fatalf("the workload's checkpoint is not in the ledger:\n%s", want)
	}
	mirror := func(c *materializer.TrustedConfig) { c.Mirror = b.db.Pool }
	if err := b.runTrustedUntil(b.newTrusted("mirror", mirror, nil), 1, last); err != nil {
		t.Fatal(err)
	}
	if got := stateRows(t, b.db); got != want {
		t.Fatalf("mirrored:\n%s\nwant:\n%s", got, want)
	}
	var next int64
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT next_offset FROM consumer_positions WHERE topic = $1 AND partition = 1`, b.topic).Scan(&next); err != nil || next != last+1 {
		t.Fatalf("mirrored position of partition 1: %d (%v), want %d past the last record", next, err, last+1)
	}
	if _, err := b.db.Pool.Exec(b.ctx, `TRUNCATE fences, checkpoints`); err != nil {
		t.Fatal(err)
	}
	last = b.write(1, data("shard:1", 4, "later", 0))
	if err := b.runTrustedUntil(b.newTrusted("mirror", mirror, nil), 1, last); err != nil {
		t.Fatal(err)
	}
	if got := stateRows(t, b.db); got != want {
		t.Fatalf("mirrored again by the partition's next owner:\n%s\nwant:\n%s", got, want)
	}
}

// stateRows renders a ledger database's fences and checkpoints.
func stateRows(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	return dumpRows(t, db,
		`SELECT lease, token, owner, producer_id, producer_epoch, barrier_partition, barrier_offset FROM fences ORDER BY lease, barrier_partition`,
		`SELECT lease, token, owner_id, batch_id, topic, partition, "offset", encode(value, 'escape') FROM checkpoints ORDER BY lease`)
}

// TestFM58_GenerationMovedAtCommitRewinds: the broker refuses a chunk's
// offset commit because the group's generation moved (a rebalance, KIP-447:
// ILLEGAL_GENERATION); the sink aborts the transaction, reads its state
// again and judges the chunk again, and the trusted topic equals the
// ledger, each record once.
func TestFM58_GenerationMovedAtCommitRewinds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	want := b.ledgerView(1)
	var refused atomic.Int32
	fake := b.kafka.Fake(t)
	fake.ControlKey(kmsg.TxnOffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.TxnOffsetCommitRequest)
		if r.Group != "fencegate-moved" || refused.Load() >= 2 {
			fake.KeepControl()
			return nil, nil, false
		}
		fake.KeepControl()
		refused.Add(1)
		return refusedOffsetCommit(r), nil, true
	})
	ts := b.newTrusted("moved", nil, func(c *materializer.Config) { c.MaxBatch = 5 })
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatalf("the sink stopped on a moved generation: %v", err)
	}
	if refused.Load() != 2 {
		t.Fatalf("%d commits refused, want 2", refused.Load())
	}
	if got := b.trustedView(ts, 1); got != want {
		t.Fatalf("after two refused commits:\n%s\nwant:\n%s", got, want)
	}
}
