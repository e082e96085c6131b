package loadtest_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestBatchEveryPacesEachWorker: a worker paced at one batch every D
// sends about duration/D batches (its first right after its acquire), not
// as many as it can; the report echoes the pacing.
func TestBatchEveryPacesEachWorker(t *testing.T) {
	const leases, every, duration = 4, 400 * time.Millisecond, 4 * time.Second
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = leases, 1, 10, 64
	sc.Duration, sc.TTL, sc.BatchEvery = duration, 3*time.Second, every
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	rep := runEmbedded(t, sc)
	perLease := float64(rep.Gateway.Batches) / leases
	want := float64(duration / every)
	t.Logf("%.1f batches per lease in %s at one every %s (want about %.0f)", perLease, duration, every, want)
	if perLease < want-2 || perLease > want+1 {
		t.Fatalf("%.1f batches per lease, want about %.0f (duration / batch_every)", perLease, want)
	}
	if rep.Scenario.BatchEveryS != every.Seconds() || rep.Scenario.Rate != 1/every.Seconds() {
		t.Fatalf("report echoes batch_every %.2fs rate %.2f, want %.2fs and %.2f", rep.Scenario.BatchEveryS, rep.Scenario.Rate, every.Seconds(), 1/every.Seconds())
	}
	if c := rep.ColdStart; c.FirstBatchSeconds < 0 || c.HandoversToFirstBatch < leases {
		t.Fatalf("cold start %+v: want the time until every lease wrote and its handovers", c)
	}
}

// runEmbedded runs sc on a fresh in-process stack; the run must pass.
func runEmbedded(t *testing.T, sc loadtest.Scenario) *report.Report {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartEmbedded(ctx, pgtest.ServerURL(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if !rep.Pass {
		t.Fatal("invariants failed")
	}
	return rep
}

// TestBatchEveryIsTheRateAsAnInterval: batch_every sets the rate every
// paced loop reads; a rate that disagrees with it is refused, and so is a
// negative interval.
func TestBatchEveryIsTheRateAsAnInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rate    float64
		every   time.Duration
		wantErr bool
		want    float64
	}{
		{"every alone", 0, 2 * time.Second, false, 0.5},
		{"rate alone", 3, 0, false, 3},
		{"both agree", 0.5, 2 * time.Second, false, 0.5},
		{"both disagree", 3, 2 * time.Second, true, 0},
		{"negative", 0, -time.Second, true, 0},
	} {
		s := loadtest.Defaults()
		s.Rate, s.BatchEvery = tc.rate, tc.every
		err := s.Validate()
		if (err != nil) != tc.wantErr || err == nil && s.Rate != tc.want {
			t.Errorf("%s: rate %.2f, err %v; want rate %.2f, error %v", tc.name, s.Rate, err, tc.want, tc.wantErr)
		}
	}
}
