package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/loadtest/baseline"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// runBaselineChild runs `fencegate loadtest-baseline` with args as the
// process name while the stack samples its processes, and returns its
// figures and the phase's usage.
func (r *runner) runBaselineChild(ctx context.Context, name string, args []string) (*baseline.Output, *stack.Usage, error) {
	raw, u, err := r.stack.RunBaselineChild(ctx, name, args)
	if err != nil {
		return nil, u, err
	}
	var out baseline.Output
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, u, fmt.Errorf("%s child output: %w", name, err)
	}
	return &out, u, nil
}

// directChild runs the direct baseline in its own process, stamped or
// plain, the process and its phase named proc.
func (r *runner) directChild(ctx context.Context, rep *report.Report, proc string, plain bool) (*report.DirectFigures, error) {
	out, u, err := r.runBaselineChild(ctx, proc, baseline.Child{Mode: baseline.ModeDirect, Producers: r.sc.Leases,
		BatchSize: r.sc.BatchSize, RecordSize: r.sc.RecordSize, Duration: r.baselineDuration(), Plain: plain, Rate: r.sc.Rate}.Args())
	addPhase(rep, proc, u)
	if err != nil {
		return nil, err
	}
	if out.Direct == nil {
		return nil, fmt.Errorf("the %s child printed no figures", proc)
	}
	return out.Direct, nil
}

// bareChild runs the bare-producer yardstick in its own process.
func (r *runner) bareChild(ctx context.Context, rep *report.Report, proc string, plain bool) (*report.BareFigures, error) {
	sep, _ := r.stack.Separate()
	out, u, err := r.runBaselineChild(ctx, proc, baseline.Child{Mode: baseline.ModeBare, Producers: sep.BareProducers,
		BatchSize: r.sc.BatchSize, RecordSize: r.sc.RecordSize, Duration: r.baselineDuration(), Plain: plain}.Args())
	addPhase(rep, proc, u)
	if err != nil {
		return nil, err
	}
	if out.Bare == nil {
		return nil, fmt.Errorf("the %s child printed no figures", proc)
	}
	return out.Bare, nil
}

// handoverChild runs the handover yardstick in its own process, loops
// handovers at once.
func (r *runner) handoverChild(ctx context.Context, rep *report.Report, loops int) error {
	out, u, err := r.runBaselineChild(ctx, report.ProcHandover, baseline.Child{Mode: baseline.ModeHandover, Producers: loops,
		BatchSize: 1, RecordSize: r.sc.RecordSize, Duration: r.baselineDuration()}.Args())
	addPhase(rep, report.ProcHandover, u)
	if err != nil {
		return err
	}
	if out.Handover == nil {
		return errors.New("the handover child printed no figures")
	}
	rep.BareHandover = out.Handover
	return nil
}

// separateBaselines runs the baselines that have a process of their own,
// each in both forms: stamped like the gateway's records (the yardstick)
// and plain (what the headers cost).
func (r *runner) separateBaselines(ctx context.Context, rep *report.Report) error {
	if r.sc.Direct {
		d, err := r.directChild(ctx, rep, report.ProcDirect, false)
		if err != nil {
			return fmt.Errorf("direct baseline: %w", err)
		}
		rep.Direct = *d
		if rep.DirectPlain, err = r.directChild(ctx, rep, report.ProcDirectPlain, true); err != nil {
			return fmt.Errorf("plain direct baseline: %w", err)
		}
	}
	sep, _ := r.stack.Separate()
	if sep.BareHandovers > 0 {
		if err := r.handoverChild(ctx, rep, sep.BareHandovers); err != nil {
			return fmt.Errorf("handover yardstick: %w", err)
		}
	}
	if sep.BareProducers > 0 {
		var err error
		if rep.Bare, err = r.bareChild(ctx, rep, report.ProcBare, false); err != nil {
			return fmt.Errorf("bare-producer yardstick: %w", err)
		}
		if rep.BarePlain, err = r.bareChild(ctx, rep, report.ProcBarePlain, true); err != nil {
			return fmt.Errorf("plain bare-producer yardstick: %w", err)
		}
	}
	return nil
}
