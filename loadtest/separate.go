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
}

// Register defines b's flags on fs, with the child's defaults.
func (b *BaselineChild) Register(fs *flag.FlagSet) {
	fs.StringVar(&b.Mode, "mode", BaselineDirect, "direct (one transactional producer per lease, delivery reports awaited) or bare (the yardstick)")
	fs.IntVar(&b.Producers, "producers", 16, "producers (direct: one per lease)")
	fs.IntVar(&b.BatchSize, "batch-size", 100, "records per transaction")
	fs.IntVar(&b.RecordSize, "record-size", 1024, "bytes per record")
	fs.DurationVar(&b.Duration, "duration", 10*time.Second, "how long the loop runs")
}

// Args are b as the flags Register defines.
func (b BaselineChild) Args() []string {
	return []string{"--mode", b.Mode, "--producers", strconv.Itoa(b.Producers), "--batch-size", strconv.Itoa(b.BatchSize),
		"--record-size", strconv.Itoa(b.RecordSize), "--duration", b.Duration.String()}
}

// Run runs the baseline in this process, on conn's cluster.
func (b BaselineChild) Run(ctx context.Context, conn kafkaconn.Config) (BaselineOutput, error) {
	var out BaselineOutput
	switch b.Mode {
	case BaselineDirect:
		sc := Defaults()
		sc.Leases, sc.BatchSize, sc.RecordSize, sc.Duration = b.Producers, b.BatchSize, b.RecordSize, b.Duration
		f, err := RunDirect(ctx, conn, sc)
		out.Direct = &f
		return out, err
	case BaselineBare:
		f, err := RunBare(ctx, conn, b.Producers, b.BatchSize, b.RecordSize, b.Duration)
		out.Bare = &f
		return out, err
	}
	return out, errors.New("--mode: direct or bare")
}

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
	out, u, err := r.runBaselineChild(ctx, report.ProcDirect, BaselineChild{Mode: BaselineDirect,
		Producers: r.sc.Leases, BatchSize: r.sc.BatchSize, RecordSize: r.sc.RecordSize, Duration: r.baselineDuration()}.Args())
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
	out, u, err := r.runBaselineChild(ctx, report.ProcBare, BaselineChild{Mode: BaselineBare,
		Producers: n, BatchSize: r.sc.BatchSize, RecordSize: r.sc.RecordSize, Duration: r.baselineDuration()}.Args())
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
