package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/verify"
)

// parkAfter is the idle time of the parking tests. They move a replica's
// clock past it instead of waiting.
const parkAfter = 5 * time.Second

func parking(c *gateway.Config) { c.ParkAfter = parkAfter }

// both applies two config changes.
func both(a, b func(*gateway.Config)) func(*gateway.Config) {
	return func(c *gateway.Config) { a(c); b(c) }
}

// idleUntilParked moves r's clock past the idle time and waits until want
// sessions are parked.
func idleUntilParked(t *testing.T, r *replica, want int) {
	t.Helper()
	r.clock.advance(parkAfter + time.Second)
	eventually(t, 30*time.Second, func() (bool, string) {
		n := r.g.Parked()
		return n == want, fmt.Sprintf("%d sessions parked, want %d", n, want)
	})
}

// TestParkClosesIdleProducers: sessions idle past ParkAfter close their
// producers (the process runs as many librdkafka threads as before they
// were acquired) and stay live: renewals still extend them, in Postgres
// and locally, without a producer, and the gauges say so.
func TestParkClosesIdleProducers(t *testing.T) {
	// Not parallel: it counts the whole process's threads.
	b := setup(t)
	mod, serve := withMetrics(t)
	r := b.newReplica(both(parking, mod))
	serve(r)
	baseThreads, _ := procCounts(t)
	logs := map[string]*ackLog{}
	tokens := map[string]int64{}
	for i := range 3 {
		name := fmt.Sprintf("shard:6%d", i)
		logs[name] = &ackLog{}
		tokens[name] = r.mustAcquire(t, name, "w1", 30*time.Second)
		b.mustProduce(t, r, logs[name], name, "w1", tokens[name], "b-1", 2)
	}
	if threads, _ := procCounts(t); threads <= baseThreads {
		t.Fatalf("librdkafka threads %d with 3 sessions, baseline %d: the count cannot show parking", threads, baseThreads)
	}
	idleUntilParked(t, r, 3)
	eventually(t, 30*time.Second, func() (bool, string) {
		threads, _ := procCounts(t)
		return threads == baseThreads, fmt.Sprintf("librdkafka threads %d with 3 parked sessions (baseline %d)", threads, baseThreads)
	})
	for name, token := range tokens {
		before, err := b.store.Get(b.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		rep := r.do(t, "PATCH", "/v1/leases/"+name, map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 60000})
		if rep.status != http.StatusOK {
			t.Fatalf("renewal of parked %s: %d %s", name, rep.status, rep.raw)
		}
		after, err := b.store.Get(b.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !after.ExpiresAt.After(before.ExpiresAt) || after.Token != token {
			t.Fatalf("%s after renewing while parked: token %d expires %v, before %v", name, after.Token, after.ExpiresAt, before.ExpiresAt)
		}
	}
	if n, p := r.g.Sessions(), r.g.Parked(); n != 3 || p != 3 {
		t.Fatalf("after renewals: %d live sessions, %d parked; want 3 and 3", n, p)
	}
	s := scrapeMetrics(t, r.metricsURL)
	parked, _ := s.value("fencegate_sessions_parked", nil)
	parks, _ := s.value("fencegate_sessions_parks_total", nil)
	if parked != 3 || parks != 3 {
		t.Fatalf("metrics: fencegate_sessions_parked %v, fencegate_sessions_parks_total %v; want 3 and 3", parked, parks)
	}
	for name, log := range logs {
		b.checkInvariants(t, name, log)
	}
}

// TestParkedGenerationResumesUnderGreaterToken: a parked session answers a
// committed batch id from memory and refuses a new batch with not_holder
// (nothing written). The owner's new generation has a greater token and a
// new epoch; the batch lands once, under it; the parked generation's
// token is refused afterwards; the topic and the materializer's ledger
// hold the batch once.
func TestParkedGenerationResumesUnderGreaterToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mod, serve := withMetrics(t)
	r := b.newReplica(both(parking, mod))
	serve(r)
	lease := "shard:64"
	grant := r.acquire(t, lease, "w1", 30*time.Second)
	parked := grant.int("token")
	log := &ackLog{}
	b.mustProduce(t, r, log, lease, "w1", parked, "b-1", 2)
	idleUntilParked(t, r, 1)

	if rep := r.produce(t, lease, "w1", parked, "b-1", 2); rep.status != http.StatusOK {
		t.Fatalf("retry of a batch the parked generation committed: %d %s, want its original offsets", rep.status, rep.raw)
	}
	if rep := r.produce(t, lease, "w1", parked, "b-2", 3); rep.code() != "not_holder" {
		t.Fatalf("new batch for a parked session: %d %s, want 409 not_holder", rep.status, rep.raw)
	}
	resumed := r.regenerate(t, lease, "w1", parked, 30*time.Second)
	if resumed.status != http.StatusCreated {
		t.Fatalf("new generation of the parked lease: %d %s", resumed.status, resumed.raw)
	}
	token := resumed.int("token")
	if token <= parked || resumed.int("producer_epoch") <= grant.int("producer_epoch") && resumed.int("producer_id") == grant.int("producer_id") {
		t.Fatalf("resumed as token %d epoch %d (producer %d), parked token %d epoch %d (producer %d): want a greater token and a new epoch",
			token, resumed.int("producer_epoch"), resumed.int("producer_id"), parked, grant.int("producer_epoch"), grant.int("producer_id"))
	}
	b.mustProduce(t, r, log, lease, "w1", token, "b-2", 3)
	if rep := r.produce(t, lease, "w1", parked, "stale", 1); rep.code() != "lease_lost" {
		t.Fatalf("write of the parked generation after the resume: %d %s, want 409 lease_lost", rep.status, rep.raw)
	}
	recs := b.checkInvariants(t, lease, log)
	if by := recordsOf(recs, "b-2"); len(by) != 1 || by[token] != 3 {
		t.Fatalf("batch b-2 by token in the topic: %v, want 3 records under %d only", by, token)
	}
	if by := recordsOf(recs, "stale"); len(by) != 0 {
		t.Fatalf("the parked generation's stale batch is in the topic: %v", by)
	}
	if resumes, _ := scrapeMetrics(t, r.metricsURL).value("fencegate_sessions_resumes_total", nil); resumes != 1 {
		t.Fatalf("fencegate_sessions_resumes_total %v, want 1", resumes)
	}
	b.materialize(t, lease, recs)
	if n := b.count(t, `SELECT count(*) FROM accepted_records WHERE lease = $1 AND batch_id = 'b-2' AND token = $2`, lease, token); n != 3 {
		t.Fatalf("%d records of b-2 under token %d in the ledger, want 3", n, token)
	}
	if n := b.count(t, `SELECT count(*) FROM accepted_records WHERE lease = $1 AND batch_id = 'b-2'`, lease); n != 3 {
		t.Fatalf("%d records of b-2 in the ledger, want 3 (once)", n)
	}
	if n := b.count(t, `SELECT count(*) FROM fences WHERE lease = $1 AND token = $2`, lease, token); n != 1 {
		t.Fatalf("the ledger's fence of %s is not the resumed token %d", lease, token)
	}
	if n := b.count(t, `SELECT count(*) FROM rejected_records WHERE lease = $1`, lease); n != 0 {
		t.Fatalf("%d records of %s refused by the materializer, want 0", n, lease)
	}
}

