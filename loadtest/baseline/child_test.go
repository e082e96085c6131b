package baseline

import (
	"flag"
	"io"
	"testing"
	"time"
)

// TestBaselineChildFlagsRoundTrip: what the harness passes to the
// baseline child (Args) is what the child parses (Register), for either
// mode and form (stamped or plain): both ends share one definition of
// the flags.
func TestBaselineChildFlagsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, want := range []Child{
		{Mode: ModeDirect, Producers: 7, BatchSize: 3, RecordSize: 0, Duration: 1500 * time.Millisecond, Rate: 2.5},
		{Mode: ModeDirect, Producers: 7, BatchSize: 3, RecordSize: 10, Duration: time.Second, Plain: true},
		{Mode: ModeBare, Producers: 2, BatchSize: 250, RecordSize: 4096, Duration: time.Minute},
		{Mode: ModeBare, Producers: 2, BatchSize: 250, RecordSize: 4096, Duration: time.Minute, Plain: true},
	} {
		fs := flag.NewFlagSet("loadtest-baseline", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var got Child
		got.Register(fs)
		if err := fs.Parse(want.Args()); err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		if got != want {
			t.Errorf("passed %+v, the child parsed %+v", want, got)
		}
	}
}
