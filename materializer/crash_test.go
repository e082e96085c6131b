package materializer_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// workload writes a mixed sequence to partition 1 (barriers, takeovers,
// stale, duplicate, unfenced records, and a record Postgres refuses) and
// returns its last offset.
func (b *testBundle) workload() int64 {
	recs := []rec{bar("shard:1", 3)}
	for i := range 4 {
		recs = append(recs, data("shard:1", 3, "g3", i))
	}
	recs = append(recs, bar("shard:1", 4), data("shard:1", 3, "late", 0), data("shard:1", 4, "g3", 1),
		data("shard:1", 4, "g4", 0), data("shard:1", 9, "ahead", 0), bar("shard:17", 8), data("shard:17", 8, "x", 0),
		nulHeader("shard:1", 4, "g4", 1), data("shard:1", 4, "g4", 1), bar("shard:1", 2), data("shard:1", 4, "g4", 2))
	return b.write(1, recs...)
}

// nulHeader is a data record with a NUL in a header value: jsonb refuses
// it (SQLSTATE 22P05), and its chunk is applied in halves (FM30).
func nulHeader(lease string, token int64, batch string, seq int) rec {
	r := data(lease, token, batch, seq)
	r.headers = []kafka.Header{{Key: "h", Value: []byte("a\x00b")}}
	return r
}

var errCrash = errors.New("injected crash")

// TestFM13_CrashAfterEachStatementLeavesNoTrace: the materializer is
// stopped after each statement of its transactions in turn, restarted,
// and must end with the ledger of an uninterrupted run.
func TestFM13_CrashAfterEachStatementLeavesNoTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Every kind of statement and verdict, in few records: each crash
	// point costs a restart. The record with a NUL header makes its chunk
	// go in halves and file a receipt of its own (FM30): a crash inside
	// the halving leaves no trace either.
	last := b.write(1, bar("shard:1", 3), data("shard:1", 3, "a", 0), bar("shard:1", 4),
		data("shard:1", 3, "late", 0), data("shard:1", 4, "a", 0), nulHeader("shard:1", 4, "b", 0), data("shard:1", 4, "b", 0),
		data("shard:1", 9, "ahead", 0), bar("shard:1", 2))
	small := func(c *materializer.Config) { c.MaxBatch = 3 }
	ref := b.newMaterializer(small)
	b.runUntil(ref, b.db, 1, last)
	want := snapshot(t, b.db)
	if count(t, b.db, `SELECT count(*) FROM accepted_records`) == 0 {
		t.Fatal("reference run accepted nothing")
	}
	db := pgtest.New(t)
	for k := int64(1); ; k++ {
		if _, err := db.Pool.Exec(b.ctx, `TRUNCATE fences, accepted_records, rejected_records, consumer_positions`); err != nil {
			t.Fatal(err)
		}
		crashed := b.newMaterializerOn(db, func(c *materializer.Config) {
			small(c)
			c.Hooks.AfterStatement = func(n int64) error {
				if n == k {
					return errCrash
				}
				return nil
			}
		})
		err := b.runOrStop(crashed, db, 1, last)
		if err == nil {
			break // k is past the last statement: every point was tried
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash at statement %d: %v", k, err)
		}
		b.runUntil(b.newMaterializerOn(db, small), db, 1, last)
		if got := snapshot(t, db); got != want {
			t.Fatalf("after a crash at statement %d the ledger differs:\n%s\nwant:\n%s", k, got, want)
		}
		if k > 200 {
			t.Fatal("too many statements")
		}
	}
}

// TestFM14_TwoInstancesOnOnePartition: two materializers apply the same
// partition at once; the ledger has no duplicate and no gap.
func TestFM14_TwoInstancesOnOnePartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var last int64
	for range 5 {
		last = b.workload()
	}
	ref := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(ref, nil), ref, 1, last)
	want := snapshot(t, ref)

	ctx, cancel := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		m := b.newMaterializer(func(c *materializer.Config) { c.MaxBatch = 3 })
		wg.Add(1)
		go func() { defer wg.Done(); errs <- m.Run(ctx) }()
	}
	b.waitPosition(b.db, 1, last+1, make(chan error))
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("instance failed: %v", err)
		}
	}
	if got := snapshot(t, b.db); got != want {
		t.Fatalf("two instances produced a different ledger:\n%s\nwant:\n%s", got, want)
	}
}

// TestReplayFromZeroGivesSameLedger: dropping the materializer's state and
// rebuilding from offset 0 gives the same ledger.
func TestReplayFromZeroGivesSameLedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.workload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	want := snapshot(t, b.db)
	if _, err := b.db.Pool.Exec(b.ctx, `TRUNCATE fences, accepted_records, rejected_records, consumer_positions`); err != nil {
		t.Fatal(err)
	}
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	if got := snapshot(t, b.db); got != want {
		t.Fatalf("replayed ledger differs:\n%s\nwant:\n%s", got, want)
	}
}

// TestDisjointInstancesGiveTheSameLedger: two instances on disjoint
// partition sets build the ledger one instance builds.
func TestDisjointInstancesGiveTheSameLedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last1 := b.workload()
	last2 := b.write(2, bar("shard:2", 4), data("shard:2", 4, "x", 0), data("shard:2", 3, "old", 0), data("shard:2", 4, "x", 0))
	ref := pgtest.New(t)
	m := b.newMaterializerOn(ref, nil)
	b.runUntil(m, ref, 1, last1)
	b.runUntil(b.newMaterializerOn(ref, nil), ref, 2, last2)
	want := snapshot(t, ref)
	b.runUntil(b.newMaterializer(func(c *materializer.Config) { c.Partitions = []int32{1} }), b.db, 1, last1)
	only2 := b.newMaterializer(func(c *materializer.Config) { c.Partitions = []int32{2} })
	b.runUntil(only2, b.db, 2, last2)
	if got := snapshot(t, b.db); got != want {
		t.Fatalf("split ledger differs:\n%s\nwant:\n%s", got, want)
	}
	if n := count(t, b.db, `SELECT count(*) FROM consumer_positions`); n != 2 {
		t.Fatalf("%d positions stored, want 2 (each instance only its partition)", n)
	}
}
