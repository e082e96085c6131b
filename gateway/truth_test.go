package gateway_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/verify"
)

// ender ends a replica's session of lease while a produce is paused after
// CommitTransaction returned, and reports once the session has ended. It
// returns a func to call after the produce answered (to finish a call the
// ending started).
type ender func(t *testing.T, b *testBundle, r *replica, lease, owner string, token int64) (finish func())

// sessionEnded waits until r has no live session left.
func sessionEnded(t *testing.T, r *replica) {
	t.Helper()
	eventually(t, 30*time.Second, func() (bool, string) {
		n := r.g.Sessions()
		return n == 0, fmt.Sprintf("%d live sessions", n)
	})
}

var enders = map[string]ender{
	"reaper": func(t *testing.T, b *testBundle, r *replica, lease, owner string, token int64) func() {
		r.clock.frozen.Store(nil)
		r.clock.advance(time.Hour) // the local deadline passes; the reaper ends the session
		sessionEnded(t, r)
		return func() {}
	},
	"takeover on the same replica": func(t *testing.T, b *testBundle, r *replica, lease, owner string, token int64) func() {
		b.waitExpired(t, lease)
		acq := make(chan reply, 1)
		go func() { acq <- r.acquire(t, lease, "w-new", 30*time.Second) }()
		eventually(t, 30*time.Second, func() (bool, string) {
			l, err := b.store.Get(b.ctx, lease)
			return err == nil && l.Token > token, fmt.Sprintf("lease row %+v (%v)", l, err)
		})
		return func() {
			if rep := <-acq; rep.status != http.StatusCreated {
				t.Errorf("takeover: %d %s", rep.status, rep.raw)
			}
		}
	},
	"release": func(t *testing.T, b *testBundle, r *replica, lease, owner string, token int64) func() {
		rel := make(chan reply, 1)
		go func() {
			rel <- r.do(t, "DELETE", fmt.Sprintf("/v1/leases/%s?owner_id=%s&token=%d", lease, owner, token), nil)
		}()
		sessionEnded(t, r)
		return func() {
			if rep := <-rel; rep.status != http.StatusNoContent {
				t.Errorf("release: %d %s", rep.status, rep.raw)
			}
		}
	},
	"shutdown": func(t *testing.T, b *testBundle, r *replica, lease, owner string, token int64) func() {
		closed := make(chan struct{})
		go func() { r.g.Close(); close(closed) }()
		sessionEnded(t, r)
		return func() { <-closed }
	},
}

// TestFM25_SessionEndedWhileCommitInFlight: whatever ends a session while
// its batch's CommitTransaction is in flight (reaper, takeover on the same
// replica, release, shutdown), the batch is answered 200 or
// generation_ended, never a definite refusal. In the "answer lost" cases
// the broker holds EndTxn past the client's commit timeout and then
// applies it: the batch is committed although the client saw an error,
// so a definite answer would say "not written" of a batch that landed.
// The topic is read back to compare every answer with what is there.
func TestFM25_SessionEndedWhileCommitInFlight(t *testing.T) {
	t.Parallel()
	for name, end := range enders {
		for _, lost := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/commit answer lost %v", name, lost), func(t *testing.T) {
				t.Parallel()
				commitEndedMidway(t, end, lost)
			})
		}
	}
}

func commitEndedMidway(t *testing.T, end ender, lost bool) {
	const lease, owner = "shard:25", "w1"
	b := setup(t)
	gate := newGate(gateway.HookCommitReturned, lease)
	r := b.newReplica(func(c *gateway.Config) {
		c.Hooks.Fn = gate.fn
		c.CommitTimeout = 500 * time.Millisecond
	})
	token := r.mustAcquire(t, lease, owner, 2*time.Second)
	r.clock.freeze() // only the ender ends the session
	var release chan struct{}
	if lost {
		_, release = b.holdEndTxn()
	}
	done := make(chan reply, 1)
	go func() { done <- r.produce(t, lease, owner, token, "midway", 3) }()
	gate.wait(t)
	if lost {
		close(release) // the held EndTxn reaches the coordinator and commits
		eventually(t, 30*time.Second, func() (bool, string) {
			n := batchRecords(b.read(t, lease), "midway")
			return n == 3, fmt.Sprintf("%d of 3 records of the held commit visible", n)
		})
	}
	finish := end(t, b, r, lease, owner, token)
	gate.open()
	rep := <-done
	finish()
	committed := batchRecords(b.read(t, lease), "midway")
	switch {
	case rep.status == http.StatusOK && committed != 3:
		t.Fatalf("answered 200 but %d of 3 records committed", committed)
	case rep.status == http.StatusOK:
	case rep.code() != "generation_ended":
		t.Fatalf("a batch whose commit was in flight was answered %d %s (%d of 3 records committed); want 200 or generation_ended",
			rep.status, rep.raw, committed)
	}
	if !lost && rep.status != http.StatusOK {
		t.Fatalf("a commit that succeeded was answered %d %s", rep.status, rep.raw)
	}
}

