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

// TestFleetFiguresByReplica: with three gateway replicas and the broker
// as child processes (the peak measurement's stack, no materializer),
// the report has each replica's CPU (non-zero) and memory, the broker's
// CPU from its own process, and per-lease costs from the steady state;
// the ledger is reported not checked rather than failed.
func TestFleetFiguresByReplica(t *testing.T) {
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartSeparateProcesses(ctx, pgtest.ServerURL(), exe,
		stack.SeparateOptions{Replicas: 3, NoMaterializer: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 6, 1, 20, 256
	sc.Duration, sc.TTL, sc.BatchEvery = 4*time.Second, 3*time.Second, 250*time.Millisecond
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if !rep.Pass || !rep.Ledger.NotChecked {
		t.Fatalf("pass %v, ledger %+v: want a pass with the ledger not checked", rep.Pass, rep.Ledger)
	}
	f := rep.Fleet
	if f == nil || len(f.Replicas) != 3 {
		t.Fatalf("fleet figures %+v: want three replicas", f)
	}
	for i, r := range f.Replicas {
		if r.Name != report.ReplicaProc(i, 3) || r.CPUSeconds <= 0 || r.PeakRSSMiB <= 0 {
			t.Errorf("replica %d: %+v: want its name, CPU and memory", i, r)
		}
	}
	if f.BrokerProcess != report.ProcBroker || f.Broker.ColdCPUSeconds+f.Broker.SteadyCPUSeconds <= 0 {
		t.Errorf("broker %s %+v: want the broker child's CPU", f.BrokerProcess, f.Broker)
	}
	if s := f.Steady; s.Leases != 6 || s.BatchesPerS <= 0 || s.GatewayMsPerBatch <= 0 || s.GatewayCoresPerLease <= 0 {
		t.Errorf("steady %+v: want batches per second and the CPU per batch and per lease", s)
	}
}
