package main

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

// TestTrustedUnderMaterializerKillsShort: `loadtest --separate-processes
// --trusted --kill-materializer-every` in short form: the materializer
// child (both sinks) is killed with SIGKILL every 4 s under load with
// forced handovers and restarted; the trusted topic holds every
// acknowledged batch once, equals the ledger record for record, in order
// (FM54), and so does the ledger.
func TestTrustedUnderMaterializerKillsShort(t *testing.T) {
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartSeparateProcesses(ctx, pgtest.ServerURL(), exe, stack.SeparateOptions{}, log, stack.WithTrusted())
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 4, 1, 20, 256
	sc.Duration, sc.TTL, sc.Rate = 14*time.Second, 3*time.Second, 20
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 2*time.Second, false, false
	sc.KillMaterializerEvery = 4 * time.Second
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	tc := rep.Trusted
	switch {
	case tc == nil:
		t.Fatal("the trusted topic was not checked")
	case !rep.Pass || !tc.Pass:
		t.Fatalf("the run failed its checks with the materializer killed: %+v", tc)
	case tc.MaterializerKills < 2:
		t.Fatalf("%d kills, want at least 2", tc.MaterializerKills)
	case tc.Records == 0 || tc.AckedBatches == 0:
		t.Fatalf("nothing reached the trusted topic: %+v", tc)
	}
}
