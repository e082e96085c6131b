package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// BaselineOutput is what `fencegate loadtest-baseline` prints as JSON:
// the figures of the one baseline it ran.
type BaselineOutput struct {
	Direct *report.DirectFigures `json:"direct,omitempty"`
	Bare   *report.BareFigures   `json:"bare,omitempty"`
}

// runBaselineChild runs `fencegate loadtest-baseline` with args as the
// process name while the stack samples its processes, and returns its
// figures and the phase's usage.
func (r *runner) runBaselineChild(ctx context.Context, name string, args []string) (*BaselineOutput, *stack.Usage, error) {
	raw, u, err := r.stack.RunBaselineChild(ctx, name, args)
	if err != nil {
		return nil, u, err
	}
	var out BaselineOutput
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, u, fmt.Errorf("%s child output: %w", name, err)
	}
	return &out, u, nil
}

// directChild runs the direct baseline in its own process.
func (r *runner) directChild(ctx context.Context, rep *report.Report) error {
	out, u, err := r.runBaselineChild(ctx, report.ProcDirect, []string{"--mode", "direct",
		"--producers", strconv.Itoa(r.sc.Leases), "--batch-size", strconv.Itoa(r.sc.BatchSize),
		"--record-size", strconv.Itoa(r.sc.RecordSize), "--duration", r.baselineDuration().String()})
	addPhase(rep, "direct", u)
	if err != nil {
		return err
	}
	if out.Direct == nil {
		return errors.New("the direct child printed no figures")
	}
	rep.Direct = *out.Direct
	return nil
}

// bareChild runs the bare-producer yardstick in its own process.
func (r *runner) bareChild(ctx context.Context, rep *report.Report) error {
	sep, _ := r.stack.Separate()
	n := sep.BareProducers
	out, u, err := r.runBaselineChild(ctx, report.ProcBare, []string{"--mode", "bare",
		"--producers", strconv.Itoa(n), "--batch-size", strconv.Itoa(r.sc.BatchSize),
		"--record-size", strconv.Itoa(r.sc.RecordSize), "--duration", r.baselineDuration().String()})
	addPhase(rep, "bare", u)
	if err != nil {
		return err
	}
	if out.Bare == nil {
		return errors.New("the bare child printed no figures")
	}
	rep.Bare = out.Bare
	return nil
}

// separateBaselines runs the baselines that have a process of their own.
func (r *runner) separateBaselines(ctx context.Context, rep *report.Report) error {
	if r.sc.Direct {
		if err := r.directChild(ctx, rep); err != nil {
			return fmt.Errorf("direct baseline: %w", err)
		}
	}
	if sep, _ := r.stack.Separate(); sep.BareProducers > 0 {
		if err := r.bareChild(ctx, rep); err != nil {
			return fmt.Errorf("bare-producer yardstick: %w", err)
		}
	}
	return nil
}
