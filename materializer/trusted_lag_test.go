package materializer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/materializer"
)

// TestTrustedLagCountsWaitingRecords: the trusted sink has a lag of its
// own, in /v1/status and fencegate_materializer_lag{fencegate_sink="kafka"}:
// above 0 while the broker refuses its commits (records wait), 0 once it
// has caught up. It had none: a stuck sink showed only in its consumer
// group, and no alert saw it.
func TestTrustedLagCountsWaitingRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.trustedWorkload()
	var refuse atomic.Bool
	refuse.Store(true)
	fake := b.kafka.Fake(t)
	fake.ControlKey(kmsg.TxnOffsetCommit.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		r := req.(*kmsg.TxnOffsetCommitRequest)
		if r.Group != "fencegate-lagging" || !refuse.Load() {
			return nil, nil, false
		}
		return refusedOffsetCommit(r), nil, true
	})
	mp, h, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Materializer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	ts := b.newTrusted("lagging", nil, func(c *materializer.Config) { c.MeterProvider = mp })
	done, stop := runSink(b, ts)
	key := fmt.Sprintf("%s/1", b.topic)
	waitFor(t, "a lag above 0 while commits are refused", done, func() bool { return ts.Lag()[key] > 0 })
	if got := trustedLagMetric(t, h, b.topic, "1"); got <= 0 {
		t.Fatalf("fencegate_materializer_lag{fencegate_sink=kafka} = %v while records wait, Lag() %v", got, ts.Lag())
	}
	refuse.Store(false)
	b.waitCommitted(ts.GroupID(), 1, last, done)
	waitFor(t, "lag 0 once caught up", done, func() bool { v, ok := ts.Lag()[key]; return ok && v == 0 })
	if got := trustedLagMetric(t, h, b.topic, "1"); got != 0 {
		t.Fatalf("fencegate_materializer_lag{fencegate_sink=kafka} = %v after catching up", got)
	}
	stop()
	// A new instance counts from the group's offset, not from the
	// partition's start: three records written since, commits refused.
	committed := b.committed(ts.GroupID(), 1)
	high := b.write(1, data("shard:1", 4, "lag1", 0), data("shard:1", 4, "lag2", 0), data("shard:1", 4, "lag3", 0)) + 1
	refuse.Store(true)
	next := b.newTrusted("lagging", nil, nil)
	done, _ = runSink(b, next)
	waitFor(t, "a lag above 0 at the new instance", done, func() bool { return next.Lag()[key] > 0 })
	if got, want := next.Lag()[key], high-committed; got != want {
		t.Fatalf("new instance's lag %d, want %d (high watermark %d minus the group's offset %d)", got, want, high, committed)
	}
}

// runSink runs ts until stop (or the test's end); stop returns once Run
// has.
func runSink(b *testBundle, ts *materializer.TrustedSink) (done chan error, stop func()) {
	ctx, cancel := context.WithCancel(b.ctx)
	done = make(chan error, 1)
	go func() { done <- ts.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	b.t.Cleanup(stop)
	return done, stop
}

// refusedOffsetCommit answers r with ILLEGAL_GENERATION for every
// partition: the sink aborts and reads the chunk again (FM58).
func refusedOffsetCommit(r *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, kerr.IllegalGeneration.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// waitFor waits as waitUntil does; it fails the test if the sink whose
// Run result is done stops first.
func waitFor(t *testing.T, what string, done chan error, cond func() bool) {
	t.Helper()
	waitUntil(t, what, func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the sink stopped before %s: %v", what, err)
		default:
		}
		return cond()
	})
}

// trustedLagMetric scrapes h for the trusted sink's lag of topic and
// partition (-1: no such series).
func trustedLagMetric(t *testing.T, h http.Handler, topic, partition string) float64 {
	t.Helper()
	return metricValue(t, h, "fencegate_materializer_lag", map[string]string{"fencegate_sink": "kafka",
		"messaging_destination_name": topic, "messaging_destination_partition_id": partition})
}

// metricValue scrapes h for the value of the first series of family name
// whose labels include want (-1: none).
func metricValue(t *testing.T, h http.Handler, name string, want map[string]string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams[name].GetMetric() {
		n := 0
		for _, p := range m.GetLabel() {
			if v, ok := want[p.GetName()]; ok && v == p.GetValue() {
				n++
			}
		}
		if n == len(want) {
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
