package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/leasestore"
)

// rawRequest sends one request line of any method (net/http's client
// refuses some) to addr on conn and reads the status line of the answer.
func rawRequest(t testing.TB, conn net.Conn, rd *bufio.Reader, method, path string) int {
	t.Helper()
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n", method, path); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("%.40s %s: %v", method, path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// httpSeries lists the label sets of http_server_request_duration_seconds.
func httpSeries(s scrape) []map[string]string {
	var out []map[string]string
	for _, m := range s["http_server_request_duration_seconds"].GetMetric() {
		ls := map[string]string{}
		for _, l := range m.GetLabel() {
			ls[l.GetName()] = l.GetValue()
		}
		out = append(out, ls)
	}
	return out
}

// TestFM41_InventedMethodsAndPathsAreNotLabels: 2,000 unauthenticated
// requests with invented methods and paths leave the request-duration
// histogram with a handful of series, every method label one of the
// standard methods or _OTHER and no route label a client chose; a real
// 404 afterwards is counted under its own labels, not in the overflow
// series (the review's FencegateServerErrors went blind).
func TestFM41_InventedMethodsAndPathsAreNotLabels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mod, serve := withMetrics(t)
	r := b.newReplica(mod)
	serve(r)
	conn, err := net.Dial("tcp", r.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	for i := range 2000 {
		rawRequest(t, conn, rd, fmt.Sprintf("INVENTED%d", i), fmt.Sprintf("/v1/leases/x%d", i))
		if i%2 == 0 {
			rawRequest(t, conn, rd, "GET", fmt.Sprintf("/attacker-chosen-%d", i))
		}
	}
	if st := rawRequest(t, conn, rd, "GET", "/no-such-route"); st != http.StatusNotFound {
		t.Fatalf("GET /no-such-route: %d", st)
	}
	series := httpSeries(scrapeMetrics(t, r.metricsURL))
	t.Logf("http_server_request_duration_seconds: %d series after 2,000 invented methods and 1,000 invented paths", len(series))
	if len(series) > 20 {
		t.Errorf("%d series, want a handful (one per route, standard method and status)", len(series))
	}
	known := map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true,
		"OPTIONS": true, "CONNECT": true, "TRACE": true, "_OTHER": true}
	found404 := false
	for _, ls := range series {
		if ls["otel_metric_overflow"] != "" {
			t.Errorf("an overflow series: %v", ls)
		}
		if !known[ls["http_request_method"]] {
			t.Errorf("method label %.40q is not a standard method nor _OTHER", ls["http_request_method"])
		}
		if strings.Contains(ls["http_route"], "attacker") || strings.Contains(ls["http_route"], "x1") {
			t.Errorf("route label %.60q is the client's path", ls["http_route"])
		}
		if ls["http_request_method"] == "GET" && ls["http_response_status_code"] == "404" {
			found404 = true
		}
	}
	if !found404 {
		t.Error("the real 404 is not counted under GET 404")
	}
}

