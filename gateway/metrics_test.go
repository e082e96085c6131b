package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/syncbuf"
	"github.com/fencegate/fencegate/internal/telemetry"
)

// scrape is one parsed /metrics answer.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t testing.TB, url string) scrape {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, raw)
	}
	return fams
}

// value sums the samples of a family whose labels include want; a
// histogram contributes its count. ok is false when none matched.
func (s scrape) value(name string, want map[string]string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, ok
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func delta(t testing.TB, before, after scrape, name string, labels map[string]string) float64 {
	t.Helper()
	b, _ := before.value(name, labels)
	a, _ := after.value(name, labels)
	return a - b
}

func withMetrics(t testing.TB) (func(*gateway.Config), func(*replica)) {
	mp, h, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Gateway})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return func(c *gateway.Config) { c.MeterProvider = mp },
		func(r *replica) {
			srv := gateway.NewServer(r.g, nil)
			srv.Metrics(h)
			hs := httptest.NewServer(srv)
			t.Cleanup(hs.Close)
			r.metricsURL = hs.URL
		}
}

// TestMetricsAroundTakeover: a scripted takeover moves exactly the
// expected counters: one epoch bump on the new holder, one fenced producer
// on the old one, one refused stale write, and the per-lease epoch gauge
// follows the session.
func TestMetricsAroundTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	modA, serveA := withMetrics(t)
	modB, serveB := withMetrics(t)
	// The per-lease gauges are opt-in (FM41).
	a := b.newReplica(func(c *gateway.Config) { modA(c); c.LeaseMetrics = true })
	bb := b.newReplica(func(c *gateway.Config) { modB(c); c.LeaseMetrics = true })
	serveA(a)
	serveB(bb)
	old := a.mustAcquire(t, "shard:5", "w-old", 2*time.Second)
	a.clock.freeze()
	beforeA, beforeB := scrapeMetrics(t, a.metricsURL), scrapeMetrics(t, bb.metricsURL)
	if v, ok := beforeA.value("fencegate_lease_producer_epoch", map[string]string{"fencegate_lease": "shard:5"}); !ok || v != 0 {
		t.Fatalf("A's epoch gauge before the takeover: %v %v", v, ok)
	}

	b.waitExpired(t, "shard:5")
	rep := bb.acquire(t, "shard:5", "w-new", 30*time.Second)
	if rep.status != http.StatusCreated {
		t.Fatalf("takeover: %d %s", rep.status, rep.raw)
	}
	// fenced, or generation_ended caused by the fence when the fence is
	// seen while aborting (the answer rule of settle): a fenced batch in
	// the metrics either way.
	if r := a.produce(t, "shard:5", "w-old", old, "late", 2); r.code() != "fenced" &&
		(r.code() != "generation_ended" || r.body["cause"] != "fenced") {
		t.Fatalf("old holder: %d %s", r.status, r.raw)
	}
	if r := bb.produce(t, "shard:5", "w-old", old, "stale", 3); r.code() != "lease_lost" {
		t.Fatalf("stale token on the new holder: %d %s", r.status, r.raw)
	}
	b.mustProduce(t, bb, &ackLog{}, "shard:5", "w-new", rep.int("token"), "ok", 4)
	afterA, afterB := scrapeMetrics(t, a.metricsURL), scrapeMetrics(t, bb.metricsURL)

	checks := []struct {
		what   string
		got    float64
		expect float64
	}{
		{"B epoch bumps", delta(t, beforeB, afterB, "fencegate_epoch_bumps_total", nil), 1},
		{"A epoch bumps", delta(t, beforeA, afterA, "fencegate_epoch_bumps_total", nil), 0},
		{"A fenced producers", delta(t, beforeA, afterA, "fencegate_producers_fenced_total", nil), 1},
		{"A fenced batches", delta(t, beforeA, afterA, "fencegate_batches_total", map[string]string{"outcome": "fenced"}), 1},
		{"B stale writes refused", delta(t, beforeB, afterB, "fencegate_batches_total", map[string]string{"outcome": "stale_token"}), 1},
		{"B stale records refused", delta(t, beforeB, afterB, "fencegate_records_total", map[string]string{"outcome": "stale_token"}), 3},
		{"B committed records", delta(t, beforeB, afterB, "fencegate_records_total", map[string]string{"outcome": "committed"}), 4},
		{"B init stage samples", delta(t, beforeB, afterB, "fencegate_handover_duration_seconds", map[string]string{"stage": "init_transactions"}), 1},
		{"B total handovers", delta(t, beforeB, afterB, "fencegate_handover_duration_seconds", map[string]string{"stage": "total"}), 1},
	}
	for _, c := range checks {
		if c.got != c.expect {
			t.Errorf("%s changed by %v, want %v", c.what, c.got, c.expect)
		}
	}
	epoch, ok := afterB.value("fencegate_lease_producer_epoch", map[string]string{"fencegate_lease": "shard:5"})
	if !ok || int64(epoch) != rep.int("producer_epoch") || epoch != 1 {
		t.Errorf("B's epoch gauge %v (present %v), want %d", epoch, ok, rep.int("producer_epoch"))
	}
	token, _ := afterB.value("fencegate_lease_token", map[string]string{"fencegate_lease": "shard:5"})
	if int64(token) != rep.int("token") {
		t.Errorf("B's token gauge %v, want %d", token, rep.int("token"))
	}
	if _, ok := afterA.value("fencegate_lease_producer_epoch", map[string]string{"fencegate_lease": "shard:5"}); ok {
		t.Error("A still reports an epoch for the lease it lost")
	}
}

