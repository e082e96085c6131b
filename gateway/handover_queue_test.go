package gateway_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/verify"
)

// TestColdStartQueuesHandovers: many concurrent acquires on a replica that
// runs one handover at a time all succeed: a handover waiting for its slot
// spends none of its TTL (the grant comes after the wait). With the wait
// inside the handover budget (1.5 s of a 3 s TTL), most of 40 queued
// handovers failed kafka_unavailable.
func TestColdStartQueuesHandovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) { c.MaxConcurrentHandovers, c.MaxHandoverQueue = 1, 64 })
	const n = 40
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = r.acquire(t, fmt.Sprintf("shard:%d", 300+i), "w", 3*time.Second)
		}()
	}
	wg.Wait()
	tokens := map[int64]bool{}
	for i, rep := range replies {
		if rep.status != http.StatusCreated {
			t.Errorf("acquire %d of %d: %d %s", i, n, rep.status, rep.raw)
			continue
		}
		tokens[rep.int("token")] = true
	}
	if len(tokens) != n {
		t.Fatalf("%d distinct tokens for %d grants", len(tokens), n)
	}
}

// TestHandoverQueueFullIs429: an acquire that waits longer than
// MaxHandover for a handover slot is refused 429 too_many_requests with
// Retry-After, before any grant: the lease row is not even created.
func TestHandoverQueueFullIs429(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(gateway.HookGranted, "shard:350")
	r := b.newReplica(func(c *gateway.Config) {
		c.MaxConcurrentHandovers = 1
		c.MaxHandover = 300 * time.Millisecond
		hooks(g)(c)
	})
	done := make(chan reply, 1)
	go func() { done <- r.acquire(t, "shard:350", "w", 10*time.Second) }()
	g.wait(t) // the only slot is held
	rep := r.acquire(t, "shard:351", "w", 10*time.Second)
	if rep.status != http.StatusTooManyRequests || rep.code() != "too_many_requests" || rep.header.Get("Retry-After") == "" {
		t.Fatalf("acquire behind a full queue: %d %s (Retry-After %q)", rep.status, rep.raw, rep.header.Get("Retry-After"))
	}
	if l, err := b.store.Get(b.ctx, "shard:351"); err == nil {
		t.Fatalf("a refused acquire left a lease row: %+v", l)
	}
	g.open()
	<-done
}

// TestFailedHandoverAbortsItsBarrier: a handover whose budget runs out
// with its barrier sent but not committed aborts that transaction before
// it answers, so the partition's read_committed readers are not held
// until the broker's transaction timeout (60 s here).
func TestFailedHandoverAbortsItsBarrier(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(gateway.HookBarrierSent, "shard:360")
	r := b.newReplica(func(c *gateway.Config) {
		c.Kafka.TransactionTimeoutMS = 60000
		c.MaxHandover = time.Second
		hooks(g)(c)
	})
	done := make(chan reply, 1)
	go func() { done <- r.acquire(t, "shard:360", "w", 10*time.Second) }()
	g.wait(t)
	time.AfterFunc(1500*time.Millisecond, g.open) // past the 1 s budget
	if rep := <-done; rep.status != http.StatusServiceUnavailable {
		t.Fatalf("acquire whose budget ran out: %d %s", rep.status, rep.raw)
	}
	eventually(t, 5*time.Second, func() (bool, string) {
		log, err := verify.ReadLog(b.kafka.Conn, b.kafka.Topic, b.partitionOf("shard:360"), 5*time.Second)
		if err != nil {
			return false, err.Error()
		}
		return barrierAborted(log, "shard:360"), fmt.Sprintf("no ABORT after the barrier of shard:360 in %d log records", len(log))
	})
}

// barrierAborted reports whether the lease's barrier is followed by an
// ABORT marker of its producer.
func barrierAborted(log []verify.LogRecord, lease string) bool {
	pid := int64(-1)
	for _, r := range log {
		switch {
		case !r.Control && r.Barrier && r.Lease == lease:
			pid = r.ProducerID
		case r.Control && !r.Commit && r.ProducerID == pid:
			return true
		}
	}
	return false
}

// TestHandoverQueueIsBounded: with MaxHandoverQueue acquires waiting for
// the only slot, one more is refused 429 at once, before any grant, and a
// renewal meanwhile is answered at once: waiting acquires cannot take the
// API's capacity from the leases already held.
func TestHandoverQueueIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(gateway.HookGranted, "shard:370")
	r := b.newReplica(func(c *gateway.Config) {
		c.MaxConcurrentHandovers, c.MaxHandoverQueue = 1, 2
		c.MaxHandover = time.Minute // a waiter would be refused only after a minute
		hooks(g)(c)
	})
	held := r.mustAcquire(t, "shard:369", "w", 30*time.Second)
	done := make(chan reply, 3)
	go func() { done <- r.acquire(t, "shard:370", "w", 30*time.Second) }()
	g.wait(t) // the only slot is held
	for _, name := range []string{"shard:371", "shard:372"} {
		go func() { done <- r.acquire(t, name, "w", 30*time.Second) }()
	}
	eventually(t, 10*time.Second, func() (bool, string) {
		return r.g.HandoversWaiting() == 2, fmt.Sprintf("%d acquires waiting, want 2", r.g.HandoversWaiting())
	})
	refused := make(chan reply, 1)
	go func() { refused <- r.acquire(t, "shard:373", "w", 30*time.Second) }()
	var rep reply
	select {
	case rep = <-refused:
	case <-time.After(10 * time.Second):
		g.open()
		t.Fatal("an acquire beyond the queue waited instead of being refused")
	}
	if rep.status != http.StatusTooManyRequests || rep.code() != "too_many_requests" || rep.header.Get("Retry-After") == "" {
		t.Fatalf("acquire beyond the queue: %d %s", rep.status, rep.raw)
	}
	if l, err := b.store.Get(b.ctx, "shard:373"); err == nil {
		t.Fatalf("a refused acquire left a lease row: %+v", l)
	}
	if rep := r.do(t, "PATCH", "/v1/leases/shard:369", map[string]any{"owner_id": "w", "token": held, "ttl_ms": 30000}); rep.status != http.StatusOK {
		t.Fatalf("renewal while acquires wait: %d %s", rep.status, rep.raw)
	}
	g.open()
	for range 3 {
		if rep := <-done; rep.status != http.StatusCreated {
			t.Errorf("a queued acquire: %d %s", rep.status, rep.raw)
		}
	}
}
