package materializer_test

import (
	"testing"

	"github.com/fencegate/fencegate/materializer"
)

// TestFM12_FenceIsRunningStateInOffsetOrder: N/data A, N+1/barrier,
// N+1/data B, N/data C, N+1/data B again -> A and B once, C stale, the
// repeat duplicate.
func TestFM12_FenceIsRunningStateInOffsetOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.write(1, bar("shard:1", 5), data("shard:1", 5, "a", 0), bar("shard:1", 6),
		data("shard:1", 6, "b", 0), data("shard:1", 5, "c", 0), data("shard:1", 6, "b", 0))
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, 1, last)
	got := snapshot(t, b.db)
	want := "" +
		"shard:1 5 a 0 1 1 shard:1/5/a/0 {}\n" +
		"shard:1 6 b 0 1 3 shard:1/6/b/0 {}\n--\n" +
		"shard:1 5 c 0 1 4 stale\n" +
		"shard:1 6 b 0 1 5 duplicate\n--\n" +
		"shard:1 6 1 2\n--\n" +
		"shard:1 a 0\nshard:1 b 0\n--\n" +
		"--\n--\n--\n" // kept_records, rollout_marks, checkpoints: none
	if got != want {
		t.Fatalf("ledger:\n%s\nwant:\n%s", got, want)
	}
	c := m.Counts()
	if c[materializer.Accepted] != 2 || c[materializer.Stale] != 1 || c[materializer.Duplicate] != 1 || c[materializer.Barrier] != 2 {
		t.Fatalf("verdict counts %v", c)
	}
}

// TestFM11_NothingButASignedBarrierMovesTheFence: a forged barrier, a
// barrier signed for another lease, a stale barrier and a data record with
// the largest token: none moves the fence; each is recorded with its
// reason (FM15).
func TestFM11_NothingButASignedBarrierMovesTheFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	forged := bar("shard:1", 100)
	forged.value = []byte(`{"grant":{"lease":"shard:1","token":100},"signature":"AAAA"}`)
	crossLease := bar("shard:1", 50)
	crossLease.value = b.seal("shard:17", 50) // shard:17 also lives on partition 1
	last := b.write(1, bar("shard:1", 10), forged, crossLease,
		data("shard:1", maxToken, "max", 0), bar("shard:1", 9), bar("shard:17", 50),
		rec{bare: true}, data("shard:1", 10, "ok", 0))
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, 1, last)
	if f := count(t, b.db, `SELECT token FROM fences WHERE lease = 'shard:1'`); f != 10 {
		t.Fatalf("fence of shard:1 = %d, want 10", f)
	}
	if n := count(t, b.db, `SELECT count(*) FROM rejected_records WHERE reason = 'bad_barrier'`); n != 3 {
		t.Fatalf("%d bad_barrier receipts, want 3 (forged, cross-lease, stale)", n)
	}
	for reason, want := range map[string]int64{"unfenced": 1, "malformed": 1, "stale": 0, "duplicate": 0} {
		if n := count(t, b.db, `SELECT count(*) FROM rejected_records WHERE reason = $1`, reason); n != want {
			t.Errorf("%d %s receipts, want %d", n, reason, want)
		}
	}
	if n := count(t, b.db, `SELECT count(*) FROM accepted_records`); n != 1 {
		t.Fatalf("%d accepted, want 1", n)
	}
	if f := count(t, b.db, `SELECT token FROM fences WHERE lease = 'shard:17'`); f != 50 {
		t.Fatalf("shard:17's own barrier did not open its generation: %d", f)
	}
}
