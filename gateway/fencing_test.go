package gateway_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/verify"
)

// takeover waits until name's lease has expired and has owner take it on
// replica to, returning the new token.
func (b *testBundle) takeover(t *testing.T, to *replica, name, owner string) int64 {
	t.Helper()
	b.waitExpired(t, name)
	return to.mustAcquire(t, name, owner, 30*time.Second)
}

// dataOf counts the data records (not barriers) of token in recs.
func dataOf(recs []verify.Record, token int64) int {
	n := 0
	for _, r := range recs {
		if !r.Barrier && r.Token == token {
			n++
		}
	}
	return n
}

// pausedThroughTakeover pauses a produce of replica A (frozen: its clock
// stops, so no local deadline saves us) at hook, lets the lease expire and
// a new owner take it on replica B, then resumes A. The broker, not a
// check, must refuse A's transaction: none of its records committed, while
// B's batches stand. The answer is want: fenced when A's transaction never
// asked to commit, generation_ended once it did (a fenced commit is not a
// definite "not written": a retried EndTxn can be fenced after the first
// one committed).
func pausedThroughTakeover(t *testing.T, hook gateway.Hook, lease, want string) {
	b := setup(t)
	gate := newGate(hook, lease)
	a := b.newReplica(hooks(gate))
	bb := b.newReplica(nil)
	old := a.mustAcquire(t, lease, "indexer-17", 2*time.Second)
	a.clock.freeze()
	done := make(chan reply, 1)
	go func() { done <- a.produce(t, lease, "indexer-17", old, "frozen", 10) }()
	gate.wait(t)
	log := &ackLog{}
	fresh := b.takeover(t, bb, lease, "indexer-04")
	b.mustProduce(t, bb, log, lease, "indexer-04", fresh, "new-owner", 3)
	gate.open()
	rep := <-done
	if rep.status != http.StatusConflict || rep.code() != want {
		t.Fatalf("paused produce of the old owner: %d %s, want 409 %s", rep.status, rep.raw, want)
	}
	b.mustProduce(t, bb, log, lease, "indexer-04", fresh, "after", 1)
	recs := b.checkInvariants(t, lease, log)
	if n := dataOf(recs, old); n != 0 {
		t.Fatalf("%d records of the old owner's transaction are committed", n)
	}
}

// TestFM01_FrozenOwnerCommitFenced: the old session's commit is held with
// its records already sent to the open transaction.
func TestFM01_FrozenOwnerCommitFenced(t *testing.T) {
	t.Parallel()
	pausedThroughTakeover(t, gateway.HookBeforeCommit, "shard:1", "generation_ended")
}

// TestFM02_PauseBetweenCheckAndCommit: a produce passes the session check
// and pauses before its transaction begins; the lease moves; it resumes.
func TestFM02_PauseBetweenCheckAndCommit(t *testing.T) {
	t.Parallel()
	pausedThroughTakeover(t, gateway.HookAdmitted, "shard:2", "fenced")
}

// TestFM07_NoRecreationAfterFence: once fenced, the old token's produce is
// refused without any producer being created or any transaction started.
func TestFM07_NoRecreationAfterFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newReplica(nil)
	bb := b.newReplica(nil)
	old := a.mustAcquire(t, "shard:7", "w-old", 2*time.Second)
	a.clock.freeze()
	fresh := b.takeover(t, bb, "shard:7", "w-new")
	rep := a.produce(t, "shard:7", "w-old", old, "after-fence", 1)
	if rep.status != http.StatusConflict || rep.code() != "fenced" {
		t.Fatalf("first produce after the fence: %d %s, want 409 fenced", rep.status, rep.raw)
	}
	// Counting the requests that reach the broker needs kfake; on an
	// external cluster the refusals alone are checked.
	var txnRequests atomic.Int64
	for _, key := range []int16{kmsg.InitProducerID.Int16(), kmsg.AddPartitionsToTxn.Int16(), kmsg.Produce.Int16(), kmsg.EndTxn.Int16()} {
		if b.kafka.External() {
			break
		}
		b.kafka.Fake(t).ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			txnRequests.Add(1)
			return nil, nil, false
		})
	}
	for i := range 5 {
		rep := a.produce(t, "shard:7", "w-old", old, "again", 1+i)
		if rep.status != http.StatusConflict || rep.code() != "fenced" {
			t.Fatalf("produce %d after the fence: %d %s", i, rep.status, rep.raw)
		}
	}
	if n := txnRequests.Load(); n != 0 {
		t.Fatalf("refused produces sent %d transactional requests to Kafka", n)
	}
	log := &ackLog{}
	b.mustProduce(t, bb, log, "shard:7", "w-new", fresh, "new", 1)
	b.checkInvariants(t, "shard:7", log)
}