// TestAcquireSpanHasStageChildren: an acquire is one span with a child per
// handover stage, carrying lease, token and epoch.
func TestAcquireSpanHasStageChildren(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	r := b.newReplica(func(c *gateway.Config) { c.TracerProvider = tp })
	token := r.mustAcquire(t, "shard:6", "w1", 30*time.Second)
	var root sdktrace.ReadOnlySpan
	children := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.Name() == "fencegate.acquire" {
			root = s
		}
	}
	if root == nil {
		t.Fatal("no fencegate.acquire span")
	}
	attrs := map[string]int64{}
	for _, kv := range root.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInt64()
	}
	if attrs["fencegate.token"] != token {
		t.Errorf("acquire span token %d, want %d", attrs["fencegate.token"], token)
	}
	if _, ok := attrs["messaging.kafka.producer.epoch"]; !ok {
		t.Error("acquire span lacks the producer epoch")
	}
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == root.SpanContext().SpanID() {
			children[s.Name()] = true
		}
	}
	for _, stage := range []string{"pg_grant", "connect", "init_transactions", "identify", "barrier", "activate"} {
		if !children[stage] {
			t.Errorf("acquire span lacks child %q (children: %v)", stage, children)
		}
	}
}

// TestMetricsPresentAtStart: before any request, /metrics already has
// every series the alerts and the dashboard read, at 0 (an increase() over
// a series born at 1 is 0, and the first stale write would page nobody),
// the runtime and process collectors, the service's identity and the build
// info. Then a produce sent to a replica that does not hold the lease is
// counted as misrouted, not as a stale write, and is not logged as one.
func TestMetricsPresentAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	modA, serveA := withMetrics(t)
	modO, serveO := withMetrics(t)
	var logs syncbuf.Buffer
	a := b.newReplica(modA)
	other := b.newReplica(func(c *gateway.Config) {
		modO(c)
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	serveA(a)
	serveO(other)

	start := scrapeMetrics(t, other.metricsURL)
	type series struct {
		name   string
		labels map[string]string
	}
	zero := []series{
		{"fencegate_epoch_bumps_total", nil},
		{"fencegate_producers_fenced_total", nil},
		{"fencegate_producers_fatal_total", nil},
	}
	for _, o := range []string{"committed", "stale_token", "fenced", "expired", "misrouted", "aborted", "invalid"} {
		zero = append(zero, series{"fencegate_batches_total", map[string]string{"outcome": o}},
			series{"fencegate_records_total", map[string]string{"outcome": o}})
	}
	for _, o := range []string{"ok", "lost", "unavailable"} {
		zero = append(zero, series{"fencegate_renewals_total", map[string]string{"outcome": o}})
	}
	for _, z := range zero {
		if v, ok := start.value(z.name, z.labels); !ok || v != 0 {
			t.Errorf("at start %s%v = %v (present %v), want present at 0", z.name, z.labels, v, ok)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if _, ok := start.value(name, nil); !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if _, ok := start.value("target_info", map[string]string{"service_name": "fencegate-gateway"}); !ok {
		t.Errorf("target_info lacks service_name=fencegate-gateway: %v", start["target_info"])
	}
	if v, ok := start.value("fencegate_build_info", nil); !ok || v != 1 {
		t.Errorf("fencegate_build_info = %v (present %v), want 1", v, ok)
	} else if m := start["fencegate_build_info"].GetMetric()[0]; !hasNonEmpty(m, "version", "commit", "librdkafka_version") {
		t.Errorf("fencegate_build_info labels: %v", m.GetLabel())
	}

	token := a.mustAcquire(t, "shard:31", "w1", 30*time.Second)
	if rep := other.produce(t, "shard:31", "w1", token, "b1", 2); rep.code() != "misdirected" {
		t.Fatalf("produce at the replica without the session: %d %s", rep.status, rep.raw)
	}
	after := scrapeMetrics(t, other.metricsURL)
	if d := delta(t, start, after, "fencegate_batches_total", map[string]string{"outcome": "misrouted"}); d != 1 {
		t.Errorf("misrouted batches changed by %v, want 1", d)
	}
	if d := delta(t, start, after, "fencegate_batches_total", map[string]string{"outcome": "stale_token"}); d != 0 {
		t.Errorf("a misrouted batch counted as stale_token (%v)", d)
	}
	if l := logs.String(); strings.Contains(l, "stale write refused") || !strings.Contains(l, "write misrouted") {
		t.Errorf("a misrouted batch must be logged as misrouted, not as a stale write:\n%s", l)
	}
}

func hasNonEmpty(m *dto.Metric, names ...string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if slices.Contains(names, l.GetName()) && l.GetValue() != "" {
			n++
		}
	}
	return n == len(names)
}
