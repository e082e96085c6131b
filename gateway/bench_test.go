package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/client/wire"
)

const (
	benchLeases     = 64
	benchRecords    = 100
	benchRecordSize = 1024
)

// benchBody is one batch of benchRecords records of benchRecordSize bytes,
// in the binary body the SDK sends.
func benchBody(owner string, token int64, batch string, value []byte) []byte {
	recs := make([]wire.Record, benchRecords)
	for i := range recs {
		recs[i] = wire.Record{Key: fmt.Appendf(nil, "k%d", i), Value: value}
	}
	return wire.Append(nil, wire.Batch{OwnerID: owner, Token: token, BatchID: batch, Records: recs})
}

func percentile(ds []time.Duration, p float64) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[min(int(float64(len(ds))*p), len(ds)-1)]
}

// BenchmarkProduceGatewayVsDirect: each iteration, 64 leases each commit one
// batch of 100 x 1 KiB records through the gateway (HTTP, one transaction
// per batch), then 64 direct confluent-kafka-go transactional producers
// commit the same batches, stamped with the gateway's five headers, on the
// same broker. Reported: records/s of both,
// their ratio, and the handover (acquire) latency p50/p99 of the 64
// acquires.
func BenchmarkProduceGatewayVsDirect(b *testing.B) {
	tb := setup(b)
	r := tb.newReplica(nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchLeases}}
	tokens := make([]int64, benchLeases)
	var acq []time.Duration
	for i := range tokens {
		start := time.Now()
		tokens[i] = r.mustAcquire(b, fmt.Sprintf("shard:%d", i), "bench", 10*time.Minute)
		acq = append(acq, time.Since(start))
	}
	direct := newDirectProducers(b, tb.kafka.Brokers)
	value := bytes.Repeat([]byte("x"), benchRecordSize)
	var gw, dr time.Duration
	round := 0
	for b.Loop() {
		round++
		bodies := make([][]byte, benchLeases)
		for i := range bodies {
			bodies[i] = benchBody("bench", tokens[i], fmt.Sprintf("r%d", round), value)
		}
		start := time.Now()
		parallel(benchLeases, func(i int) {
			postBatch(b, client, r.srv.URL+fmt.Sprintf("/v1/leases/shard:%d/records", i), bodies[i])
		})
		gw += time.Since(start)
		start = time.Now()
		parallel(benchLeases, func(i int) {
			direct[i].commit(b, int32(i%partitions), value, stamped(barrier.Stamp{Lease: fmt.Sprintf("shard:%d", i), Token: tokens[i],
				Owner: "bench", Batch: fmt.Sprintf("r%d", round)}))
		})
		dr += time.Since(start)
	}
	recs := float64(round * benchLeases * benchRecords)
	b.ReportMetric(recs/gw.Seconds(), "gateway_rec/s")
	b.ReportMetric(recs/dr.Seconds(), "direct_rec/s")
	b.ReportMetric(dr.Seconds()/gw.Seconds(), "ratio")
	b.ReportMetric(float64(percentile(acq, 0.5).Microseconds())/1000, "acquire_p50_ms")
	b.ReportMetric(float64(percentile(acq, 0.99).Microseconds())/1000, "acquire_p99_ms")
}

func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); fn(i) }()
	}
	wg.Wait()
}

func postBatch(b *testing.B, client *http.Client, url string, body []byte) {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+devToken)
	req.Header.Set("Content-Type", wire.ContentType)
	resp, err := client.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		b.Errorf("produce: %d %s", resp.StatusCode, raw)
	}
}

type directProducer struct{ p *kafka.Producer }

func newDirectProducers(b *testing.B, brokers string) []*directProducer {
	out := make([]*directProducer, benchLeases)
	for i := range out {
		out[i] = newDirectProducer(b, brokers, fmt.Sprintf("direct-%d", i))
	}
	return out
}

// newDirectProducer is an initialised transactional producer, closed at
// the end of the benchmark.
func newDirectProducer(b *testing.B, brokers, transactionalID string) *directProducer {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers,
		"transactional.id": transactionalID, "linger.ms": 1, "enable.metrics.push": false,
		"go.logs.channel.enable": false})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range p.Events() {
		}
	}()
	if err := p.InitTransactions(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return &directProducer{p: p}
}

