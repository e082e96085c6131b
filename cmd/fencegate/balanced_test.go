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
	"github.com/fencegate/fencegate/loadtest/report"
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
	sc := balancedScenario()
	// The kill strikes at 5 s; the rolling restart begins at a quarter of
	// the run (7 s), once the kill's restart is done (one fault at a
	// time), and restarts all three; the last TTLs of the run have no
	// fault, so that every lease's gap after the last one is measured.
	sc.Duration = 28 * time.Second
	sc.KillReplicaEvery, sc.RollingRestart = 5*time.Second, true
	rep := runBalanced(t, sc)
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

// balancedScenario is the load of the balanced tests: six SDK workers,
// ten batches a second each, TTL 4 s, no worker faults or baselines.
func balancedScenario() loadtest.Scenario {
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize, sc.Rate = 6, 1, 20, 128, 10
	sc.TTL = 4 * time.Second
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	return sc
}

// runBalanced runs sc on three gateway replicas as processes (this test
// binary stands in for fencegate) behind HAProxy and returns the report,
// logged in full.
func runBalanced(t *testing.T, sc loadtest.Scenario) *report.Report {
	t.Helper()
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
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	return rep
}

// TestFM52_StoppedReplicaCostsOnlyItsOwnLeases: one of three replicas
// behind HAProxy is stopped (SIGSTOP) past the TTL under load. The
// requests the balancer sent it before its health check took it out
// (renewals and batches of leases held elsewhere) are cut and retried on
// another replica: while it is stopped no SDK call fails back to a
// worker and no lease is lost beyond the leases the stopped replica held,
// which fail closed at their local deadline and are served again within a
// TTL of expiring. The invariants and the ledger hold throughout. What
// befalls a lease once the replica resumes is FM53's, logged, not
// asserted here: it has no answer yet.
func TestFM52_StoppedReplicaCostsOnlyItsOwnLeases(t *testing.T) {
	sc := balancedScenario()
	// One stop: at 5 s, for 3 x TTL; the fault window ends before another.
	sc.Duration, sc.FreezeReplicaEvery = 24*time.Second, 5*time.Second
	rep := runBalanced(t, sc)
	b, inv := rep.Balanced, rep.Invariants
	switch {
	case b == nil || b.Faults["stop"] < 1:
		t.Fatalf("no replica was stopped: %+v", b)
	case b.StoppedHeld == 0:
		t.Fatal("the stopped replica held no lease: the stop proves nothing")
	case rep.Gateway.DefiniteButCommitted != 0 || !rep.Ledger.Pass:
		t.Fatalf("definite refusals committed %d, ledger %+v", rep.Gateway.DefiniteButCommitted, rep.Ledger)
	case b.VisibleErrors+b.LeasesLost != b.OfStoppedHolders+b.AfterResume:
		t.Fatalf("%d errors and losses while stopped beyond the %d leases the stopped replica held: %v",
			b.VisibleErrors+b.LeasesLost-b.OfStoppedHolders-b.AfterResume, b.StoppedHeld, b.VisibleByCall)
	case !b.Reserve.Pass:
		t.Fatalf("a lease was not served again in time: %+v", b.Reserve)
	case !inv.I1.Pass || !inv.I2.Pass || !inv.I3.Pass || !inv.I4.Pass:
		t.Fatal("an invariant (I1..I4, commit order) failed")
	}
	if b.AfterResume > 0 {
		// FM53, not yet answered: the resumed replica fenced a lease held
		// elsewhere. Safe (the fence is the guarantee) but a loss.
		t.Logf("FM53: %d errors or losses after the stopped replica resumed", b.AfterResume)
	}
}
