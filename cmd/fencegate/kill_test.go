package main

import (
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/loadtest"
)

// TestMain lets this test binary stand in for the fencegate binary: run
// with FENCEGATE_TEST_MAIN=1 it is `fencegate <args>`, so the harness can
// start it as the gateway child it kills.
func TestMain(m *testing.M) {
	if os.Getenv("FENCEGATE_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestFM10_GatewayKilledMidRun: the gateway process dies with SIGKILL in
// the middle of a loaded run (batches in flight, some committed before
// their reply) and restarts; workers ask for new generations with their
// tokens and retry their batch ids. Every acknowledged batch is in Kafka
// and in the ledger exactly once, and no invariant breaks.
func TestFM10_GatewayKilledMidRun(t *testing.T) {
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 6, 1, 20, 128
	sc.Duration, sc.TTL, sc.Rate = 15*time.Second, 3*time.Second, 5
	sc.FreezeEvery, sc.ChurnEvery, sc.KillGatewayAfter = 0, 0, 6*time.Second
	sc.Direct, sc.Naive = false, false
	rep := runReplicas(t, 1, sc)
	if !rep.Pass {
		t.Fatal("invariants failed across the gateway kill")
	}
	if rep.Gateway.Errors == 0 {
		t.Fatal("no request failed: the kill did not land mid-run")
	}
	if rep.Gateway.Handovers <= int64(sc.Leases) {
		t.Fatalf("%d handovers: the workers did not take new generations after the restart", rep.Gateway.Handovers)
	}
}
