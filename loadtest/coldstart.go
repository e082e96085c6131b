package loadtest

import (
	"context"

	"github.com/fencegate/fencegate/loadtest/stack"
)

// coldStartEntry is the cold-start scenario of the table.
func coldStartEntry() entry {
	return entry{name: "cold-start", proves: "every lease acquired at once writes its first batch: how long until all do, the handovers per second meanwhile and their CPU",
		flags:  []string{"--cold-start"},
		on:     func(sc Scenario, _ *stack.Stack) bool { return sc.ColdStart },
		start:  func(r *runner, p *phase) error { r.endAtColdStart(p.ctx, p.end); return nil },
		report: "cold_start"}
}

// endAtColdStart ends a cold-start run's gateway phase (cancel) once every
// lease has had its first batch acknowledged; other runs go on for their
// Duration.
func (r *runner) endAtColdStart(ctx context.Context, cancel context.CancelFunc) {
	if !r.sc.ColdStart {
		return
	}
	st := r.st
	go func() {
		select {
		case <-ctx.Done():
		case <-st.allBatched:
			cancel()
		}
	}()
}
