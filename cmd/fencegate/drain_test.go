package main

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/loadtest"
)

// TestDrainReplicaUnderLoad: a rolling restart. Two gateway replicas run
// as processes (this test binary stands in for fencegate) under load; one
// gets SIGTERM: it drains (readiness 503, new acquires refused with
// draining, batches in flight finish, its sessions answer not_holder, it
// leaves the registry) and exits, and is started again. Every acknowledged
// batch is in the ledger once, every lease it held has a new generation on
// the other replica within one TTL, and workers saw no error beyond the
// re-home (not_holder, draining).
func TestDrainReplicaUnderLoad(t *testing.T) {
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 8, 2, 50, 256
	// TTL 8 s: the re-home (drain, not_holder, a handover on the other
	// replica) does not wait on the TTL, which bounds it; at 5 s a machine
	// at load 65 once took 5.07 s.
	sc.Duration, sc.TTL, sc.DrainReplicaAfter = 14*time.Second, 8*time.Second, 6*time.Second
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	rep := runReplicas(t, 2, sc)
	g := rep.Gateway
	switch {
	case !rep.Pass:
		t.Fatal("invariants or the ledger failed across the drain")
	case g.DrainSeconds <= 0:
		t.Fatal("the replica was not drained")
	case g.RehomeSeconds < 0 || g.RehomeSeconds > sc.TTL.Seconds():
		t.Fatalf("the drained replica's leases moved within %.2fs, want within one TTL (%s)", g.RehomeSeconds, sc.TTL)
	case g.DrainErrors != 0:
		t.Fatalf("workers saw %d errors during the drain (answers: %v)", g.DrainErrors, g.AnswersByCode)
	}
}
