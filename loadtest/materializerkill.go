package loadtest

import (
	"context"

	"github.com/fencegate/fencegate/loadtest/stack"
)

// materializerKillEntry is the materializer-kill scenario of the table
// (FM54).
func materializerKillEntry() entry {
	return entry{name: "materializer-kill", proves: "the materializer child killed -9 mid-chunk and restarted: the ledger still equals the acknowledged batches (FM54)",
		flags: []string{"--kill-materializer-every"},
		on:    func(sc Scenario, _ *stack.Stack) bool { return sc.KillMaterializerEvery > 0 },
		fault: named("materializer kills"),
		start: func(r *runner, p *phase) error {
			// Over the whole run: the materializer is on no worker's
			// path, so no re-serve gap needs a quiet end.
			r.every(p.ctx, p.faults, r.sc.KillMaterializerEvery, func() { r.killMaterializer(p.ctx) })
			return nil
		}}
}

// killMaterializer kills the materializer child and restarts it (FM54).
func (r *runner) killMaterializer(ctx context.Context) {
	err := r.stack.KillMaterializer(ctx)
	if err != nil && ctx.Err() == nil {
		r.opts.Logger.Error("materializer kill and restart", "error", err)
	}
	if r.stack.MaterializerRunning() {
		r.matKills.Add(1)
	} else if ctx.Err() == nil {
		r.st.errors.Add(1)
	}
}
