package loadtest_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestNetFaultsShort: --net-fault in short form: the broker's and
// Postgres's links partitioned (no reset) for 1.5 s every 3 s, under
// load with forced handovers. The run passes every check (I1-I4, commit
// order, the ledger, the history checker: no definite refusal committed,
// no lost write), and the fleet recovers after every fault.
func TestNetFaultsShort(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartEmbedded(ctx, pgtest.ServerURL(), log, stack.WithNetFaults())
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 4, 1, 10, 128
	sc.Duration, sc.TTL = 20*time.Second, 3*time.Second
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 4*time.Second, false, false
	sc.NetFault, sc.NetFaultLink, sc.NetFaultEvery, sc.NetFaultFor = "blackhole", "all", 3*time.Second, 1500*time.Millisecond
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	nf := rep.NetFault
	switch {
	case !rep.Pass:
		t.Fatalf("the run failed its checks under network faults")
	case nf == nil || nf.Rounds < 2:
		t.Fatalf("no network fault was applied: %+v", nf)
	case nf.Unrecovered > 0:
		t.Fatalf("%d faults were never followed by an acknowledged batch", nf.Unrecovered)
	case rep.History.Committed == 0:
		t.Fatalf("no answer reached the history checker: %+v", rep.History)
	}
}
