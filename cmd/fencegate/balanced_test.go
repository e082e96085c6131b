package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestBalancedReplicasShort: three gateway replicas as processes (this
// test binary stands in for fencegate) behind HAProxy, driven by SDK
// workers whose base URL is the balancer. Under load, one replica is
// killed with SIGKILL and restarted at once, and all three are restarted
// in turn with a drain. Afterwards I1..I4 and the commit order hold, no
// definite refusal was committed, every acknowledged batch is in the
// ledger once, every lease was served again within one TTL of each fault,
// and no SDK call failed back to a worker and no lease was lost.
func TestBalancedReplicasShort(t *testing.T) {
	if _, err := exec.LookPath(stack.BalancerHAProxy); err != nil {
		t.Fatalf("needs haproxy (deploy/dev/haproxy.sh install; make test installs it): %v", err)
	}
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartEmbeddedReplicas(ctx, pgtest.ServerURL(), exe, 3, log, stack.WithBalancer(stack.BalancerHAProxy))
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize, sc.Rate = 6, 1, 20, 128, 10
	// The kill strikes at 5 s; the rolling restart begins at a quarter of
	// the run (7 s), once the kill's restart is done (one fault at a
	// time), and restarts all three; the last TTLs of the run have no
	// fault, so that every lease's gap after the last one is measured.
	sc.Duration, sc.TTL = 28*time.Second, 4*time.Second
	sc.KillReplicaEvery, sc.RollingRestart = 5*time.Second, true
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	b := rep.Balanced
	inv := rep.Invariants
	switch {
	case b == nil:
		t.Fatal("no balanced figures: the workers did not go through the balancer")
	case b.Faults["kill"] < 1 || b.Faults["restart"] != 3:
		t.Fatalf("faults %v, want at least one kill and a restart of each of the 3 replicas", b.Faults)
	case rep.Gateway.Batches == 0:
		t.Fatal("no batch was acknowledged")
	case !inv.I1.Pass || !inv.I2.Pass || !inv.I3.Pass || !inv.I4.Pass:
		t.Fatal("an invariant (I1..I4, commit order) failed")
	case rep.Gateway.DefiniteButCommitted != 0:
		t.Fatalf("%d definite refusals were committed", rep.Gateway.DefiniteButCommitted)
	case !rep.Ledger.Pass || rep.Ledger.AckedBatches == 0:
		t.Fatalf("the ledger does not hold every acknowledged batch once: %+v", rep.Ledger)
	case !b.Reserve.Pass || b.Reserve.Never != 0:
		t.Fatalf("a lease was not served again within one TTL of a fault: %+v", b.Reserve)
	case b.VisibleErrors != 0 || b.LeasesLost != 0:
		t.Fatalf("worker-visible errors %d, leases lost %d: %v", b.VisibleErrors, b.LeasesLost, b.VisibleByCall)
	case !rep.Pass:
		t.Fatal("the run failed its checks")
	}
}
