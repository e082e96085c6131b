package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// TestDrainFinishesBatchInFlightThenRehomes: a draining replica (SIGTERM)
// turns unready, refuses new acquires (503 draining) and new batches
// (not_holder), lets the batch in flight commit, then leaves the registry,
// so the other replica answers not_holder at once and the owner moves the
// lease there with its current token.
func TestDrainFinishesBatchInFlightThenRehomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gate := newGate(gateway.HookBeforeCommit, "shard:40")
	a := b.newReplica(hooks(gate))
	other := b.newReplica(nil)
	token := a.mustAcquire(t, "shard:40", "w1", 30*time.Second)
	log := &ackLog{}
	inflight := make(chan reply, 1)
	go func() { inflight <- a.produce(t, "shard:40", "w1", token, "in-flight", 3) }()
	gate.wait(t)
	drained := make(chan error, 1)
	go func() { drained <- a.g.Drain(context.Background()) }()
	eventually(t, 10*time.Second, func() (bool, string) {
		rep := a.do(t, "GET", "/readyz", nil)
		return rep.status == http.StatusServiceUnavailable && rep.code() == "draining", string(rep.raw)
	})
	if rep := a.acquire(t, "shard:41", "w2", 30*time.Second); rep.status != http.StatusServiceUnavailable || rep.code() != "draining" {
		t.Fatalf("acquire on a draining replica: %d %s", rep.status, rep.raw)
	}
	if rep := a.produce(t, "shard:40", "w1", token, "after-drain", 1); rep.code() != "not_holder" {
		t.Fatalf("a new batch on a draining replica: %d %s, want not_holder", rep.status, rep.raw)
	}
	gate.open()
	b.mustProduceReplied(t, log, "shard:40", token, "in-flight", <-inflight)
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	if rep := other.produce(t, "shard:40", "w1", token, "b", 1); rep.code() != "not_holder" {
		t.Fatalf("the other replica after the drain: %d %s, want not_holder (not 421 to the drained address)", rep.status, rep.raw)
	}
	moved := other.regenerate(t, "shard:40", "w1", token, 30*time.Second)
	if moved.status != http.StatusCreated {
		t.Fatalf("moving the lease with the current token: %d %s", moved.status, moved.raw)
	}
	b.mustProduce(t, other, log, "shard:40", "w1", moved.int("token"), "rehomed", 2)
	b.checkInvariants(t, "shard:40", log)
}
