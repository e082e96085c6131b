package loadtest_test

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/loadtest"
)

// TestColdStartEndsWhenEveryLeaseWrote: a cold-start run ends its phase
// once every lease has had its first batch acknowledged, well before its
// Duration, and reports that time and the handovers per second until it.
func TestColdStartEndsWhenEveryLeaseWrote(t *testing.T) {
	const leases = 6
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = leases, 1, 10, 64
	sc.Duration, sc.TTL, sc.BatchEvery, sc.ColdStart = time.Minute, 3*time.Second, time.Second, true
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	start := time.Now()
	rep := runEmbedded(t, sc)
	c := rep.ColdStart
	if took := time.Since(start); took > 30*time.Second || rep.Gateway.Seconds >= sc.Duration.Seconds() {
		t.Fatalf("the run took %s, its phase %.1fs: it did not end at the cold start", took, rep.Gateway.Seconds)
	}
	if c.FirstBatchSeconds < 0 || c.FirstBatchSeconds != rep.Gateway.Seconds || c.HandoversToFirstBatch != leases || c.HandoversPerS <= 0 {
		t.Fatalf("cold start %+v, phase %.2fs: want the phase to be the time until every lease wrote, %d handovers", c, rep.Gateway.Seconds, leases)
	}
	if rep.Gateway.Batches < leases || rep.Gateway.Errors != 0 {
		t.Fatalf("gateway %+v: want a batch of every lease and no errors", rep.Gateway)
	}
}
