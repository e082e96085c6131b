package loadtest

import (
	"testing"
	"time"
)

// TestFaultsExplainingErrorsAreTheInfrastructures: a worker's own freeze
// or churn explains no worker error; an injected infrastructure fault
// does.
func TestFaultsExplainingErrorsAreTheInfrastructures(t *testing.T) {
	t.Parallel()
	sc := Defaults()
	sc.FreezeEvery, sc.ChurnEvery = time.Second, time.Second
	if f := sc.faults(); len(f) != 0 {
		t.Fatalf("faults %v, want none for freezes and churn", f)
	}
	sc.KillReplicaEvery, sc.NetFault = time.Second, "reset"
	if f := sc.faults(); len(f) != 2 {
		t.Fatalf("faults %v, want the network fault and the replica kills", f)
	}
}
