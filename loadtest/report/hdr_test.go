package report

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestHistogramQuantilesWithinPrecision(t *testing.T) {
	t.Parallel()
	var h Histogram
	var vals []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		d := time.Duration(r.ExpFloat64()*20000) * time.Microsecond
		vals = append(vals, d)
		h.Record(d)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)-1))]
		got := h.Quantile(q)
		if diff := float64(got-want) / float64(want); diff > 0.02 || diff < -0.02 {
			t.Errorf("q%.3f = %s, exact %s (%.2f%% off)", q, got, want, diff*100)
		}
	}
	for us := uint64(0); us < 1<<20; us = us*2 + 1 {
		if b := bucketOf(us); valueOf(b) > us*102/100+1 || valueOf(b)+valueOf(b)/50+1 < us {
			t.Errorf("bucket of %d has value %d", us, valueOf(b))
		}
	}
}
