package loadtest

import (
	"context"
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
