package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestTrustedUnderMaterializerKillsShort: `loadtest --separate-processes
// --trusted --kill-materializer-every` in short form: the materializer
// child (both sinks) is killed with SIGKILL every 4 s under load with
// forced handovers and restarted; the trusted topic holds every
// acknowledged batch once, equals the ledger record for record, in order
// (FM54), and so does the ledger.
func TestTrustedUnderMaterializerKillsShort(t *testing.T) {
	stk, log := trustedStack(t)
	sc := trustedScenario()
	sc.KillMaterializerEvery = 4 * time.Second
	tc := runTrusted(t, stk, sc, log, "with the materializer killed")
	if tc.MaterializerKills < 2 {
		t.Fatalf("%d kills, want at least 2", tc.MaterializerKills)
	}
}

// TestTrustedUnderRebalancesShort: `loadtest --separate-processes
// --trusted --trusted-rebalance-every` in short form: a second trusted
// sink instance joins the sink's group every other 3 s tick and leaves at
// the next, so partitions move by cooperative rebalances between two
// instances under load with forced handovers (FM56); each join is
// confirmed by the group (both instances with partitions). The trusted
// topic holds every acknowledged batch once, equals the ledger record for
// record, in order.
func TestTrustedUnderRebalancesShort(t *testing.T) {
	stk, log := trustedStack(t)
	sc := trustedScenario()
	// Leases on most partitions, so that each rebalance moves some with
	// records.
	sc.Leases, sc.Rate = 12, 8
	sc.TrustedRebalanceEvery = 3 * time.Second
	tc := runTrusted(t, stk, sc, log, "with partitions moving between two instances")
	if tc.SecondJoins < 1 || tc.SecondLeaves < 1 {
		t.Fatalf("%d joins and %d leaves of the second instance, want one of each at least", tc.SecondJoins, tc.SecondLeaves)
	}
}

// runTrusted runs sc on stk and returns the trusted topic's check, failing
// the test unless the run and the check passed with records in the
// topic; under names the fault, for the failure.
func runTrusted(t *testing.T, stk *stack.Stack, sc loadtest.Scenario, log *slog.Logger, under string) *report.TrustedCheck {
	t.Helper()
	rep, err := loadtest.Run(context.Background(), stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	tc := rep.Trusted
	switch {
	case tc == nil:
		t.Fatal("the trusted topic was not checked")
	case !rep.Pass || !tc.Pass:
		t.Fatalf("the run failed its checks %s: %+v", under, tc)
	case tc.Records == 0 || tc.AckedBatches == 0:
		t.Fatalf("nothing reached the trusted topic: %+v", tc)
	}
	return tc
}

// trustedStack is the separate-processes stack with both sinks, this
// test binary as the children, closed when the test ends.
func trustedStack(t *testing.T) (*stack.Stack, *slog.Logger) {
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartSeparateProcesses(context.Background(), pgtest.ServerURL(), exe, stack.SeparateOptions{}, log, stack.WithTrusted())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stk.Close)
	return stk, log
}

// trustedScenario is the short trusted run: 4 leases at 20 batches/s of
// 20 x 256 B, handovers forced every 2 s, over 14 s.
func trustedScenario() loadtest.Scenario {
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 4, 1, 20, 256
	sc.Duration, sc.TTL, sc.Rate = 14*time.Second, 3*time.Second, 20
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 2*time.Second, false, false
	return sc
}