// stamped gives each record the five headers the gateway stamps on the
// data records of the batch st names: the direct producers write what
// the gateway writes (BENCHMARKS-history.md, "The yardstick made fair").
func stamped(st barrier.Stamp) func(seq int) []kafka.Header {
	stamper := st.Stamper()
	return func(seq int) []kafka.Header { return stamper.Append(nil, seq) }
}

// commit commits one batch of benchRecords records of value, each with
// the headers of its seq, waiting for every delivery report.
func (d *directProducer) commit(b *testing.B, partition int32, value []byte, headers func(seq int) []kafka.Header) {
	t := topic
	dch := make(chan kafka.Event, benchRecords)
	if err := d.p.BeginTransaction(); err != nil {
		b.Error(err)
		return
	}
	for i := range benchRecords {
		_ = d.p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &t, Partition: partition},
			Key: []byte(fmt.Sprintf("k%d", i)), Value: value, Headers: headers(i)}, dch)
	}
	for range benchRecords {
		if m := (<-dch).(*kafka.Message); m.TopicPartition.Error != nil {
			b.Error(m.TopicPartition.Error)
		}
	}
	if err := d.p.CommitTransaction(context.Background()); err != nil {
		b.Error(err)
	}
}

// BenchmarkHandover: one acquire of a new lease per iteration through the
// HTTP API (grant, producer, InitTransactions, barrier, activate), on an
// otherwise idle gateway; p50 and p99 of the acquire. The lease is
// released outside the timer.
func BenchmarkHandover(b *testing.B) {
	tb := setup(b)
	r := tb.newReplica(nil)
	var ds []time.Duration
	n := 0
	for b.Loop() {
		n++
		name := fmt.Sprintf("shard:%d", 1000+n)
		start := time.Now()
		token := r.mustAcquire(b, name, "bench", time.Minute)
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if rep := r.do(b, "DELETE", fmt.Sprintf("/v1/leases/%s?owner_id=bench&token=%d", name, token), nil); rep.status != http.StatusNoContent {
			b.Fatalf("release: %d %s", rep.status, rep.raw)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(percentile(ds, 0.5).Microseconds())/1000, "handover_p50_ms")
	b.ReportMetric(float64(percentile(ds, 0.99).Microseconds())/1000, "handover_p99_ms")
}

// BenchmarkRenew: renewals of one lease through the HTTP API (Postgres
// update, local deadline); p50 and p99.
func BenchmarkRenew(b *testing.B) {
	tb := setup(b)
	r := tb.newReplica(nil)
	token := r.mustAcquire(b, "shard:1", "bench", time.Minute)
	body := map[string]any{"owner_id": "bench", "token": token, "ttl_ms": 60000}
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if rep := r.do(b, "PATCH", "/v1/leases/shard:1", body); rep.status != http.StatusOK {
			b.Fatalf("renew: %d %s", rep.status, rep.raw)
		}
		ds = append(ds, time.Since(start))
	}
	b.ReportMetric(float64(percentile(ds, 0.5).Microseconds())/1000, "renew_p50_ms")
	b.ReportMetric(float64(percentile(ds, 0.99).Microseconds())/1000, "renew_p99_ms")
}

