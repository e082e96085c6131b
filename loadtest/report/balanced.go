package report

import (
	"fmt"
	"io"
	"sort"
)

// BalancedFigures are a balanced run's (loadtest --balancer): SDK workers
// whose BaseURL is a load balancer in front of the replicas, under
// replica faults (SIGKILL and restart, SIGSTOP past the TTL, a rolling
// restart with drain).
type BalancedFigures struct {
	Balancer string `json:"balancer"`
	Replicas int    `json:"replicas"`
	// Forwarding: the replicas shared a replica credential and forwarded
	// requests to the holder; otherwise they answered 421 with holder_url
	// and the SDK followed it to the replica's own address.
	Forwarding bool `json:"forwarding"`
	// Faults counts the faults by kind: kill, stop, restart (one replica
	// of a rolling restart).
	Faults map[string]int64 `json:"faults"`
	// VisibleErrors are SDK calls that failed back to a worker (Produce,
	// AcquireWait) after the SDK's own retries; LeasesLost are leases
	// lost while held (Lost closed). By kind: "produce timeout",
	// "lost deadline_passed".
	VisibleErrors int64            `json:"visible_errors"`
	LeasesLost    int64            `json:"leases_lost"`
	VisibleByCall map[string]int64 `json:"visible_by_call"`
	// StoppedHeld are the leases whose session a replica held when it
	// was stopped (summed over the stops), and OfStoppedHolders the
	// errors and losses of those leases within two TTLs of the stop: a
	// frozen holder answers nothing, so its leases' batches time out and
	// the leases are lost at their local deadline (fail closed). The goal
	// is no error or loss beyond those.
	StoppedHeld      int64 `json:"stopped_held"`
	OfStoppedHolders int64 `json:"of_stopped_holders"`
	// AfterResume are the other errors and losses within two TTLs after a
	// stopped replica resumed (FM53: the resumed replica fenced a lease
	// held elsewhere).
	AfterResume int64 `json:"after_resume"`
	// Reserve is the re-serve gap: per fault and lease, the time from the
	// fault to the lease's next acknowledged batch.
	Reserve ReserveGaps `json:"reserve"`
	// RestartSeconds are, per restarted replica (kill or rolling
	// restart), the time from the signal until it was ready and back in
	// the balancer's rotation.
	RestartSeconds []float64 `json:"restart_seconds,omitempty"`
	Pass           bool      `json:"pass"`
}

// ReserveGaps are the re-serve gaps of a balanced run.
type ReserveGaps struct {
	// Measured is the number of (fault, lease) pairs; Never those whose
	// lease had no acknowledged batch after the fault.
	Measured int     `json:"measured"`
	Never    int     `json:"never"`
	MaxMs    float64 `json:"max_ms"`
	P99Ms    float64 `json:"p99_ms"`
	// MaxMsByFault is the largest gap after each kind of fault and
	// BoundMsByFault the bound it must keep: one TTL, and for a stopped
	// replica one TTL after the lease expires (two TTLs from the stop),
	// since a frozen holder keeps its lease until then.
	MaxMsByFault   map[string]float64 `json:"max_ms_by_fault"`
	BoundMsByFault map[string]float64 `json:"bound_ms_by_fault"`
	Pass           bool               `json:"pass"`
}

func (b *BalancedFigures) writeMarkdown(w io.Writer) {
	mode := "421 followed by the SDK"
	if b.Forwarding {
		mode = "forwarding"
	}
	fmt.Fprintf(w, "\nbalanced: %s in front of %d replicas (%s); faults: %s\n", b.Balancer, b.Replicas, mode, counts(b.Faults))
	fmt.Fprintf(w, "worker-visible errors: %d, leases lost: %d%s\n", b.VisibleErrors, b.LeasesLost, breakdown(b.VisibleByCall))
	if b.StoppedHeld > 0 {
		fmt.Fprintf(w, "of leases a stopped replica held (%d): %d; beyond them: %d, of which after a resume: %d\n", b.StoppedHeld,
			b.OfStoppedHolders, b.VisibleErrors+b.LeasesLost-b.OfStoppedHolders, b.AfterResume)
	}
	g := b.Reserve
	fmt.Fprintf(w, "re-serve gap (fault to the lease's next acknowledged batch): max %.0f ms, p99 %.0f ms over %d (fault, lease) pairs, never served again %d: %s\n",
		g.MaxMs, g.P99Ms, g.Measured, g.Never, passText(g.Pass))
	for _, k := range sortedKeys(g.MaxMsByFault) {
		fmt.Fprintf(w, "- after %s: max %.0f ms (bound %.0f ms)\n", k, g.MaxMsByFault[k], g.BoundMsByFault[k])
	}
	if len(b.RestartSeconds) > 0 {
		fmt.Fprintf(w, "restarts (signal to ready and in rotation), s: %.2f\n", b.RestartSeconds)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
