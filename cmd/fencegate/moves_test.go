package main

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// openTransaction begins a transaction of transactional id id on k's
// topic, writes one record to partition p and leaves it open (a replica
// paused mid-commit); the returned function commits it.
func openTransaction(t *testing.T, k *kafkatest.Cluster, id string, p int32) func() {
	t.Helper()
	opts, err := k.Conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: k.Topic, Partition: p, Value: []byte("in flight")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFM83_SetPartitionsWaitsForOpenTransactions: with no lease of the
// route live and the ledger at every partition's last stable offset, a
// transaction of the route's lease shard:5 still open on partition 5 (a
// replica paused mid-commit) would commit after the move. set-partitions
// refuses while it is open, naming the lease; a transaction of another
// application on the same topic does not hold it up. Once shard:5's
// transaction committed and the ledger read it, version 2 is recorded.
func TestFM83_SetPartitionsWaitsForOpenTransactions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	k := kafkatest.Start(t, "shard-output", 16)
	ctx := context.Background()
	store, err := leasestore.New(db.Pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.RecordFirstPlacement(ctx, "shard:*", k.Topic, 16); err != nil {
		t.Fatal(err)
	}
	if err := kafkatest.GrowTopic(k.Conn, k.Topic, 32); err != nil {
		t.Fatal(err)
	}
	cfg := routeConfig(t, k.Topic, 16)
	id, err := txnmap.TransactionalID("t", "shard:5")
	if err != nil {
		t.Fatal(err)
	}
	commit := openTransaction(t, k, id, 5)
	openTransaction(t, k, "another-application", 3) // never ends
	code, out := setPartitionsCmd(t, db, k, cfg, 32)
	if code != 1 || !strings.Contains(out, "shard:5") || !strings.Contains(out, "transaction") {
		t.Fatalf("with shard:5's transaction open: exit %d, want 1 naming shard:5's open transaction:\n%s", code, out)
	}
	commit()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO consumer_positions VALUES ($1, 5, 2)`, k.Topic); err != nil {
		t.Fatal(err)
	}
	if code, out := setPartitionsCmd(t, db, k, cfg, 32); code != 0 {
		t.Fatalf("once the transaction committed and the ledger read it: exit %d: %s", code, out)
	}
	ps, err := store.Placements(ctx)
	if p := ps["shard:*"]; err != nil || p.Version != 2 || p.Partitions != 32 {
		t.Fatalf("recorded placement: %+v %v", p, err)
	}
}
