package loadtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// The replica faults of a balanced run, by the name the report gives
// them.
const (
	faultKill    = "kill"    // SIGKILL, restarted at once (KillReplicaEvery)
	faultStop    = "stop"    // SIGSTOP past the TTL (FreezeReplicaEvery)
	faultRestart = "restart" // SIGTERM, drain, restart: one step of RollingRestart
)

// fault is one replica fault: its kind, the replica and when it struck;
// for a stop, the leases (and tokens) whose session it held and when it
// was resumed.
type fault struct {
	kind    string
	replica string
	at      time.Time
	held    map[string]int64
	resumed time.Time
}

// visibleEvent is one thing an SDK call failed back to a worker of lease.
type visibleEvent struct {
	call, code, lease string
	at                time.Time
}

// balancedStats are a balanced run's own counts: the faults, what the
// SDK failed back to workers, and the replicas' restarts.
type balancedStats struct {
	// serial makes the replica faults strike one at a time: a kill never
	// lands on a replica a rolling restart is draining.
	serial  sync.Mutex
	kills   atomic.Int64
	mu      sync.Mutex
	faults  []fault
	events  []visibleEvent
	restart []time.Duration
}

func newBalancedStats() *balancedStats { return &balancedStats{} }

// visible records what an SDK call failed back to a worker of lease: call
// is "produce", "acquire", or "lost" (a lease lost while held).
func (b *balancedStats) visible(call, lease string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, visibleEvent{call: call, code: visibleCode(err), lease: lease, at: time.Now()})
}

// struck records a fault of kind on replica, now, with the leases it held
// (stop; nil otherwise).
func (b *balancedStats) struck(kind, replica string, held map[string]int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = append(b.faults, fault{kind: kind, replica: replica, at: time.Now(), held: held})
}

// resumed records that the last fault, a stop, ended now (SIGCONT).
func (b *balancedStats) resumed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults[len(b.faults)-1].resumed = time.Now()
}

func (b *balancedStats) restarted(took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.restart = append(b.restart, took)
}

// balancedEntry is the balanced scenario of the table: a stack started
// WithBalancer, SDK workers whose base URL is the balancer.
func balancedEntry() entry {
	return entry{name: "balanced", proves: "behind a load balancer, SDK workers see every lease served again within its bound after each replica fault, and no error the fault does not explain",
		flags: []string{"--balancer"},
		on:    func(_ Scenario, s *stack.Stack) bool { return s != nil && s.BalancerURL != "" },
		figures: func(r *runner, rep *report.Report, end time.Time) {
			rep.Balanced = r.balancedFigures(end)
		},
		report: "balanced"}
}

// balanced reports whether workers reach the replicas through a load
// balancer (SDK workers).
func (r *runner) balanced() bool { return r.stack.BalancerURL != "" }

// heldByReplica returns the live leases (and tokens) whose session the
// replica holds or is opening, from the lease store: SDK workers do not
// say where their requests go.
func (r *runner) heldByReplica(ctx context.Context, replica string) map[string]int64 {
	held := map[string]int64{}
	rows, err := r.stack.Pool.Query(ctx, `SELECT name, fencing_token FROM leases
		WHERE holder = $1 AND state IN ('pending', 'active') AND expires_at > now()`, replica)
	if err != nil {
		r.opts.Logger.Error("reading the leases of a stopped replica", "replica", replica, "error", err)
		return held
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var token int64
		if rows.Scan(&name, &token) == nil {
			held[name] = token
		}
	}
	return held
}

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
