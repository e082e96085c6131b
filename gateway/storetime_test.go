package gateway_test

import (
	"net/http"
	"testing"
	"time"
)

// histogramSum is the sum of the samples of histogram name whose labels
// include want.
func (s scrape) histogramSum(name string, want map[string]string) float64 {
	var sum float64
	for _, m := range s[name].GetMetric() {
		if hasLabels(m, want) && m.Histogram != nil {
			sum += m.Histogram.GetSampleSum()
		}
	}
	return sum
}

// TestStoreDurationShowsTimeInPostgres: a renewal held up by a locked
// lease row is recorded in fencegate_store_duration_seconds{op="renew"}
// for at least as long as the row was seen locked under it, and the
// request's own duration covers the store's; batches meanwhile record
// nothing there (the data plane never calls the store).
func TestStoreDurationShowsTimeInPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mod, serve := withMetrics(t)
	r := b.newReplica(mod)
	serve(r)
	token := r.mustAcquire(t, "shard:21", "w1", 30*time.Second)
	before := scrapeMetrics(t, r.metricsURL)

	lock, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(b.ctx) })
	if _, err := lock.Exec(b.ctx, `SELECT 1 FROM leases WHERE name = 'shard:21' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	renewed := make(chan reply, 1)
	go func() {
		renewed <- r.do(t, "PATCH", "/v1/leases/shard:21", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000})
	}()
	waitForRowLockWaiters(t, b, lock, 1)
	seen := time.Now()
	log := &ackLog{}
	for i := range 3 {
		b.mustProduce(t, r, log, "shard:21", "w1", token, "held-"+string(rune('a'+i)), 5)
	}
	lockedFor := time.Since(seen)
	if err := lock.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if rep := <-renewed; rep.status != http.StatusOK {
		t.Fatalf("renewal: %d %s", rep.status, rep.raw)
	}
	after := scrapeMetrics(t, r.metricsURL)

	renew := map[string]string{"op": "renew"}
	if n := delta(t, before, after, "fencegate_store_duration_seconds", renew); n != 1 {
		t.Fatalf("store renew samples changed by %v, want 1", n)
	}
	inStore := after.histogramSum("fencegate_store_duration_seconds", renew) - before.histogramSum("fencegate_store_duration_seconds", renew)
	if inStore < lockedFor.Seconds() {
		t.Errorf("the renewal's store time %.3f s is shorter than the %.3f s the row was seen locked under it", inStore, lockedFor.Seconds())
	}
	patch := map[string]string{"http_request_method": "PATCH"}
	inRequest := after.histogramSum("http_server_request_duration_seconds", patch) - before.histogramSum("http_server_request_duration_seconds", patch)
	if inRequest < inStore {
		t.Errorf("the renewal request took %.3f s, less than its store call %.3f s", inRequest, inStore)
	}
	for _, op := range []string{"acquire", "activate", "release"} {
		if n := delta(t, before, after, "fencegate_store_duration_seconds", map[string]string{"op": op}); n != 0 {
			t.Errorf("store %s samples changed by %v during batches and a renewal, want 0", op, n)
		}
	}
}
