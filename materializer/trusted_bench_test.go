package materializer_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/materializer"
)

// sinkBench is a log of benchLeasesPerPartition leases on each of the
// topic's partitions: a barrier each, then batches of 100 records of
// 1 KiB, written once and read by each sink in turn.
type sinkBench struct {
	b       *testBundle
	records int
	ends    map[int32]int64
}

const (
	sinkBenchLeases  = 32 // over the 16 partitions
	sinkBenchBatches = 25 // per lease
)

func newSinkBench(tb testing.TB) *sinkBench {
	b := setup(tb)
	s := &sinkBench{b: b, ends: map[int32]int64{}}
	dch := make(chan kafka.Event, 1<<16)
	value := make([]byte, 1024)
	topic := b.topic
	sent := 0
	for l := range sinkBenchLeases {
		lease := fmt.Sprintf("shard:%d", l)
		p := b.partition(lease)
		send := func(m *kafka.Message) {
			m.TopicPartition = kafka.TopicPartition{Topic: &topic, Partition: p}
			for b.writer.Produce(m, dch) != nil {
				<-dch // the local queue is full: wait for a delivery
				sent--
			}
			sent++
		}
		send(&kafka.Message{Value: b.seal(lease, 1), Headers: barrier.Stamp{Lease: lease, Token: 1, Owner: "o", Barrier: true}.Headers()})
		for i := range sinkBenchBatches * 100 {
			st := barrier.Stamp{Lease: lease, Token: 1, Owner: "o", Batch: fmt.Sprintf("b%d", i/100), Seq: i % 100}
			send(&kafka.Message{Value: value, Headers: st.Headers()})
			s.records++
		}
	}
	for ; sent > 0; sent-- {
		if m := (<-dch).(*kafka.Message); m.TopicPartition.Error != nil {
			tb.Fatal(m.TopicPartition.Error)
		}
	}
	for p := range int32(partitions) {
		if last := b.last(p); last >= 0 {
			s.ends[p] = last
		}
	}
	return s
}

// cpu is the process's user and system CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSinks: the same log (32 leases, 80,000 records of 1 KiB over
// 16 partitions) applied by the Postgres ledger and by the trusted topic,
// side by side in one run: records/s and CPU per record of the whole
// process (the in-process broker included, as it serves both).
func BenchmarkSinks(b *testing.B) {
	s := newSinkBench(b)
	b.Run("postgres", func(b *testing.B) {
		var wall, used time.Duration
		for b.Loop() {
			if _, err := s.b.db.Pool.Exec(s.b.ctx, `TRUNCATE fences, accepted_records, rejected_records, consumer_positions`); err != nil {
				b.Fatal(err)
			}
			start, c0 := time.Now(), cpu()
			m := s.b.newMaterializer(nil)
			for p, last := range s.ends {
				s.b.runUntil(m, s.b.db, p, last)
			}
			wall, used = wall+time.Since(start), used+cpu()-c0
		}
		s.report(b, wall, used)
	})
	b.Run("kafka", func(b *testing.B) {
		var wall, used time.Duration
		var last *materializer.TrustedSink
		round := 0
		for b.Loop() {
			round++
			start, c0 := time.Now(), cpu()
			ts := s.b.newTrusted(fmt.Sprintf("bench%d", round), nil, nil)
			s.b.runTrustedUntilAll(ts, s.ends)
			wall, used = wall+time.Since(start), used+cpu()-c0
			last = ts
		}
		s.report(b, wall, used)
		s.reportState(b, last)
	})
}

// reportState reports the state topic's records and bytes (keys and
// values) per lease: a fence and one dedup entry per batch here (25
// batches, inside the window), before compaction.
func (s *sinkBench) reportState(b *testing.B, ts *materializer.TrustedSink) {
	_, _, state := ts.Topics(s.b.topic)
	var n, bytes int
	for p := range int32(partitions) {
		for _, m := range s.b.readAll(state, p) {
			n++
			bytes += len(m.Key) + len(m.Value)
		}
	}
	b.ReportMetric(float64(n)/sinkBenchLeases, "state-records/lease")
	b.ReportMetric(float64(bytes)/float64(n), "state-bytes/record")
}

func (s *sinkBench) report(b *testing.B, wall, used time.Duration) {
	n := float64(b.N * s.records)
	b.ReportMetric(n/wall.Seconds(), "records/s")
	b.ReportMetric(float64(used.Microseconds())/n, "cpu-us/record")
}

// runTrustedUntilAll runs ts until its group's offset of every partition
// passes ends.
func (b *testBundle) runTrustedUntilAll(ts *materializer.TrustedSink, ends map[int32]int64) {
	b.t.Helper()
	done := make(chan error, 1)
	ctx, cancel := contextWithCancel(b)
	go func() { done <- ts.Run(ctx) }()
	for p, last := range ends {
		b.waitCommitted(ts.GroupID(), p, last)
	}
	cancel()
	if err := <-done; err != nil {
		b.t.Fatal(err)
	}
}