// TestParkNeverWithBatchInFlight: a batch held before its commit keeps its
// session from parking however long it is idle by the clock, while idle
// sessions of the same replica park around it (the "session parked" log
// lines name them); once the batch commits, the session parks too.
func TestParkNeverWithBatchInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lease := "shard:65"
	gate := newGate(gateway.HookBeforeCommit, lease)
	parks := &parkLog{}
	r := b.newReplica(both(parking, both(hooks(gate), parks.use)))
	token := r.mustAcquire(t, lease, "w1", time.Minute)
	done := make(chan reply, 1)
	go func() { done <- r.produce(t, lease, "w1", token, "held", 2) }()
	gate.wait(t)
	defer gate.open()
	// Each control session is acquired, left idle by the clock and
	// parked. The park loop visits every live session in a round, one
	// round at a time: the round that parked the first control visited
	// the held session, idle by the clock since before it, and ended
	// before the round that parked the second one began.
	for _, name := range []string{"shard:66", "shard:67"} {
		r.mustAcquire(t, name, "w1", time.Minute)
		r.clock.advance(parkAfter + time.Second)
		parks.wait(t, name)
	}
	if parks.saw(lease) || r.g.Parked() != 2 {
		t.Fatalf("parked %v (%d sessions) with a batch in flight on %s: want the 2 idle ones only", parks.all(), r.g.Parked(), lease)
	}
	gate.open()
	rep := <-done
	log := &ackLog{}
	b.mustProduceReplied(t, log, lease, token, "held", rep)
	r.clock.advance(parkAfter + time.Second)
	parks.wait(t, lease)
	b.checkInvariants(t, lease, log)
}

// parkLog records the leases of the gateway's "session parked" log lines.
type parkLog struct {
	mu     sync.Mutex
	leases []string
}

func (p *parkLog) use(c *gateway.Config) { c.Logger = slog.New(p) }

func (p *parkLog) Enabled(context.Context, slog.Level) bool { return true }

func (p *parkLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "session parked" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "fencegate.lease" {
			p.mu.Lock()
			p.leases = append(p.leases, a.Value.String())
			p.mu.Unlock()
		}
		return true
	})
	return nil
}

func (p *parkLog) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *parkLog) WithGroup(string) slog.Handler      { return p }

func (p *parkLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.leases...)
}

func (p *parkLog) saw(lease string) bool { return slices.Contains(p.all(), lease) }

func (p *parkLog) wait(t *testing.T, lease string) {
	t.Helper()
	eventually(t, 30*time.Second, func() (bool, string) {
		return p.saw(lease), fmt.Sprintf("sessions parked: %v, waiting for %s", p.all(), lease)
	})
}

// recordsOf counts the committed data records of batch by token.
func recordsOf(recs []verify.Record, batch string) map[int64]int {
	by := map[int64]int{}
	for _, r := range recs {
		if !r.Barrier && r.Batch == batch {
			by[r.Token]++
		}
	}
	return by
}

// materialize runs a materializer on the bundle's database until it has
// applied every record of recs (the lease's partition, read back).
func (b *testBundle) materialize(t *testing.T, lease string, recs []verify.Record) {
	t.Helper()
	m, err := materializer.New(b.db.Pool, b.router, materializer.Config{Kafka: b.kafka.Conn, BarrierKey: barrierKey,
		PollTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	last := recs[len(recs)-1].Offset
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	eventually(t, 60*time.Second, func() (bool, string) {
		var pos int64
		_ = b.db.Pool.QueryRow(b.ctx, `SELECT next_offset FROM consumer_positions WHERE topic = $1 AND partition = $2`,
			b.kafka.Topic, b.partitionOf(lease)).Scan(&pos)
		return pos > last, fmt.Sprintf("materializer at offset %d, last record %d", pos, last)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("materializer: %v", err)
	}
}

func (b *testBundle) count(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := b.db.Pool.QueryRow(b.ctx, q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
