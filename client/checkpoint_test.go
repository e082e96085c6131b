package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/client/wire"
)

// TestProduceSendsTheCheckpointInBinaryV2: a batch with a checkpoint goes
// in version 2 of the binary body carrying the checkpoint's bytes, and
// the answer's checkpoint_offset reaches Result.
func TestProduceSendsTheCheckpointInBinaryV2(t *testing.T) {
	f := newFakeGateway(t)
	l := acquire(t, newClient(t, f, nil))
	res, err := l.Produce(bg, "b1", []client.Record{{Value: []byte("x")}, {Value: []byte("y")}}, client.WithCheckpoint([]byte("after-b1")))
	if err != nil {
		t.Fatal(err)
	}
	sent := f.sent()
	if len(sent) != 1 || sent[0].contentType != wire.ContentType || sent[0].version != 2 || string(sent[0].checkpoint) != "after-b1" {
		t.Fatalf("sent %+v, want one binary version 2 body with checkpoint after-b1", sent)
	}
	if want := res.Offsets[len(res.Offsets)-1] + 1; res.CheckpointOffset != want {
		t.Errorf("CheckpointOffset %d, want %d (after the records %v)", res.CheckpointOffset, want, res.Offsets)
	}
}

// TestProduceWithoutCheckpointSendsV1: a batch without a checkpoint stays
// in version 1 of the binary body, so gateways that predate checkpoints
// keep taking it; its Result has no CheckpointOffset.
func TestProduceWithoutCheckpointSendsV1(t *testing.T) {
	f := newFakeGateway(t)
	l := acquire(t, newClient(t, f, nil))
	res, err := l.Produce(bg, "b1", rec, client.WithCheckpoint(nil))
	if err != nil {
		t.Fatal(err)
	}
	if sent := f.sent(); len(sent) != 1 || sent[0].version != 1 || sent[0].checkpoint != nil {
		t.Fatalf("sent %+v, want one version 1 body without checkpoint", sent)
	}
	if res.CheckpointOffset != 0 {
		t.Errorf("CheckpointOffset %d without a checkpoint", res.CheckpointOffset)
	}
}

// TestProduceKeepsAnEmptyCheckpoint: an empty, non-nil checkpoint is a
// checkpoint, not none.
func TestProduceKeepsAnEmptyCheckpoint(t *testing.T) {
	f := newFakeGateway(t)
	l := acquire(t, newClient(t, f, nil))
	if _, err := l.Produce(bg, "b1", rec, client.WithCheckpoint([]byte{})); err != nil {
		t.Fatal(err)
	}
	if sent := f.sent(); len(sent) != 1 || sent[0].version != 2 || sent[0].checkpoint == nil || len(sent[0].checkpoint) != 0 {
		t.Fatalf("sent %+v, want a version 2 body with an empty checkpoint", sent)
	}
}

// TestProduceRetriesCarryTheCheckpoint: the retry of a batch under a new
// generation (after generation_ended) carries the same checkpoint, under
// the new token.
func TestProduceRetriesCarryTheCheckpoint(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kProduce, "generation_ended")
	l := acquire(t, newClient(t, f, nil))
	if _, err := l.Produce(bg, "b1", rec, client.WithCheckpoint([]byte("cp"))); err != nil {
		t.Fatal(err)
	}
	sent := f.sent()
	if len(sent) != 2 {
		t.Fatalf("sent %+v, want the batch twice", sent)
	}
	for i, s := range sent {
		if s.batchID != "b1" || string(s.checkpoint) != "cp" || s.token != int64(i+1) {
			t.Errorf("attempt %d: %+v, want batch b1 with checkpoint cp under token %d", i+1, s, i+1)
		}
	}
}

// TestCheckpointOfANewLeaseIsNil: a lease that no batch checkpointed has
// no checkpoint; the read names the lease's owner and current token.
func TestCheckpointOfANewLeaseIsNil(t *testing.T) {
	f := newFakeGateway(t)
	l := acquire(t, newClient(t, f, nil))
	cp, err := l.Checkpoint(bg)
	if err != nil || cp != nil {
		t.Fatalf("Checkpoint: %+v, %v; want nil, nil", cp, err)
	}
	if got := f.requests(); !slices.Contains(got, "checkpoint 1 @a") {
		t.Errorf("requests %v, want a checkpoint read under token 1", got)
	}
}

