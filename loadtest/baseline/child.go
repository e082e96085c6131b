package baseline

import (
	"context"
	"errors"
	"flag"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/loadtest/report"
)

// The modes of the baseline child.
const (
	ModeDirect = "direct"
	ModeBare   = "bare"
	// ModeHandover is the handover yardstick (RunBareHandovers).
	ModeHandover = "handover"
)

// Child is one run of the `fencegate loadtest-baseline` child:
// the harness passes it as flags (Args), the child parses them (Register)
// and runs it (Run), so both ends share one definition.
type Child struct {
	// Mode is ModeDirect (one transactional producer per lease,
	// delivery reports awaited) or ModeBare (the yardstick).
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

// Output is what `fencegate loadtest-baseline` prints as JSON:
// the figures of the one baseline it ran.
type Output struct {
	Direct   *report.DirectFigures   `json:"direct,omitempty"`
	Bare     *report.BareFigures     `json:"bare,omitempty"`
	Handover *report.HandoverFigures `json:"handover,omitempty"`
}

// Register defines b's flags on fs, with the child's defaults.
func (b *Child) Register(fs *flag.FlagSet) {
	fs.StringVar(&b.Mode, "mode", ModeDirect, "direct (one transactional producer per lease, delivery reports awaited), bare (the yardstick) or handover (new producer, InitTransactions, one-record transaction, in a loop)")
	fs.IntVar(&b.Producers, "producers", 16, "producers (direct: one per lease; handover: loops at once)")
	fs.IntVar(&b.BatchSize, "batch-size", 100, "records per transaction")
	fs.IntVar(&b.RecordSize, "record-size", 1024, "bytes per record")
	fs.DurationVar(&b.Duration, "duration", 10*time.Second, "how long the loop runs")
	fs.BoolVar(&b.Plain, "plain", false, "records without the five fencegate headers the gateway stamps")
	fs.Float64Var(&b.Rate, "rate", 0, "direct: batches/s per producer (0: open loop)")
}

// Args are b as the flags Register defines.
func (b Child) Args() []string {
	return []string{"--mode", b.Mode, "--producers", strconv.Itoa(b.Producers), "--batch-size", strconv.Itoa(b.BatchSize),
		"--record-size", strconv.Itoa(b.RecordSize), "--duration", b.Duration.String(),
		"--plain=" + strconv.FormatBool(b.Plain), "--rate", strconv.FormatFloat(b.Rate, 'g', -1, 64)}
}

// Run runs the baseline in this process, on conn's cluster.
func (b Child) Run(ctx context.Context, conn kafkaconn.Config) (Output, error) {
	var out Output
	switch b.Mode {
	case ModeDirect:
		f, err := RunDirect(ctx, conn, b)
		out.Direct = &f
		return out, err
	case ModeBare:
		f, err := RunBare(ctx, conn, b)
		out.Bare = &f
		return out, err
	case ModeHandover:
		f, err := RunBareHandovers(ctx, conn, b)
		out.Handover = &f
		return out, err
	}
	return out, errors.New("--mode: direct, bare or handover")
}
