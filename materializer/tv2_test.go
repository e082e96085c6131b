package materializer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

// tv2Generation is one generation written the way the gateway writes it
// (a signed barrier in its own transaction, then stamped batches, one
// transaction each) by franz-go's kgo, which speaks transaction version 2:
// on Apache Kafka 4.x the coordinator bumps the producer epoch at every
// commit, so the generation's later transactions carry later epochs than
// its barrier names. librdkafka still speaks TV1 (its epoch stays put).
type tv2Generation struct {
	t      *testing.T
	b      *testBundle
	cl     *kgo.Client
	lease  string
	token  int64
	place  txnmap.Placement
	epochs []int16 // the epoch of each committed transaction, barrier first
}

func newTV2Generation(t *testing.T, b *testBundle, lease string, token int64) *tv2Generation {
	t.Helper()
	place, err := b.router.Resolve(lease)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := b.kafka.Conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.TransactionalID(place.TransactionalID),
		kgo.DefaultProduceTopic(b.topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	g := &tv2Generation{t: t, b: b, cl: cl, lease: lease, token: token, place: place}
	g.barrier()
	return g
}

func (g *tv2Generation) barrier() {
	ctx := context.Background()
	if err := g.cl.BeginTransaction(); err != nil {
		g.t.Fatal(err)
	}
	pid, epoch, err := g.cl.ProducerID(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	v, err := g.b.signer.Seal(barrier.Grant{Lease: g.lease, Token: g.token, Owner: "o", TransactionalID: g.place.TransactionalID,
		ProducerID: pid, Epoch: epoch, IssuedAt: time.Now().UTC()})
	if err != nil {
		g.t.Fatal(err)
	}
	g.commit(epoch, g.record(barrier.Stamp{Lease: g.lease, Token: g.token, Owner: "o", Barrier: true}, v))
}

// batch writes one stamped batch of n records in a transaction of its own.
func (g *tv2Generation) batch(id string, n int) {
	if err := g.cl.BeginTransaction(); err != nil {
		g.t.Fatal(err)
	}
	_, epoch, err := g.cl.ProducerID(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	var recs []*kgo.Record
	for seq := range n {
		st := barrier.Stamp{Lease: g.lease, Token: g.token, Owner: "o", Batch: id, Seq: seq}
		recs = append(recs, g.record(st, fmt.Appendf(nil, "%s/%d", id, seq)))
	}
	g.commit(epoch, recs...)
}

func (g *tv2Generation) record(st barrier.Stamp, value []byte) *kgo.Record {
	r := &kgo.Record{Key: []byte(g.lease), Value: value, Partition: g.place.Partition}
	for _, h := range st.Headers() {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return r
}

func (g *tv2Generation) commit(epoch int16, recs ...*kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		g.t.Fatal(err)
	}
	if err := g.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		g.t.Fatal(err)
	}
	g.epochs = append(g.epochs, epoch)
}

// TestFM77_TV2ProducerOutputJudgedOnApacheKafka: on Apache Kafka (transaction
// version 2 on, as a new 4.x cluster formats it), two generations of one
// lease written by a TV2 client: the epochs move at every commit inside a
// generation. The commit-order checker accepts those bumps (and, in its
// unit cases, still refuses an older generation's token from a newer
// producer), and the materializer keeps every batch and refuses nothing.
// This is the output librdkafka will write the day it speaks TV2.
func TestFM77_TV2ProducerOutputJudgedOnApacheKafka(t *testing.T) {
	t.Parallel()
	b := setupOn(t, kafkatest.StartReal(t, topic, partitions))
	lease := "shard:tv2"
	first := newTV2Generation(t, b, lease, 1)
	first.batch("a", 2)
	first.batch("b", 2)
	second := newTV2Generation(t, b, lease, 2)
	second.batch("c", 2)
	second.batch("d", 2)
	if e := first.epochs; e[len(e)-1] == e[0] {
		t.Fatalf("the epoch did not move across one generation's commits (%v): is transaction version 2 on?", e)
	}
	t.Logf("epochs per committed transaction: token 1 %v, token 2 %v", first.epochs, second.epochs)

	log, err := verify.ReadLog(b.kafka.Conn, b.topic, first.place.Partition, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if vs := verify.CommitOrder(log); len(vs) > 0 {
		t.Fatalf("commit order on a TV2 producer's output: %v", vs)
	}
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, first.place.Partition, b.last(first.place.Partition))
	if n := count(t, b.db, `SELECT count(*) FROM accepted_records`); n != 8 {
		t.Fatalf("ledger kept %d records, want 8\n%s", n, dumpRows(t, b.db, `SELECT * FROM rejected_records`))
	}
	if n := count(t, b.db, `SELECT count(*) FROM rejected_records`); n != 0 {
		t.Fatalf("ledger refused %d records\n%s", n, dumpRows(t, b.db, `SELECT * FROM rejected_records`))
	}
}
