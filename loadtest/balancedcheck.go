package loadtest

import (
	"fmt"
	"slices"
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
)

// The balanced scenario's judgement: every lease's re-serve gap after
// each replica fault, and the worker-visible errors the faults explain.

// reserveBound is how soon after a fault of kind every lease must be
// served again: one TTL; after a stop one TTL after the frozen holder's
// lease expired, which is up to a TTL after the stop.
func (r *runner) reserveBound(kind string) time.Duration {
	if kind == faultStop {
		return 2 * r.sc.TTL
	}
	return r.sc.TTL
}

// balancedFigures is the report's balanced section: the counts, and the
// re-serve gaps measured on the acknowledged batches up to end.
func (r *runner) balancedFigures(end time.Time) *report.BalancedFigures {
	b := r.bal
	b.mu.Lock()
	defer b.mu.Unlock()
	f := &report.BalancedFigures{Balancer: r.stack.Balancer(), Replicas: len(r.stack.Children()), Forwarding: r.stack.Forwarding(),
		Faults: map[string]int64{}, VisibleByCall: map[string]int64{}}
	for _, ft := range b.faults {
		f.Faults[ft.kind]++
		f.StoppedHeld += int64(len(ft.held))
	}
	for _, v := range b.events {
		if v.call == "lost" {
			f.LeasesLost++
		} else {
			f.VisibleErrors++
		}
		f.VisibleByCall[v.call+" "+v.code]++
		switch {
		case r.ofStoppedHolder(b.faults, v):
			f.OfStoppedHolders++
		case r.afterResume(b.faults, v):
			f.AfterResume++
		}
	}
	for _, d := range b.restart {
		f.RestartSeconds = append(f.RestartSeconds, d.Seconds())
	}
	f.Reserve = r.reserveGaps(b.faults, end)
	f.Pass = f.Reserve.Pass && f.VisibleErrors+f.LeasesLost == f.OfStoppedHolders
	return f
}

// ofStoppedHolder reports whether v befell a lease whose session a
// stopped replica held, within the stop's bound: a frozen holder commits
// nothing and renews nothing until it resumes, so its leases' batches
// time out and the leases are lost at their local deadline (fail
// closed), by design.
// afterResume reports whether v came within the stop's bound after a
// stopped replica resumed (FM53).
func (r *runner) afterResume(faults []fault, v visibleEvent) bool {
	for _, ft := range faults {
		if !ft.resumed.IsZero() && !v.at.Before(ft.resumed) && v.at.Sub(ft.resumed) <= r.reserveBound(faultStop) {
			return true
		}
	}
	return false
}

func (r *runner) ofStoppedHolder(faults []fault, v visibleEvent) bool {
	for _, ft := range faults {
		_, held := ft.held[v.lease]
		if held && !v.at.Before(ft.at) && v.at.Sub(ft.at) <= r.reserveBound(faultStop) {
			return true
		}
	}
	return false
}

// reserveGaps measures, for every fault and every lease, the time from
// the fault to the lease's next acknowledged batch (until end: never).
func (r *runner) reserveGaps(faults []fault, end time.Time) report.ReserveGaps {
	acks := map[string][]time.Time{}
	r.st.mu.Lock()
	for _, a := range r.st.acked {
		acks[a.Lease] = append(acks[a.Lease], a.At)
	}
	r.st.mu.Unlock()
	for _, ts := range acks {
		slices.SortFunc(ts, time.Time.Compare)
	}
	g := report.ReserveGaps{MaxMsByFault: map[string]float64{}, BoundMsByFault: map[string]float64{}, Pass: true}
	var hist report.Histogram
	for _, ft := range faults {
		bound := r.reserveBound(ft.kind)
		g.BoundMsByFault[ft.kind] = ms(bound)
		for l := range r.sc.Leases {
			gap, ok := nextAfter(acks[leaseName(l)], ft.at, end)
			g.Measured++
			if !ok {
				g.Never++
			}
			hist.Record(gap)
			g.MaxMs = max(g.MaxMs, ms(gap))
			g.MaxMsByFault[ft.kind] = max(g.MaxMsByFault[ft.kind], ms(gap))
			g.Pass = g.Pass && ok && gap <= bound
		}
	}
	g.P99Ms = hist.Ms(0.99)
	return g
}

// nextAfter is the time from at to the first of the sorted times after it
// (ok), or to end when none is.
func nextAfter(times []time.Time, at, end time.Time) (time.Duration, bool) {
	i, _ := slices.BinarySearchFunc(times, at, time.Time.Compare)
	for i < len(times) && !times[i].After(at) {
		i++
	}
	if i == len(times) {
		return end.Sub(at), false
	}
	return times[i].Sub(at), true
}

// leaseName is the name of lease i of the run.
func leaseName(i int) string { return fmt.Sprintf("shard:%d", i) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
