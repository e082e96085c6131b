package materializer_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/txnmap"
)

// TestFM31_RebuildAcrossPartitionGrowth: shard:17 and shard:3 write
// barriers and data under the route's 16 partitions (shard:17 on
// partition 1), the leases are released, the topic and the route grow to
// 32 partitions (shard:17 now on partition 17) and both write again. The
// ledger kept across the change and a rebuild from offset 0 with the 32
// config are the same: every record accepted, no bad_barrier, no
// unfenced, since each barrier is judged by the placement it signed. The
// rebuild applies partition 17 (shard:17's newer barrier) before
// partition 1 (its older one): the ledger must not depend on the order in
// which partitions are applied.
func TestFM31_RebuildAcrossPartitionGrowth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	leases := []string{"shard:17", "shard:3"}
	b.writeEach(leases, "before")
	live := pgtest.New(t)
	b.materializeAll(b.router, live, []int32{1, 3}, b.writer)

	if err := kafkatest.GrowTopic(b.kafka.Conn, b.topic, 32); err != nil {
		t.Fatal(err)
	}
	grown, err := txnmap.NewRouter(b.kafka.RouterPrefix("test"), []txnmap.Route{{Pattern: "shard:*", Topic: b.topic, Partitions: 32}})
	if err != nil {
		t.Fatal(err)
	}
	b.router = grown
	w := b.freshWriter() // b.writer's metadata knows 16 partitions
	b.writeEach(leases, "after")
	b.materializeAll(grown, live, []int32{1, 3, 17}, w)

	rebuilt := pgtest.New(t)
	b.materializeOnly(grown, rebuilt, 17, w)
	b.materializeAll(grown, rebuilt, []int32{1, 3, 17}, w)
	for _, db := range []*pgtest.DB{live, rebuilt} {
		if n := count(t, db, `SELECT count(*) FROM accepted_records`); n != 4*3 {
			t.Errorf("%d records accepted, want 12", n)
		}
		if n := count(t, db, `SELECT count(*) FROM rejected_records`); n != 0 {
			t.Errorf("%d records refused (bad_barrier, unfenced), want none", n)
		}
	}
	if a, r := snapshot(t, live), snapshot(t, rebuilt); a != r {
		t.Fatalf("the rebuild from offset 0 differs from the ledger kept across the change:\n%s\nrebuilt:\n%s", a, r)
	}
}

// writeEach acquires each lease through a gateway on b.router, writes one
// batch of 3 records and releases it.
func (b *testBundle) writeEach(leases []string, batch string) {
	b.t.Helper()
	t := b.t.(*testing.T)
	srv := b.gateway()
	for _, lease := range leases {
		w := &worker{t: t, url: srv.URL, owner: "w-" + batch}
		if st := w.acquire(lease, false); st != http.StatusCreated {
			t.Fatalf("acquire %s: %d", lease, st)
		}
		if st, code := w.produce(lease, batch, 3); st != http.StatusOK {
			t.Fatalf("produce %s: %d %s", lease, st, code)
		}
		if st, _ := w.call("DELETE", fmt.Sprintf("/v1/leases/%s?owner_id=%s&token=%d", lease, w.owner, w.token), nil); st != http.StatusNoContent {
			t.Fatalf("release %s: %d", lease, st)
		}
	}
}

// freshWriter returns a producer that reads the topic's metadata anew.
func (b *testBundle) freshWriter() *kafka.Producer {
	b.t.Helper()
	cm, err := b.kafka.Conn.ConfigMap()
	if err != nil {
		b.t.Fatal(err)
	}
	cm["enable.metrics.push"], cm["go.logs.channel.enable"] = false, false
	w, err := kafka.NewProducer(&cm)
	if err != nil {
		b.t.Fatal(err)
	}
	go func() {
		for range w.Events() {
		}
	}()
	b.t.Cleanup(w.Close)
	return w
}

// materializeAll runs a materializer with router on db until every one
// of parts is applied to its end (as w sees it).
func (b *testBundle) materializeAll(router *txnmap.Router, db *pgtest.DB, parts []int32, w *kafka.Producer) {
	b.materialize(router, db, nil, parts, w)
}

// materializeOnly runs a materializer limited to partition p until p is
// applied to its end.
func (b *testBundle) materializeOnly(router *txnmap.Router, db *pgtest.DB, p int32, w *kafka.Producer) {
	b.materialize(router, db, []int32{p}, []int32{p}, w)
}

// materialize runs a materializer with router on db, limited to assigned
// (nil: all), until every one of parts is applied to its end.
func (b *testBundle) materialize(router *txnmap.Router, db *pgtest.DB, assigned, parts []int32, w *kafka.Producer) {
	b.t.Helper()
	m, err := materializer.New(db.Pool, router, materializer.Config{Kafka: b.kafka.Conn, BarrierKey: key,
		PollTimeout: 20 * time.Millisecond, Partitions: assigned})
	if err != nil {
		b.t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for _, p := range parts {
		_, high, err := w.QueryWatermarkOffsets(b.topic, p, 10000)
		if err != nil {
			b.t.Fatal(err)
		}
		b.waitPosition(db, p, high, done)
	}
	cancel()
	if err := <-done; err != nil {
		b.t.Fatalf("materializer: %v", err)
	}
}

// TestFM31_SignedPlacementMustHold: a barrier that signs its placement is
// refused when read from another partition than the one it signs, or
// when the route's rule under its signed count puts the lease elsewhere;
// one that signs none is judged by today's route.
func TestFM31_SignedPlacementMustHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sealAt := func(lease string, token int64, p, n int32) []byte {
		id, _ := txnmap.TransactionalID(b.kafka.RouterPrefix("test"), lease)
		v, err := b.signer.Seal(barrier.Grant{Lease: lease, Token: token, Owner: "o", TransactionalID: id,
			Topic: b.topic, Partition: p, Partitions: n})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	b.write(5, rec{lease: "shard:17", token: 1, barrier: true, value: sealAt("shard:17", 1, 1, 16)}) // copied to 5
	b.write(9, rec{lease: "shard:17", token: 2, barrier: true, value: sealAt("shard:17", 2, 9, 16)}) // 17 mod 16 is 1
	b.write(1, rec{lease: "shard:17", token: 3, barrier: true, value: sealAt("shard:17", 3, 1, 16)}) // as written
	last := b.write(1, bar("shard:33", 4))                                                           // no placement: today's route
	m := b.newMaterializer(nil)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for p, end := range map[int32]int64{5: 1, 9: 1, 1: last + 1} {
		b.waitPosition(b.db, p, end, done)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, b.db)
	for _, want := range []string{"shard:17 1  -1 5 0 bad_barrier", "shard:17 2  -1 9 0 bad_barrier", "shard:17 3 1 0\n", "shard:33 4 1 1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("ledger lacks %q:\n%s", want, got)
		}
	}
}