// batchRecords counts the committed data records of batch.
func batchRecords(recs []verify.Record, batch string) int {
	n := 0
	for _, r := range recs {
		if !r.Barrier && r.Batch == batch {
			n++
		}
	}
	return n
}

// TestFM27_ReleaseAtNonHolderMisdirected: a release sent to a replica
// without the session answers 421 with the holder's address and leaves
// Postgres alone, so the holder's session is never left writing a lease
// the database calls released. At the holder, the release ends the
// session, closes its producer and only then releases the row.
func TestFM27_ReleaseAtNonHolderMisdirected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Heartbeats every 2 s (fresh for 6 s): a heartbeat delayed by a loaded
	// machine must not make the live holder look gone, which would
	// rightly let the other replica release the row.
	holder := b.newReplica(slowBeat)
	other := b.newReplica(slowBeat)
	token := holder.mustAcquire(t, "shard:27", "w1", 30*time.Second)
	path := fmt.Sprintf("/v1/leases/shard:27?owner_id=w1&token=%d", token)
	rep := other.do(t, "DELETE", path, nil)
	if rep.status != http.StatusMisdirectedRequest || rep.body["holder_url"] != holder.srv.URL {
		t.Fatalf("release at the non-holder: %d %s, want 421 with holder_url %s", rep.status, rep.raw, holder.srv.URL)
	}
	if l, err := b.store.Get(b.ctx, "shard:27"); err != nil || l.State != "active" || !l.Live() {
		t.Fatalf("the misdirected release changed the lease row: %+v %v", l, err)
	}
	log := &ackLog{}
	b.mustProduce(t, holder, log, "shard:27", "w1", token, "still-held", 2)
	if rep := holder.do(t, "DELETE", path, nil); rep.status != http.StatusNoContent {
		t.Fatalf("release at the holder: %d %s", rep.status, rep.raw)
	}
	if l, err := b.store.Get(b.ctx, "shard:27"); err != nil || l.State != "released" {
		t.Fatalf("lease row after release: %+v %v", l, err)
	}
	if n := holder.g.Sessions(); n != 0 {
		t.Fatalf("%d live sessions on the holder after release", n)
	}
	if rep := holder.produce(t, "shard:27", "w1", token, "after-release", 1); rep.status != http.StatusConflict {
		t.Fatalf("produce after release: %d %s", rep.status, rep.raw)
	}
	recs := b.checkInvariants(t, "shard:27", log)
	if n := batchRecords(recs, "after-release"); n != 0 {
		t.Fatalf("%d records written after the release", n)
	}
}

// TestRetriedBatchIDAnsweredWithOriginalOffsets: within one generation a
// retried batch_id (the worker lost the 200) gets the original offsets
// and writes nothing; a retry with another record count is refused.
func TestRetriedBatchIDAnsweredWithOriginalOffsets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:31", "w1", 30*time.Second)
	log := &ackLog{}
	first := r.produce(t, "shard:31", "w1", token, "b-1", 3)
	b.mustProduceReplied(t, log, "shard:31", token, "b-1", first)
	again := r.produce(t, "shard:31", "w1", token, "b-1", 3)
	if again.status != http.StatusOK || string(again.raw) != string(first.raw) {
		t.Fatalf("retry of b-1: %d %s, want the original answer %s", again.status, again.raw, first.raw)
	}
	if rep := r.produce(t, "shard:31", "w1", token, "b-1", 4); rep.status != http.StatusBadRequest || rep.code() != "invalid_request" {
		t.Fatalf("b-1 reused with another size: %d %s", rep.status, rep.raw)
	}
	recs := b.checkInvariants(t, "shard:31", log)
	if n := batchRecords(recs, "b-1"); n != 3 {
		t.Fatalf("b-1 is %d times in the log, want 3 records once", n)
	}
}
