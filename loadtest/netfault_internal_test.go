package loadtest

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
)

// TestNetFaultRoundsAreJudgedUnlessAtTheEnd: a round after which a batch
// was acknowledged recovered; one after which none was fails, unless it
// ended within the window before the run's end (not judged, with why).
func TestNetFaultRoundsAreJudgedUnlessAtTheEnd(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var nf report.NetFault
	judgeRecovery(&nf, []time.Time{at(1), at(5), at(19)}, []time.Time{at(1.5), at(2)}, at(20), 2*time.Second)
	switch {
	case nf.Unrecovered != 1 || nf.NotJudged != 1 || nf.NotJudgedWhy == "":
		t.Fatalf("unrecovered %d, not judged %d (%q); want 1 and 1 with why", nf.Unrecovered, nf.NotJudged, nf.NotJudgedWhy)
	case nf.RecoveryMaxSeconds != 0.5:
		t.Fatalf("recovery %.2fs, want 0.5s", nf.RecoveryMaxSeconds)
	}
}
