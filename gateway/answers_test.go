package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// The tests of this file hold the answers of issue 20's scenarios 4 to 7:
// a routing answer stays a routing answer, a committed batch's retry is
// told what happened to it, the local deadline never outlives the
// database's expiry, and a replica that cannot prove where a session lives
// does nothing.

// slowBeat keeps a loaded machine's delayed heartbeat from making a live
// holder look gone (fresh for 3 intervals).
func slowBeat(c *gateway.Config) { c.HeartbeatEvery = 2 * time.Second }

// TestFM33_NewerGenerationAtAnOlderSessionRouted: the owner moved its lease
// to replica b with its current token; replica a still has the older
// session (live, and later a fenced tombstone). A request of the new
// generation that reaches a is answered 421 toward b, never lease_lost:
// lease_lost would make the worker drop a lease it holds.
func TestFM33_NewerGenerationAtAnOlderSessionRouted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newReplica(slowBeat)
	other := b.newReplica(slowBeat)
	old := a.mustAcquire(t, "shard:33", "w1", 30*time.Second)
	moved := other.regenerate(t, "shard:33", "w1", old, 30*time.Second)
	if moved.status != http.StatusCreated {
		t.Fatalf("moving the lease to the other replica: %d %s", moved.status, moved.raw)
	}
	token := moved.int("token")
	routed := func(what string, rep reply) {
		t.Helper()
		if rep.status != http.StatusMisdirectedRequest || rep.body["holder_url"] != other.srv.URL {
			t.Fatalf("%s of token %d at the replica with the older session: %d %s, want 421 toward %s",
				what, token, rep.status, rep.raw, other.srv.URL)
		}
	}
	routed("produce", a.produce(t, "shard:33", "w1", token, "b1", 1))
	routed("renew", a.do(t, "PATCH", "/v1/leases/shard:33", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000}))
	// The older session meets the fence and ends: a tombstone.
	if rep := a.produce(t, "shard:33", "w1", old, "stale", 1); rep.status != http.StatusConflict {
		t.Fatalf("the older generation's batch: %d %s, want 409", rep.status, rep.raw)
	}
	routed("produce after the older session was fenced", a.produce(t, "shard:33", "w1", token, "b1", 1))
	// The older token itself is still told it lost the lease.
	if rep := a.do(t, "PATCH", "/v1/leases/shard:33", map[string]any{"owner_id": "w1", "token": old, "ttl_ms": 30000}); rep.code() == "misdirected" {
		t.Fatalf("the older token was routed: %d %s", rep.status, rep.raw)
	}
}

// TestFM34_CommittedBatchRetriedAfterItsSessionEnded: a batch commits, its
// reply is lost, and the session ends before the retry arrives (the local
// deadline passed with the reaper not yet run; the producer fenced by a
// move). The retry of the same batch_id gets the original offsets, not a
// definite refusal of a batch that landed, and writes nothing.
func TestFM34_CommittedBatchRetriedAfterItsSessionEnded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		r := b.newReplica(func(c *gateway.Config) { c.ReapInterval = time.Hour })
		token := r.mustAcquire(t, "shard:34", "w1", 5*time.Second)
		first := r.produce(t, "shard:34", "w1", token, "b-1", 2)
		log := &ackLog{}
		b.mustProduceReplied(t, log, "shard:34", token, "b-1", first)
		r.clock.advance(5 * time.Second)
		if rep := r.produce(t, "shard:34", "w1", token, "b-2", 1); rep.status != http.StatusConflict {
			t.Fatalf("a new batch past the local deadline: %d %s", rep.status, rep.raw)
		}
		checkRetry(t, r.produce(t, "shard:34", "w1", token, "b-1", 2), first)
		if n := batchRecords(b.checkInvariants(t, "shard:34", log), "b-1"); n != 2 {
			t.Fatalf("b-1 is %d records in the log, want 2", n)
		}
	})
	t.Run("fenced", func(t *testing.T) {
		t.Parallel()
		a := b.newReplica(slowBeat)
		other := b.newReplica(slowBeat)
		token := a.mustAcquire(t, "shard:134", "w1", 30*time.Second)
		first := a.produce(t, "shard:134", "w1", token, "b-1", 2)
		log := &ackLog{}
		b.mustProduceReplied(t, log, "shard:134", token, "b-1", first)
		if rep := other.regenerate(t, "shard:134", "w1", token, 30*time.Second); rep.status != http.StatusCreated {
			t.Fatalf("moving the lease: %d %s", rep.status, rep.raw)
		}
		if rep := a.produce(t, "shard:134", "w1", token, "b-2", 1); rep.code() != "fenced" {
			t.Fatalf("a new batch of the moved generation: %d %s, want fenced", rep.status, rep.raw)
		}
		checkRetry(t, a.produce(t, "shard:134", "w1", token, "b-1", 2), first)
		if n := batchRecords(b.checkInvariants(t, "shard:134", log), "b-1"); n != 2 {
			t.Fatalf("b-1 is %d records in the log, want 2", n)
		}
	})
}

