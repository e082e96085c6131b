package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client/wire"
)

// benchCheckpointBody is benchBody's batch with a checkpoint of 16 bytes
// (an input position), in the binary body's version 2.
func benchCheckpointBody(owner string, token int64, batch string, value []byte) []byte {
	recs := make([]wire.Record, benchRecords)
	for i := range recs {
		recs[i] = wire.Record{Key: fmt.Appendf(nil, "k%d", i), Value: value}
	}
	return wire.Append(nil, wire.Batch{OwnerID: owner, Token: token, BatchID: batch, Records: recs,
		Checkpoint: fmt.Appendf(nil, "input=%010d", len(batch))})
}

// BenchmarkProduceCheckpoint: each iteration, 64 leases each commit one
// batch of 100 x 1 KiB records without a checkpoint and one with a
// checkpoint (in turn first), on the same gateway and broker. Reported: data records/s of
// both and their ratio (with / without).
func BenchmarkProduceCheckpoint(b *testing.B) {
	tb := setup(b)
	r := tb.newReplica(nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchLeases}}
	tokens := make([]int64, benchLeases)
	for i := range tokens {
		tokens[i] = r.mustAcquire(b, fmt.Sprintf("shard:%d", i), "bench", 10*time.Minute)
	}
	value := bytes.Repeat([]byte("x"), benchRecordSize)
	var plain, withCP time.Duration
	round := 0
	run := func(body func(owner string, token int64, batch string, value []byte) []byte, batch string) time.Duration {
		bodies := make([][]byte, benchLeases)
		for i := range bodies {
			bodies[i] = body("bench", tokens[i], batch, value)
		}
		start := time.Now()
		parallel(benchLeases, func(i int) {
			postBatch(b, client, r.srv.URL+fmt.Sprintf("/v1/leases/shard:%d/records", i), bodies[i])
		})
		return time.Since(start)
	}
	for b.Loop() {
		round++
		// Which goes first alternates, so neither gains from the other's
		// warming the connections and the broker.
		if round%2 == 0 {
			plain += run(benchBody, fmt.Sprintf("p%d", round))
		}
		withCP += run(benchCheckpointBody, fmt.Sprintf("c%d", round))
		if round%2 == 1 {
			plain += run(benchBody, fmt.Sprintf("p%d", round))
		}
	}
	recs := float64(round * benchLeases * benchRecords)
	b.ReportMetric(recs/plain.Seconds(), "plain_rec/s")
	b.ReportMetric(recs/withCP.Seconds(), "checkpoint_rec/s")
	b.ReportMetric(plain.Seconds()/withCP.Seconds(), "ratio")
}

// BenchmarkCheckpointReadableAfterTakeover: per iteration, an owner
// writes a batch with a checkpoint to a fresh lease and releases it;
// another owner acquires it (201) and reads the checkpoint with wait=30s,
// a materializer of default settings running. Reported: p50 and p99 of
// the time from the 201 to the read's 200.
func BenchmarkCheckpointReadableAfterTakeover(b *testing.B) {
	tb := setup(b)
	r := tb.newReplica(nil)
	tb.runMaterializer(b)
	var ds []time.Duration
	n := 0
	for b.Loop() {
		n++
		name := fmt.Sprintf("shard:%d", 5000+n)
		old := r.mustAcquire(b, name, "w-old", time.Minute)
		if rep := r.produceCheckpoint(b, name, "w-old", old, "b-1", 10, "input=10"); rep.status != http.StatusOK {
			b.Fatalf("produce: %d %s", rep.status, rep.raw)
		}
		if rep := r.do(b, "DELETE", fmt.Sprintf("/v1/leases/%s?owner_id=w-old&token=%d", name, old), nil); rep.status != http.StatusNoContent {
			b.Fatalf("release: %d %s", rep.status, rep.raw)
		}
		fresh := r.mustAcquire(b, name, "w-new", time.Minute)
		start := time.Now()
		batch, _, ok := checkpointOf(b, r.readCheckpoint(b, name, "w-new", fresh, "30s"))
		ds = append(ds, time.Since(start))
		if !ok || batch != "b-1" {
			b.Fatalf("read after the takeover: %q (present %v), want b-1", batch, ok)
		}
	}
	b.ReportMetric(float64(percentile(ds, 0.5).Microseconds())/1000, "readable_p50_ms")
	b.ReportMetric(float64(percentile(ds, 0.99).Microseconds())/1000, "readable_p99_ms")
}
