package materializer

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// benchLedger applies chunks of one partition straight to a real Postgres
// ledger: the records are built in memory with the barrier package's
// stamps and signatures, as the consumer would hand them over, so the
// figure is the ledger's alone (no broker).
type benchLedger struct {
	m      *Materializer
	key    partitionKey
	leases []string
	next   int64 // the partition's stored position
	value  []byte
}

const (
	benchTopic      = "bench-output"
	benchPartitions = 16
	benchRecordSize = 1024
	benchBatch      = 100 // records per gateway batch, as the load harness sends
	benchLeases     = 4   // leases on the benchmarked partition (64 over 16)
)

var benchKey = []byte("bench barrier key 0123456789")

func newBenchMaterializer(b testing.TB) *Materializer {
	b.Helper()
	db := pgtest.New(b)
	router, err := txnmap.NewRouter("bench", []txnmap.Route{{Pattern: "shard:*", Topic: benchTopic, Partitions: benchPartitions}})
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(db.Pool, router, Config{Kafka: kafkaconn.Config{Brokers: "127.0.0.1:1"}, BarrierKey: benchKey,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// newBenchLedger is partition p of m's topic with its leases' barriers
// applied.
func newBenchLedger(b testing.TB, m *Materializer, p int32) *benchLedger {
	b.Helper()
	l := &benchLedger{m: m, key: partitionKey{benchTopic, p}, value: make([]byte, benchRecordSize)}
	for i := 0; len(l.leases) < benchLeases; i++ {
		lease := fmt.Sprintf("shard:%d", i)
		if pl, _ := m.router.Resolve(lease); pl.Partition == p {
			l.leases = append(l.leases, lease)
		}
	}
	var err error
	if l.next, err = m.position(context.Background(), l.key); err != nil {
		b.Fatal(err)
	}
	before := m.verdictCounter(Barrier).Load()
	l.apply(b, l.barriers(b, m.router))
	if n := m.verdictCounter(Barrier).Load() - before; n != benchLeases {
		b.Fatalf("%d barriers applied, want %d", n, benchLeases)
	}
	return l
}

// barriers are one signed barrier per lease, token 1.
func (l *benchLedger) barriers(b testing.TB, router *txnmap.Router) []*kafka.Message {
	signer, _ := barrier.NewSigner(benchKey)
	var recs []*kafka.Message
	for _, lease := range l.leases {
		p, _ := router.Resolve(lease)
		v, err := signer.Seal(barrier.Grant{Lease: lease, Token: 1, Owner: "o-" + lease,
			TransactionalID: p.TransactionalID, ProducerID: 7, Epoch: 1, IssuedAt: time.Unix(0, 0).UTC()})
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, l.record(barrier.Stamp{Lease: lease, Token: 1, Owner: "o-" + lease, Barrier: true}, v, len(recs)))
	}
	return recs
}

// chunk is n data records of token 1: whole gateway batches of
// benchBatch records, the leases taking turns, batch ids from round on.
func (l *benchLedger) chunk(n, round int) []*kafka.Message {
	recs := make([]*kafka.Message, 0, n)
	for i := range n {
		batch := round*n/benchBatch + i/benchBatch
		lease := l.leases[batch%len(l.leases)]
		st := barrier.Stamp{Lease: lease, Token: 1, Owner: "o-" + lease, Batch: fmt.Sprintf("b-%d", batch), Seq: i % benchBatch}
		recs = append(recs, l.record(st, l.value, i))
	}
	return recs
}

// record is st's record at the i-th offset after the stored position, with
// one user header as the gateway passes a worker's headers on.
func (l *benchLedger) record(st barrier.Stamp, value []byte, i int) *kafka.Message {
	hs := st.AppendHeaders([]kafka.Header{{Key: "content-type", Value: []byte("application/octet-stream")}})
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &l.key.topic, Partition: l.key.partition,
		Offset: kafka.Offset(l.next + int64(i))}, Value: value, Headers: hs}
}

// apply applies recs as the next chunk and moves the position past them.
func (l *benchLedger) apply(b testing.TB, recs []*kafka.Message) {
	newNext := l.next + int64(len(recs))
	if err := l.m.apply(context.Background(), l.key, l.next, newNext, recs); err != nil {
		b.Fatal(err)
	}
	l.next = newNext
}

// BenchmarkLedgerApply: records/s of 1 KiB records into the ledger.
// fresh: one partition, one MaxBatch-sized chunk per transaction, every
// record new and accepted; redelivered: the same, every batch applied
// before (all duplicate); partitions: what one poll hands over at
// saturation, benchPartitions partitions of MaxBatch/4 records each,
// applied parallel at a time.
func BenchmarkLedgerApply(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { benchApply(b, false) })
	b.Run("redelivered", func(b *testing.B) { benchApply(b, true) })
	for _, par := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("partitions/parallel=%d", par), func(b *testing.B) { benchPartitionsApply(b, par) })
	}
}

func benchApply(b *testing.B, redeliver bool) {
	m := newBenchMaterializer(b)
	l := newBenchLedger(b, m, 1)
	n := m.cfg.MaxBatch
	want := Accepted
	if redeliver {
		want = Duplicate
		l.apply(b, l.chunk(n, 0))
	}
	before := m.verdictCounter(want).Load()
	round := 0
	for b.Loop() {
		b.StopTimer()
		if !redeliver {
			round++
		}
		recs := l.chunk(n, round)
		b.StartTimer()
		l.apply(b, recs)
	}
	if got := m.verdictCounter(want).Load() - before; got != int64(b.N*n) {
		b.Fatalf("%d records %s, want %d", got, want, b.N*n)
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}

func benchPartitionsApply(b *testing.B, parallel int) {
	m := newBenchMaterializer(b)
	m.cfg.Parallel = parallel
	var ls []*benchLedger
	next := map[partitionKey]int64{}
	for p := range int32(benchPartitions) {
		l := newBenchLedger(b, m, p)
		ls = append(ls, l)
		next[l.key] = l.next
	}
	n := m.cfg.MaxBatch / 4
	before := m.verdictCounter(Accepted).Load()
	for round := 1; b.Loop(); round++ {
		b.StopTimer()
		chunks := map[partitionKey][]*kafka.Message{}
		for _, l := range ls {
			l.next = next[l.key]
			chunks[l.key] = l.chunk(n, round)
		}
		b.StartTimer()
		if err := m.applyChunks(context.Background(), nil, next, chunks); err != nil {
			b.Fatal(err) // the consumer (nil) is used only to seek when another instance moved a position
		}
	}
	total := int64(b.N * n * benchPartitions)
	if got := m.verdictCounter(Accepted).Load() - before; got != total {
		b.Fatalf("%d records accepted, want %d", got, total)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "records/s")
}
