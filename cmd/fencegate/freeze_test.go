package main

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/loadtest"
)

// TestFM25_ReplicaFrozenMidCommit: two gateway replicas run as processes
// (this test binary stands in for fencegate); under load, one at a time is
// paused with SIGSTOP past the TTL while its leases move to the other,
// then resumed. Every answer is compared with the log read back, every
// record and transaction marker: no definite refusal was committed, no
// old generation committed after a newer barrier, every acknowledged
// batch is in the ledger once, and the broker's fence (not only the
// session check) refused the resumed replica's writes. Whether a resumed
// replica still has a write for the broker to refuse depends on where the
// pause caught it: in a loaded full suite, 16 s (three freezes) once ended
// with every stale write caught by the session check, so the run is long
// enough for several (8 freezes, 13 broker fences in a run here).
func TestFM25_ReplicaFrozenMidCommit(t *testing.T) {
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 8, 2, 50, 256
	sc.Duration, sc.TTL, sc.FreezeReplicaEvery = 26*time.Second, 2*time.Second, 5*time.Second
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	rep := runReplicas(t, 2, sc)
	g := rep.Gateway
	switch {
	case !rep.Pass:
		t.Fatal("invariants failed across replica freezes")
	case g.ReplicaFreezes < 2:
		t.Fatalf("%d replica freezes, want at least 2", g.ReplicaFreezes)
	case g.DefiniteButCommitted != 0:
		t.Fatalf("%d definite refusals were committed", g.DefiniteButCommitted)
	case g.StaleByLayer["broker_fence"] == 0:
		t.Fatalf("the broker fence never refused a resumed replica's write (by layer: %v)", g.StaleByLayer)
	}
}
