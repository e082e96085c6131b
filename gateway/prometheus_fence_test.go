package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/promtest"
)

// TestPrometheusPagesOnFirstFence: Debian's Prometheus scrapes two
// replicas with the shipped rules; a former holder frozen past its TTL
// writes after the lease was taken over on the other replica, Kafka fences
// its producer, and FencegateProducerFenced pages for that replica on this
// first fence (the counter exists at 0, so increase() sees it), and for no
// other.
func TestPrometheusPagesOnFirstFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	modA, serveA := withMetrics(t)
	modB, serveB := withMetrics(t)
	a := b.newReplica(modA)
	bb := b.newReplica(modB)
	serveA(a)
	serveB(bb)
	hostA, hostB := strings.TrimPrefix(a.metricsURL, "http://"), strings.TrimPrefix(bb.metricsURL, "http://")
	prom := promtest.Start(t, "../deploy/prometheus/alerts.yaml", map[string][]string{"fencegate-gateway": {hostA, hostB}})
	prom.WaitFor(30*time.Second, `count(fencegate_producers_fenced_total{job="fencegate-gateway"} == 0) == 2`)

	old := a.mustAcquire(t, "shard:7", "w-old", 2*time.Second)
	a.clock.freeze() // A's worker and its session's deadline stand still
	b.waitExpired(t, "shard:7")
	if rep := bb.acquire(t, "shard:7", "w-new", 30*time.Second); rep.status != http.StatusCreated {
		t.Fatalf("takeover: %d %s", rep.status, rep.raw)
	}
	fencedAt := time.Now()
	if r := a.produce(t, "shard:7", "w-old", old, "late", 2); r.code() != "fenced" &&
		(r.code() != "generation_ended" || r.body["cause"] != "fenced") {
		t.Fatalf("old holder's write after the takeover: %d %s", r.status, r.raw)
	}
	page := prom.WaitAlert(60*time.Second, "FencegateProducerFenced", map[string]string{"instance": hostA})
	t.Logf("FencegateProducerFenced (page) firing %.1fs after the fenced write: %v", time.Since(fencedAt).Seconds(), page.Labels)
	for _, al := range prom.Alerts() {
		if al.Labels["alertname"] == "FencegateProducerFenced" && al.Labels["instance"] != hostA {
			t.Errorf("page for a replica that fenced nothing: %v", al.Labels)
		}
	}
}
