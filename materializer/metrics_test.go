package materializer_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/materializer"
)

// TestMetricsAfterFM12Sequence: /metrics reports the verdicts of the FM12
// sequence exactly, the fence per lease, and no lag once caught up.
func TestMetricsAfterFM12Sequence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mp, h, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Materializer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	last := b.write(1, bar("shard:1", 5), data("shard:1", 5, "a", 0), bar("shard:1", 6),
		data("shard:1", 6, "b", 0), data("shard:1", 5, "c", 0), data("shard:1", 6, "b", 0))
	m := b.newMaterializer(func(c *materializer.Config) { c.MeterProvider = mp; c.LeaseMetrics = true })
	defer m.Close()
	b.runUntil(m, b.db, 1, last)
	mux := m.Handler()
	mux.Handle("GET /metrics", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, m := range fams["fencegate_materializer_records_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verdict" {
				got[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"accepted": 2, "barrier": 2, "stale": 1, "duplicate": 1}
	for v, n := range want {
		if got[v] != n {
			t.Errorf("verdict %s = %v, want %v (all: %v)", v, got[v], n, got)
		}
	}
	// Present at 0, not merely absent: the page on the first refused record
	// is an increase() from 0.
	for _, v := range materializer.Verdicts {
		if _, ok := got[string(v)]; !ok {
			t.Errorf("verdict %s has no series (all: %v)", v, got)
		}
	}
	for _, v := range []string{"unfenced", "bad_barrier", "malformed"} {
		if got[v] != 0 {
			t.Errorf("verdict %s = %v, want 0", v, got[v])
		}
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "fencegate_build_info"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(string(raw), `service_name="fencegate-materializer"`) {
		t.Errorf("target_info lacks service_name=fencegate-materializer")
	}
	fence := fams["fencegate_materializer_fence_token"]
	if fence == nil || len(fence.GetMetric()) != 1 || fence.GetMetric()[0].GetGauge().GetValue() != 6 {
		t.Errorf("fence gauge: %v", fence)
	}
	for _, m := range fams["fencegate_materializer_lag"].GetMetric() {
		if m.GetGauge().GetValue() != 0 {
			t.Errorf("lag after catching up: %v", m)
		}
	}
}

// TestFM41_NoFencesOnMetricsByDefault: the materializer's /metrics needs
// no credentials, so by default it names no lease (the review read every
// lease's fence token there); with LeaseMetrics on, at most
// LeaseMetricsLimit leases, the others counted.
func TestFM41_NoFencesOnMetricsByDefault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		mod   func(*materializer.Config)
		fence int
	}{
		{"default", func(*materializer.Config) {}, 0},
		{"opt-in limit 1", func(c *materializer.Config) { c.LeaseMetrics, c.LeaseMetricsLimit = true, 1 }, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			mp, h, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Materializer})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			b.write(1, bar("shard:1", 5))
			last := b.write(1, bar("shard:secret-customer-17", 7))
			m := b.newMaterializer(func(cfg *materializer.Config) { cfg.MeterProvider = mp; c.mod(cfg) })
			defer m.Close()
			b.runUntil(m, b.db, 1, last)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			raw := rec.Body.String()
			if n := strings.Count(raw, "fencegate_materializer_fence_token{"); n != c.fence {
				t.Errorf("%d fence series, want %d", n, c.fence)
			}
			if c.fence == 0 && strings.Contains(raw, "secret-customer-17") {
				t.Errorf("/metrics names a lease by default")
			}
		})
	}
}