// TestCheckpointReturnsTheLastCheckpointedBatch: the read returns the
// value and the meta of the newest checkpoint, and Committed names its
// batch, for this owner only.
func TestCheckpointReturnsTheLastCheckpointedBatch(t *testing.T) {
	f := newFakeGateway(t)
	l := acquire(t, newClient(t, f, nil))
	if _, err := l.Produce(bg, "b1", rec, client.WithCheckpoint([]byte("1"))); err != nil {
		t.Fatal(err)
	}
	res, err := l.Produce(bg, "b2", rec, client.WithCheckpoint([]byte{0, 0xff, '2'}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Produce(bg, "b3", rec); err != nil { // no checkpoint: the last one stays
		t.Fatal(err)
	}
	cp, err := l.Checkpoint(bg)
	if err != nil {
		t.Fatal(err)
	}
	want := client.Checkpoint{Value: []byte{0, 0xff, '2'}, Token: 1, OwnerID: "w1", BatchID: "b2", Partition: 1, Offset: res.CheckpointOffset}
	if cp == nil || string(cp.Value) != string(want.Value) || cp.Token != want.Token || cp.OwnerID != want.OwnerID ||
		cp.BatchID != want.BatchID || cp.Partition != want.Partition || cp.Offset != want.Offset {
		t.Fatalf("Checkpoint %+v, want %+v", cp, want)
	}
	for id, committed := range map[string]bool{"b2": true, "b1": false, "b3": false} {
		if cp.Committed(id) != committed {
			t.Errorf("Committed(%s) = %v, want %v", id, !committed, committed)
		}
	}
}

// TestCommittedComparesTheOwner: batch ids are scoped to their owner, so
// another owner's batch of the same id is not this worker's.
func TestCommittedComparesTheOwner(t *testing.T) {
	f := newFakeGateway(t)
	other := acquire(t, newClient(t, f, func(c *client.Config) { c.Owner = "w2" }))
	if _, err := other.Produce(bg, "b1", rec, client.WithCheckpoint([]byte("1"))); err != nil {
		t.Fatal(err)
	}
	if err := other.Release(bg); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, newClient(t, f, nil))
	cp, err := l.Checkpoint(bg)
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil || cp.OwnerID != "w2" || cp.Committed("b1") {
		t.Errorf("Checkpoint %+v: want w2's, and Committed(b1) false for w1", cp)
	}
	if (*client.Checkpoint)(nil).Committed("b1") {
		t.Error("a nil checkpoint committed b1")
	}
}

// TestCheckpointRetriesLedgerBehind: a ledger that has not applied the
// generation's barrier yet (503 ledger_behind) is asked again after its
// Retry-After, and the read then succeeds.
func TestCheckpointRetriesLedgerBehind(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kCheckpoint, "ledger_behind")
	l := acquire(t, newClient(t, f, nil))
	start := time.Now()
	if _, err := l.Checkpoint(bg); err != nil {
		t.Fatal(err)
	}
	if n := f.count(kCheckpoint); n != 2 {
		t.Errorf("%d checkpoint reads, want 2", n)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("retried after %s, before the Retry-After of 1s", waited)
	}
	if !open(l) {
		t.Error("ledger_behind lost the lease")
	}
}

// TestCheckpointLedgerBehindUntilTheContextEnds: past its context the
// read returns an error matching the context's and the last answer,
// ledger_behind with the ledger's token.
func TestCheckpointLedgerBehindUntilTheContextEnds(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kCheckpoint, slices.Repeat([]string{"ledger_behind"}, 100)...)
	l := acquire(t, newClient(t, f, nil))
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	_, err := l.Checkpoint(ctx)
	var p *client.Problem
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &p) || p.Code != client.CodeLedgerBehind ||
		p.RetryAfter != time.Second || p.LedgerToken != 4 {
		t.Fatalf("Checkpoint: %v; want the deadline and the last answer, ledger_behind with Retry-After 1s and ledger token 4 (recorded)", err)
	}
	if !open(l) {
		t.Error("ledger_behind lost the lease")
	}
}

// TestCheckpointWaitFollowsTheContext: each read asks the gateway to wait
// at most the default 5s, and at most half of what the context has left,
// so that the answer comes before the context ends.
func TestCheckpointWaitFollowsTheContext(t *testing.T) {
	f := newFakeGateway(t)
	l := acquire(t, newClient(t, f, nil))
	if _, err := l.Checkpoint(bg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	if _, err := l.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	waits := f.waited()
	if len(waits) != 2 {
		t.Fatalf("waits %v, want two", waits)
	}
	if d, err := time.ParseDuration(waits[0]); err != nil || d != 5*time.Second {
		t.Errorf("wait %q without a deadline, want 5s", waits[0])
	}
	if d, err := time.ParseDuration(waits[1]); err != nil || d <= 0 || d > time.Second {
		t.Errorf("wait %q under a 2s deadline, want at most 1s", waits[1])
	}
}

// TestCheckpointLeaseLostLosesTheLease: lease_lost to a read means the
// generation is over: the lease is lost, as after a produce.
func TestCheckpointLeaseLostLosesTheLease(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kCheckpoint, "lease_lost_not_owner")
	l := acquire(t, newClient(t, f, nil))
	_, err := l.Checkpoint(bg)
	if !errors.Is(err, client.ErrLeaseLost) || client.ErrorCode(err) != client.CodeLeaseLost {
		t.Fatalf("Checkpoint: %v, want the lease lost (lease_lost)", err)
	}
	if open(l) {
		t.Error("Lost is still open")
	}
}

// TestCheckpointSettlesAnUnknownOutcome: a batch that landed although its
// answer was lost, and then the lease: Produce says the outcome is
// unknown; after the next acquire the checkpoint says the batch is
// committed.
func TestCheckpointSettlesAnUnknownOutcome(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kProduce, landedThenTransport, "lease_lost_not_owner")
	c := newClient(t, f, nil)
	l := acquire(t, c)
	_, err := l.Produce(bg, "b1", rec, client.WithCheckpoint([]byte("1")))
	if !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Produce: %v, want lost with the outcome unknown", err)
	}
	again := acquire(t, c)
	cp, err := again.Checkpoint(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !cp.Committed("b1") || string(cp.Value) != "1" {
		t.Errorf("Checkpoint %+v, want b1's", cp)
	}
}