// TestFM41_MetricsScrapesCapped: /metrics serves two scrapes at once;
// a third is answered 429 with Retry-After at once, and once one ends the
// next is served.
func TestFM41_MetricsScrapesCapped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	srv := gateway.NewServer(r.g, nil)
	srv.Metrics(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "# scrape\n")
	}))
	hs := httptest.NewServer(srv)
	defer hs.Close()
	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Get(hs.URL + "/metrics")
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range 2 {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("two scrapes did not both start")
		}
	}
	// Bounded: without a cap the third scrape waits with the others.
	third := &http.Client{Timeout: 5 * time.Second}
	resp, err := third.Get(hs.URL + "/metrics")
	if err != nil {
		close(release)
		t.Fatalf("a third scrape at once: %v, want 429", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		close(release)
		t.Fatalf("a third scrape at once: %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(release)
	for range 2 {
		if st := <-done; st != http.StatusOK {
			t.Errorf("a held scrape: %d", st)
		}
	}
	resp, err = http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a scrape after the others ended: %d", resp.StatusCode)
	}
}

// TestFM41_LongMethodsKeepMetricsSmall: 100 methods of 60 KB leave
// /metrics small and its scrape cheap (the review: 98 MB, 450 ms).
func TestFM41_LongMethodsKeepMetricsSmall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mp, h, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Gateway})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	r := b.newReplica(func(c *gateway.Config) { c.MeterProvider = mp })
	conn, err := net.Dial("tcp", r.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	for i := range 100 {
		m := fmt.Sprintf("M%d", i) + strings.Repeat("X", 60<<10)
		rawRequest(t, conn, rd, m, "/v1/leases")
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	took := time.Since(start)
	t.Logf("/metrics after 100 methods of 60 KB: %d bytes, scrape %v", rec.Body.Len(), took)
	if rec.Body.Len() > 1<<20 {
		t.Errorf("/metrics is %d bytes, want well under 1 MiB", rec.Body.Len())
	}
}

// countingStore is the real lease store with its Ping counted: the
// Postgres query each readiness check costs.
type countingStore struct {
	*leasestore.Store
	pings atomic.Int64
}

func (s *countingStore) Ping(ctx context.Context) error {
	s.pings.Add(1)
	return s.Store.Ping(ctx)
}

// TestFM43_ReadyzFloodCostsOneCheckPerInterval: 1,000 /readyz calls from
// 64 connections cost at most one Postgres query and one metadata request
// per second (the review: one of each per call, 8,244 a second), and
// another client's renewals go on meanwhile.
func TestFM43_ReadyzFloodCostsOneCheckPerInterval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var metadata atomic.Int64
	fake := b.kafka.Fake(t)
	fake.ControlKey(kmsg.Metadata.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		metadata.Add(1)
		return nil, nil, false
	})
	store := &countingStore{Store: b.store}
	g, err := gateway.New(store, b.router, gateway.Config{Replica: "readyz", Kafka: gateway.KafkaConfig{Config: b.kafka.Conn},
		BarrierKey: barrierKey, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gateway.NewServer(g, b.auth))
	t.Cleanup(func() { srv.Close(); g.Close() })
	r := &replica{g: g, srv: srv, name: "readyz"}
	if rep := r.do(t, "GET", "/readyz", nil); rep.status != http.StatusOK {
		t.Fatalf("readyz: %d %s", rep.status, rep.raw)
	}
	token := r.mustAcquire(t, "shard:43", "w1", time.Minute)
	renewals := func(n int) time.Duration {
		var took []time.Duration
		for range n {
			start := time.Now()
			rep := r.do(t, "PATCH", "/v1/leases/shard:43", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 60000})
			if rep.status != http.StatusOK {
				t.Fatalf("renew: %d %s", rep.status, rep.raw)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return took[len(took)*99/100]
	}
	quiet := renewals(200)

	pings0, meta0 := store.pings.Load(), metadata.Load()
	stop := make(chan struct{})
	var calls atomic.Int64
	var flood sync.WaitGroup
	start := time.Now()
	for range 64 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get(srv.URL + "/readyz")
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if calls.Add(1) == 1000 {
					close(stop)
				}
			}
		}()
	}
	flood.Wait()
	took := time.Since(start)
	pings, meta := store.pings.Load()-pings0, metadata.Load()-meta0
	t.Logf("%d /readyz calls in %v: %d Postgres pings, %d metadata requests", calls.Load(), took.Round(time.Millisecond), pings, meta)
	if bound := int64(took/time.Second) + 2; pings > bound || meta > bound {
		t.Errorf("%d pings and %d metadata requests for %d calls in %v, want at most %d each (one a second)", pings, meta, calls.Load(), took, bound)
	}

	// Another client's renewals under a flood that does not stop, of
	// /readyz and, for comparison, of /healthz (no dependency at all).
	underFlood := func(path string) time.Duration {
		stop := make(chan struct{})
		for range 64 {
			flood.Add(1)
			go func() {
				defer flood.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if resp, err := http.Get(srv.URL + path); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}()
		}
		defer flood.Wait()
		defer close(stop)
		return renewals(200)
	}
	flooded, healthz := underFlood("/readyz"), underFlood("/healthz")
	t.Logf("renewal p99 %v quiet, %v under a /readyz flood (x%.1f), %v under a /healthz flood (x%.1f)",
		quiet, flooded, float64(flooded)/float64(quiet), healthz, float64(healthz)/float64(quiet))
}

// TestFM41_NoLeaseDataOnMetricsByDefault: /metrics needs no credentials,
// so by default it names no lease and no token (the review read
// fencegate_lease_token{fencegate_lease="b:secret-customer-42"} there).
// With LeaseMetrics on, the per-lease gauges come back, at most
// LeaseMetricsLimit leases of them, and the others are counted.
func TestFM41_NoLeaseDataOnMetricsByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mod, serve := withMetrics(t)
	off := b.newReplica(mod)
	serve(off)
	off.mustAcquire(t, "shard:secret-customer-42", "w1", time.Minute)
	resp, err := http.Get(off.metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(raw), "secret-customer-42") || strings.Contains(string(raw), "fencegate_lease=") {
		t.Errorf("/metrics names a lease by default:\n%s", grepLines(string(raw), "secret-customer-42"))
	}

	mod, serve = withMetrics(t)
	on := b.newReplica(func(c *gateway.Config) { mod(c); c.LeaseMetrics, c.LeaseMetricsLimit = true, 2 })
	serve(on)
	for _, n := range []string{"shard:60", "shard:61", "shard:62"} {
		on.mustAcquire(t, n, "w1", time.Minute)
	}
	s := scrapeMetrics(t, on.metricsURL)
	if n := len(s["fencegate_lease_token"].GetMetric()); n != 2 {
		t.Errorf("%d fencegate_lease_token series with a limit of 2", n)
	}
	if n := len(s["fencegate_lease_producer_epoch"].GetMetric()); n != 2 {
		t.Errorf("%d fencegate_lease_producer_epoch series with a limit of 2", n)
	}
	if v, _ := s.value("fencegate_lease_series_omitted", nil); v != 1 {
		t.Errorf("fencegate_lease_series_omitted %v, want 1", v)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
