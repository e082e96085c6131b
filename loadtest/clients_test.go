package loadtest_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestWorkersSpreadOverClients: with --clients N the workers really are N
// API clients to the gateway. The gateway counts requests in flight by the
// client its authenticator found for the bearer token; with that cap at 1
// and one worker per client (a worker has one request in flight at a
// time), no request can be refused by it, so the run sees no 429 at all.
// The same run with one client (what an ignored option gives) must see
// 429s: eight workers starting at once behind one token meet the cap.
func TestWorkersSpreadOverClients(t *testing.T) {
	const workers = 8
	spread := runCapped(t, workers)
	t.Log("\n" + spread.Markdown())
	if spread.Scenario.Clients != workers || spread.Scenario.MaxInFlightPerClient != 1 {
		t.Fatalf("report echoes %d clients, per-client cap %d; want %d, 1", spread.Scenario.Clients, spread.Scenario.MaxInFlightPerClient, workers)
	}
	if !spread.Pass || spread.ColdStart.Seconds < 0 || spread.Gateway.Batches == 0 {
		t.Fatalf("the run with %d clients failed or granted not every lease: pass %v, cold start %+v, gateway %+v",
			workers, spread.Pass, spread.ColdStart, spread.Gateway)
	}
	if n := refusals(spread); n != 0 || spread.Gateway.Errors != 0 {
		t.Fatalf("with a client per worker, %d requests were answered 429 and %d worker errors (%v): workers share a client",
			n, spread.Gateway.Errors, spread.Gateway.ErrorsByCall)
	}
	one := runCapped(t, 1)
	if one.Scenario.Clients != 1 {
		t.Fatalf("report echoes %d clients, want 1", one.Scenario.Clients)
	}
	if refusals(one) == 0 {
		t.Fatalf("%d workers behind one client met no per-client cap of 1 (%+v): the test could not tell one client from many",
			workers, one.Gateway)
	}
	t.Logf("one client: %d requests answered 429; %d clients: none", refusals(one), workers)
}

// runCapped runs 8 leases x 1 worker over clients API clients against an
// in-process gateway that serves one request per client at a time.
func runCapped(t *testing.T, clients int) *report.Report {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartEmbedded(ctx, pgtest.ServerURL(), log, stack.WithClients(clients),
		stack.WithLimits(gateway.ServerConfig{MaxInFlight: 1 << 16, MaxInFlightPerClient: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 8, 1, 5, 64
	sc.Duration, sc.TTL, sc.Rate = 3*time.Second, 1500*time.Millisecond, 5
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 0, false, false
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// refusals counts the requests of a run answered 429 too_many_requests.
func refusals(rep *report.Report) int64 {
	n := rep.Gateway.AcquiresDeferred + rep.Gateway.AnswersByCode["too_many_requests"]
	for call, c := range rep.Gateway.ErrorsByCall {
		if strings.HasSuffix(call, " too_many_requests") && !strings.HasPrefix(call, "produce ") {
			n += c // produce answers are in AnswersByCode already
		}
	}
	return n
}
