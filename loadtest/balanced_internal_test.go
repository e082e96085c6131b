package loadtest

import (
	"math"
	"testing"
	"time"
)

// TestReserveGapsMeasureEveryLeaseAfterEveryFault: the re-serve gap of a
// lease is the time from each fault to its next acknowledged batch; a
// lease with none after a fault counts as never served again, and a gap
// over the fault's bound (one TTL; two after a stop) fails the check.
func TestReserveGapsMeasureEveryLeaseAfterEveryFault(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	run := func(acks map[int][]float64) *runner {
		r := newRunner(nil, Scenario{Leases: 2, TTL: time.Second}, Options{})
		for l, secs := range acks {
			for _, s := range secs {
				r.st.acked = append(r.st.acked, AckedBatch{Lease: leaseName(l), At: at(s)})
			}
		}
		return r
	}
	cases := []struct {
		name   string
		faults []fault
		acks   map[int][]float64
		pass   bool
		never  int
		maxMs  float64
	}{
		{"served within a TTL", []fault{{kind: faultKill, at: at(1)}}, map[int][]float64{0: {0.5, 1.2}, 1: {1.9, 0.2}}, true, 0, 900},
		{"a gap over one TTL", []fault{{kind: faultKill, at: at(1)}}, map[int][]float64{0: {1.1}, 1: {2.5}}, false, 0, 1500},
		{"a stop allows two TTLs", []fault{{kind: faultStop, at: at(1)}}, map[int][]float64{0: {1.1}, 1: {2.5}}, true, 0, 1500},
		{"never served again", []fault{{kind: faultRestart, at: at(1)}}, map[int][]float64{0: {1.1}, 1: {0.9}}, false, 1, 2000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := run(c.acks).reserveGaps(c.faults, at(3))
			if g.Pass != c.pass || g.Never != c.never || g.Measured != 2 || math.Abs(g.MaxMs-c.maxMs) > 1 {
				t.Fatalf("got %+v, want pass %v, never %d, max %.0f ms over 2 pairs", g, c.pass, c.never, c.maxMs)
			}
		})
	}
}
