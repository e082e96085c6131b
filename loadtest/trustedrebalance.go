package loadtest

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/loadtest/stack"
)

// trustedRebalanceEntry is the trusted-rebalance scenario of the table
// (FM56).
func trustedRebalanceEntry() entry {
	return entry{name: "trusted-rebalance", proves: "the trusted sink's partitions moved between two instances under load: the trusted topic still holds each acknowledged batch once, in order (FM56)",
		flags: []string{"--trusted-rebalance-every"},
		on:    func(sc Scenario, _ *stack.Stack) bool { return sc.TrustedRebalanceEvery > 0 },
		fault: named("trusted sink rebalances"),
		start: func(r *runner, p *phase) error {
			r.every(p.ctx, p.faults, r.sc.TrustedRebalanceEvery, func() { r.rebalanceTrusted(p.ctx) })
			return nil
		}}
}

// rebalanceTrusted starts a second trusted sink instance, or stops it
// (FM56): partitions move by a cooperative rebalance either way.
func (r *runner) rebalanceTrusted(ctx context.Context) {
	began := time.Now()
	joined, err := r.stack.ToggleSecondTrusted(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		r.opts.Logger.Error("second trusted sink", "joined", joined, "error", err)
		r.st.errors.Add(1)
	case err != nil:
	case joined:
		r.trustedJoins.Add(1)
		r.trustedJoinMs.Store(max(r.trustedJoinMs.Load(), time.Since(began).Milliseconds()))
	default:
		r.trustedLeaves.Add(1)
	}
}