func checkRetry(t *testing.T, rep, first reply) {
	t.Helper()
	if rep.status != http.StatusOK || string(rep.raw) != string(first.raw) {
		t.Fatalf("retry of a committed batch after its session ended: %d %s, want the original answer %s", rep.status, rep.raw, first.raw)
	}
}

// TestFM35_ShorterRenewalMovesTheLocalDeadlineBack: a renewal with a
// shorter ttl_ms moves expires_at earlier in Postgres; the local deadline
// follows it, so no batch is admitted once Postgres says the lease expired
// (I5).
func TestFM35_ShorterRenewalMovesTheLocalDeadlineBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) { c.ReapInterval = time.Hour })
	token := r.mustAcquire(t, "shard:35", "w1", 30*time.Second)
	rep := r.do(t, "PATCH", "/v1/leases/shard:35", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 500})
	if rep.status != http.StatusOK {
		t.Fatalf("renewal with a shorter ttl: %d %s", rep.status, rep.raw)
	}
	b.waitExpired(t, "shard:35")
	rep = r.produce(t, "shard:35", "w1", token, "after-expiry", 1)
	if rep.status == http.StatusOK {
		t.Fatalf("a batch after Postgres says the lease expired was committed: %s", rep.raw)
	}
	if n := batchRecords(b.read(t, "shard:35"), "after-expiry"); n != 0 {
		t.Fatalf("%d records written after the database's expiry", n)
	}
}

// TestFM36_SlowHolderLookupDoesNothing: with the replica registry locked
// (Postgres slow for that query), a replica without the session cannot
// prove that no live replica holds it. It answers 503 to a release,
// leaving the row alone while the holder's session keeps committing, and
// 503 to a produce and a renewal instead of not_holder (which would move
// the lease for nothing).
func TestFM36_SlowHolderLookupDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holder := b.newReplica(slowBeat)
	other := b.newReplica(slowBeat)
	token := holder.mustAcquire(t, "shard:36", "w1", 30*time.Second)
	lockRegistry(t, b)
	unavailable := func(what string, rep reply) {
		t.Helper()
		if rep.status != http.StatusServiceUnavailable {
			t.Fatalf("%s at the non-holder with the registry locked: %d %s, want 503", what, rep.status, rep.raw)
		}
	}
	unavailable("release", other.do(t, "DELETE", fmt.Sprintf("/v1/leases/shard:36?owner_id=w1&token=%d", token), nil))
	unavailable("produce", other.produce(t, "shard:36", "w1", token, "b1", 1))
	unavailable("renew", other.do(t, "PATCH", "/v1/leases/shard:36", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000}))
	if l, err := b.store.Get(b.ctx, "shard:36"); err != nil || l.State != "active" || !l.Live() {
		t.Fatalf("the lease row after the refused release: %+v %v", l, err)
	}
	log := &ackLog{}
	b.mustProduce(t, holder, log, "shard:36", "w1", token, "still-held", 1)
}

// lockRegistry holds an exclusive lock on the replicas table until the
// test ends: every registry lookup waits behind it.
func lockRegistry(t *testing.T, b *testBundle) {
	t.Helper()
	tx, err := b.db.Pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), "LOCK TABLE replicas IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
}
