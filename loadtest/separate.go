package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// The modes of the baseline child.
const (
	BaselineDirect = "direct"
	BaselineBare   = "bare"
	// BaselineHandover is the handover yardstick (RunBareHandovers).
	BaselineHandover = "handover"
)

// BaselineChild is one run of the `fencegate loadtest-baseline` child:
// the harness passes it as flags (Args), the child parses them (Register)
// and runs it (Run), so both ends share one definition.
type BaselineChild struct {
	// Mode is BaselineDirect (one transactional producer per lease,
	// delivery reports awaited) or BaselineBare (the yardstick).
	Mode       string
	Producers  int
	BatchSize  int
	RecordSize int
	Duration   time.Duration
	// Plain writes records without the fencegate headers (the form before
	// the yardstick was made like for like); the default stamps the five
	// headers the gateway stamps.
	Plain bool
	// Rate paces each direct producer at this many batches/s, as the
	// gateway's workers are paced (0: open loop; the bare loop ignores it).
	Rate float64
}

// Register defines b's flags on fs, with the child's defaults.
func (b *BaselineChild) Register(fs *flag.FlagSet) {
	fs.StringVar(&b.Mode, "mode", BaselineDirect, "direct (one transactional producer per lease, delivery reports awaited), bare (the yardstick) or handover (new producer, InitTransactions, one-record transaction, in a loop)")
	fs.IntVar(&b.Producers, "producers", 16, "producers (direct: one per lease; handover: loops at once)")
	fs.IntVar(&b.BatchSize, "batch-size", 100, "records per transaction")
	fs.IntVar(&b.RecordSize, "record-size", 1024, "bytes per record")
	fs.DurationVar(&b.Duration, "duration", 10*time.Second, "how long the loop runs")
	fs.BoolVar(&b.Plain, "plain", false, "records without the five fencegate headers the gateway stamps")
	fs.Float64Var(&b.Rate, "rate", 0, "direct: batches/s per producer (0: open loop)")
}

// Args are b as the flags Register defines.
func (b BaselineChild) Args() []string {
	return []string{"--mode", b.Mode, "--producers", strconv.Itoa(b.Producers), "--batch-size", strconv.Itoa(b.BatchSize),
		"--record-size", strconv.Itoa(b.RecordSize), "--duration", b.Duration.String(),
		"--plain=" + strconv.FormatBool(b.Plain), "--rate", strconv.FormatFloat(b.Rate, 'g', -1, 64)}
}

// Run runs the baseline in this process, on conn's cluster.
func (b BaselineChild) Run(ctx context.Context, conn kafkaconn.Config) (BaselineOutput, error) {
	var out BaselineOutput
	switch b.Mode {
	case BaselineDirect:
		f, err := RunDirect(ctx, conn, b)
		out.Direct = &f
		return out, err
	case BaselineBare:
		f, err := RunBare(ctx, conn, b)
		out.Bare = &f
		return out, err
	case BaselineHandover:
		f, err := RunBareHandovers(ctx, conn, b)
		out.Handover = &f
		return out, err
	}
	return out, errors.New("--mode: direct, bare or handover")
}

// BaselineOutput is what `fencegate loadtest-baseline` prints as JSON:
// the figures of the one baseline it ran.
type BaselineOutput struct {
	Direct   *report.DirectFigures   `json:"direct,omitempty"`
	Bare     *report.BareFigures     `json:"bare,omitempty"`
	Handover *report.HandoverFigures `json:"handover,omitempty"`
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

// directChild runs the direct baseline in its own process, stamped or
// plain, the process and its phase named proc.
func (r *runner) directChild(ctx context.Context, rep *report.Report, proc string, plain bool) (*report.DirectFigures, error) {
	out, u, err := r.runBaselineChild(ctx, proc, BaselineChild{Mode: BaselineDirect, Producers: r.sc.Leases,
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
	out, u, err := r.runBaselineChild(ctx, proc, BaselineChild{Mode: BaselineBare, Producers: sep.BareProducers,
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
	out, u, err := r.runBaselineChild(ctx, report.ProcHandover, BaselineChild{Mode: BaselineHandover, Producers: loops,
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