// BenchmarkForwardHop measures what forwarding costs: each iteration, 16
// leases held on one replica each commit one batch of 100 x 1 KiB records
// sent to the holder, one sent to a second replica, which forwards it with
// the holder found in its cache, and one sent to a third, which reads the
// registry for every request (HolderCacheFor < 0). Reported: the p50/p99
// of each, what the hop adds, and the process CPU per batch (both
// replicas and the broker share this process; the registry reads cost
// Postgres CPU, not counted here).
func BenchmarkForwardHop(b *testing.B) {
	const leases = 16
	tb := setup(b)
	tb.forwarding(0)
	holder, cached := tb.newReplica(slowBeat), tb.newReplica(slowBeat)
	tb.forward.HolderCacheFor = -1
	uncached := tb.newReplica(slowBeat)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * leases}}
	tokens := make([]int64, leases)
	for i := range tokens {
		tokens[i] = holder.mustAcquire(b, fmt.Sprintf("shard:%d", i), "bench", 10*time.Minute)
	}
	value := bytes.Repeat([]byte("x"), benchRecordSize)
	phases := []*hopPhase{{name: "direct", at: holder}, {name: "forwarded", at: cached}, {name: "uncached", at: uncached}}
	round := 0
	for b.Loop() {
		round++
		for _, p := range phases {
			p.run(b, client, tokens, round, value)
		}
	}
	n := float64(round * leases)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	direct := phases[0]
	for _, p := range phases {
		b.ReportMetric(ms(percentile(p.ds, 0.5)), p.name+"_p50_ms")
		b.ReportMetric(ms(percentile(p.ds, 0.99)), p.name+"_p99_ms")
		b.ReportMetric(float64(p.cpu.Microseconds())/n, p.name+"_cpu_us/batch")
		if p != direct {
			b.ReportMetric(ms(percentile(p.ds, 0.5)-percentile(direct.ds, 0.5)), p.name+"_hop_p50_ms")
			b.ReportMetric(float64((p.cpu-direct.cpu).Microseconds())/n, p.name+"_hop_cpu_us/batch")
		}
	}
}

// hopPhase is one way of sending BenchmarkForwardHop's batches.
type hopPhase struct {
	name string
	at   *replica
	ds   []time.Duration
	cpu  time.Duration
}

// run sends one batch per lease at once to p.at.
func (p *hopPhase) run(b *testing.B, client *http.Client, tokens []int64, round int, value []byte) {
	ds := make([]time.Duration, len(tokens))
	start := cpuTime(b)
	parallel(len(tokens), func(i int) {
		body := benchBody("bench", tokens[i], fmt.Sprintf("%s%d", p.name, round), value)
		t0 := time.Now()
		postBatch(b, client, p.at.srv.URL+fmt.Sprintf("/v1/leases/shard:%d/records", i), body)
		ds[i] = time.Since(t0)
	})
	p.cpu += cpuTime(b) - start
	p.ds = append(p.ds, ds...)
}

// BenchmarkRecordHeaders measures what the fencegate headers cost a
// producer, to size the gain of a denser encoding (which the wire format
// does not allow today: docs/api.md): one transactional producer commits
// batches of 100 x 1 KiB with no headers (plain), with the five headers
// the gateway stamps (barrier.Stamper), and with one header carrying the
// same bytes (dense). Reported: CPU microseconds per record of the whole
// process (the in-process broker included, the same for the three) and
// records/s. confluent-kafka-go copies every header key and value into C
// memory with its own malloc (two cgo calls a header) before librdkafka
// copies them again.
func BenchmarkRecordHeaders(b *testing.B) {
	tb := setup(b)
	value := bytes.Repeat([]byte("x"), benchRecordSize)
	stamp := barrier.Stamp{Lease: "shard:7", Token: 12, Owner: "w7-0", Batch: "w7-0/123"}
	forms := []struct {
		name    string
		headers func(seq int) []kafka.Header
	}{
		{"plain", func(int) []kafka.Header { return nil }},
		{"stamped", stamped(stamp)},
		{"dense", func(seq int) []kafka.Header {
			return []kafka.Header{{Key: "fencegate", Value: fmt.Appendf(nil, "%s\x00%d\x00%s\x00%s\x00%d", stamp.Lease, stamp.Token, stamp.Owner, stamp.Batch, seq)}}
		}},
	}
	d := newDirectProducer(b, tb.kafka.Brokers, "headers")
	for i, f := range forms {
		b.Run(f.name, func(b *testing.B) {
			d.commit(b, int32(i%partitions), value, f.headers) // the partition's first AddPartitionsToTxn, untimed
			recs := 0
			start, cpu := time.Now(), cpuTime(b)
			for b.Loop() {
				d.commit(b, int32(i%partitions), value, f.headers)
				recs += benchRecords
			}
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(recs), "cpu_us/record")
			b.ReportMetric(float64(recs)/time.Since(start).Seconds(), "rec/s")
		})
	}
}
