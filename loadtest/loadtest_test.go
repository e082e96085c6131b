package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestEmbeddedFreezeAndChurnKeepInvariants is the harness's proof in CI: a
// short embedded run with freeze and churn injection must keep I1..I4 and
// the ledger, accept no stale record through the gateway, while the naive
// baseline under the same freeze injection lets at least one through (so
// the harness demonstrably detects the incident).
//
// On an external cluster (FENCEGATE_TEST_KAFKA_BROKERS) the gateway and
// the materializer run in this process against it, on a topic of the
// test's own, with the same freezes and forced handovers; the ambiguity
// fault (an EndTxn held at kfake) and the baselines (topics of their own)
// are off, and the invariants and the gateway's figures are checked.
func TestEmbeddedFreezeAndChurnKeepInvariants(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease = 6, 2
	sc.BatchSize, sc.RecordSize = 20, 256
	sc.Duration, sc.TTL = 20*time.Second, 1500*time.Millisecond
	sc.FreezeEvery, sc.ChurnEvery = 3*time.Second, 3*time.Second
	sc.AmbiguityEvery = 7 * time.Second
	external := kafkatest.External()
	var stk *stack.Stack
	var err error
	if external {
		k := kafkatest.Start(t, stack.LeaseTopic, stack.Partitions)
		stk, err = stack.StartEmbeddedOn(ctx, pgtest.ServerURL(),
			stack.ExternalKafka{Conn: k.Conn, LeaseTopic: k.Topic, Prefix: k.RouterPrefix("loadtest")}, log)
		sc.AmbiguityEvery, sc.Direct, sc.Naive = 0, false, false
	} else {
		stk, err = stack.StartEmbedded(ctx, pgtest.ServerURL(), log)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	var progress bytes.Buffer
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Progress: &progress, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if !rep.Pass {
		t.Fatalf("run failed its invariants")
	}
	g := rep.Gateway
	switch {
	case g.Batches == 0 || g.Handovers < int64(sc.Leases):
		t.Fatalf("too little load to prove anything: %+v", g)
	case g.StaleAttempts == 0 || g.StaleRefused == 0:
		t.Fatalf("no frozen worker wrote after a takeover: %+v", g)
	case g.StaleAccepted != 0:
		t.Fatalf("the gateway accepted %d stale writes", g.StaleAccepted)
	case int64(rep.History.Committed) < g.Batches:
		t.Fatalf("the history checker judged %d committed answers of %d batches: %+v", rep.History.Committed, g.Batches, rep.History)
	case external:
		t.Logf("external cluster: baselines and the ambiguity fault off (kfake only)")
	case rep.Naive.StaleAccepted < 1:
		t.Fatalf("the naive baseline let no stale record through (%+v): the harness would miss the incident", rep.Naive)
	case rep.Throughput.DirectRecordsPerS <= 0 || rep.Throughput.RatioGatewayDirect <= 0:
		t.Fatalf("direct baseline missing: %+v", rep.Throughput)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"invariants.I1.pass", "invariants.I4.violations", "gateway.stale_accepted", "naive.stale_accepted",
		"throughput.gateway_records_per_s", "throughput.direct_records_per_s", "throughput.ratio_gateway_direct",
		"latency_ms.produce.p50", "latency_ms.produce.p99", "latency_ms.handover.p50", "latency_ms.handover.p99"} {
		if !has(doc, path) {
			t.Errorf("report JSON lacks %s", path)
		}
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "<svg") || !strings.Contains(page.String(), "polyline") {
		t.Fatal("HTML report has no chart")
	}
	if !strings.Contains(progress.String(), "rec/s") {
		t.Fatal("no progress line was printed")
	}
}

func has(doc map[string]any, path string) bool {
	var cur any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[k]; !ok {
			return false
		}
	}
	return true
}
