package gateway_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/verify"
)

// failNextProduce answers the next Produce request with code instead of
// handling it.
func (b *testBundle) failNextProduce(code int16) *atomic.Int64 {
	var hits atomic.Int64
	b.kafka.Fake(b.t).ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		hits.Add(1)
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &hits
}

// TestFM09_RetriableProduceErrorRetried: a retriable broker error mid-batch
// is retried by librdkafka; the batch commits whole.
func TestFM09_RetriableProduceErrorRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:9", "w1", 30*time.Second)
	hits := b.failNextProduce(kerr.NotLeaderForPartition.Code)
	log := &ackLog{}
	b.mustProduce(t, r, log, "shard:9", "w1", token, "retried", 10)
	if hits.Load() != 1 {
		t.Fatalf("injected failure hit %d times, want 1", hits.Load())
	}
	b.mustProduce(t, r, log, "shard:9", "w1", token, "next", 2)
	recs := b.checkInvariants(t, "shard:9", log)
	if dataOf(recs, token) != 12 {
		t.Fatalf("%d data records, want 12", dataOf(recs, token))
	}
}

// TestFM09_AbortableProduceErrorAbortsBatch: a permanent produce error
// aborts the transaction: nothing of the batch is visible and the reply
// says so. The injected reply makes librdkafka skip sequence numbers, and
// it recovers by bumping the epoch of the instance as it aborts a later
// transaction; the gateway sees the epoch move and ends the generation
// (generation_ended) rather than write under an epoch no barrier names.
// The worker takes a new generation and its retry lands.
func TestFM09_AbortableProduceErrorAbortsBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:19", "w1", 30*time.Second)
	log := &ackLog{}
	b.mustProduce(t, r, log, "shard:19", "w1", token, "before", 2)
	b.failNextProduce(kerr.MessageTooLarge.Code)
	rep := r.produce(t, "shard:19", "w1", token, "aborted", 5)
	if rep.status != http.StatusServiceUnavailable || rep.code() != "batch_aborted" {
		t.Fatalf("produce with a permanent broker error: %d %s", rep.status, rep.raw)
	}
	retryUntilCommitted(t, b, r, log, "shard:19", "w1", token, "aborted", 5)
	n := 0
	for _, rec := range b.checkInvariants(t, "shard:19", log) {
		if rec.Batch == "aborted" {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d committed records of batch \"aborted\", want 5 (aborted attempts invisible)", n)
	}
}

// retryUntilCommitted retries batch as a worker does: the same batch_id
// after batch_aborted, under a new generation after generation_ended. It
// returns the token that committed it.
func retryUntilCommitted(t *testing.T, b *testBundle, r *replica, log *ackLog, lease, owner string, token int64, batch string, n int) int64 {
	t.Helper()
	for attempt := 0; attempt < 4; attempt++ {
		rep := r.produce(t, lease, owner, token, batch, n)
		switch {
		case rep.status == http.StatusOK:
			b.mustProduceReplied(t, log, lease, token, batch, rep)
			return token
		case rep.code() == "generation_ended":
			g := r.regenerate(t, lease, owner, token, 30*time.Second)
			if g.status != http.StatusCreated {
				t.Fatalf("new generation after %s: %d %s", rep.raw, g.status, g.raw)
			}
			token = g.int("token")
		case rep.code() != "batch_aborted":
			t.Fatalf("retry %d: %d %s", attempt, rep.status, rep.raw)
		}
	}
	t.Fatalf("batch %s never committed", batch)
	return 0
}

// TestFM09_CoordinatorMovesMidBatch: the transaction coordinator moves to
// another broker between produce and commit; the commit finds it again.
func TestFM09_CoordinatorMovesMidBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.useKafka(kafkatest.Start(t, topic, partitions, kfake.NumBrokers(3)))
	fake := b.kafka.Fake(t)
	gate := newGate(gateway.HookBeforeCommit, "shard:29")
	r := b.newReplica(hooks(gate))
	token := r.mustAcquire(t, "shard:29", "w1", 30*time.Second)
	before := fake.CoordinatorFor(b.txnID("shard:29"))
	done := make(chan reply, 1)
	go func() { done <- r.produce(t, "shard:29", "w1", token, "moved", 4) }()
	gate.wait(t)
	for range 20 {
		fake.RehashCoordinators()
		if fake.CoordinatorFor(b.txnID("shard:29")) != before {
			break
		}
	}
	if fake.CoordinatorFor(b.txnID("shard:29")) == before {
		t.Fatal("coordinator did not move")
	}
	gate.open()
	rep := <-done
	if rep.status != http.StatusOK {
		t.Fatalf("commit after the coordinator moved: %d %s", rep.status, rep.raw)
	}
	log := &ackLog{}
	b.mustProduce(t, r, log, "shard:29", "w1", token, "after", 1)
	recs := b.checkInvariants(t, "shard:29", log)
	if dataOf(recs, token) != 5 {
		t.Fatalf("%d data records, want 5", dataOf(recs, token))
	}
}

// holdEndTxn holds the next EndTxn at the broker until release is closed.
func (b *testBundle) holdEndTxn() (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var taken atomic.Bool
	fake := b.kafka.Fake(b.t)
	fake.ControlKey(kmsg.EndTxn.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		fake.DropControl()
		if !taken.CompareAndSwap(false, true) {
			return nil, nil, false // a second EndTxn while the first sleeps
		}
		close(entered)
		fake.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return entered, release
}

// TestFM22_DelayedEndTxnEndsGeneration: a commit whose outcome is unknown
// (EndTxn held past the client timeout) ends the session; the worker takes
// a new generation and retries the same batch_id; the late EndTxn cannot
// touch the new generation.
func TestFM22_DelayedEndTxnEndsGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) { c.CommitTimeout = time.Second })
	token := r.mustAcquire(t, "shard:22", "w1", 30*time.Second)
	log := &ackLog{}
	b.mustProduce(t, r, log, "shard:22", "w1", token, "first", 2)
	entered, release := b.holdEndTxn()
	rep := r.produce(t, "shard:22", "w1", token, "ambiguous", 3)
	<-entered
	if rep.status != http.StatusConflict || rep.code() != "generation_ended" {
		t.Fatalf("commit past the client timeout: %d %s, want 409 generation_ended", rep.status, rep.raw)
	}
	if rep := r.produce(t, "shard:22", "w1", token, "ambiguous", 3); rep.status != http.StatusConflict {
		t.Fatalf("the ended generation accepted a batch: %d %s", rep.status, rep.raw)
	}
	rep = r.regenerate(t, "shard:22", "w1", token, 30*time.Second)
	if rep.status != http.StatusCreated {
		t.Fatalf("new generation: %d %s", rep.status, rep.raw)
	}
	next := rep.int("token")
	b.mustProduce(t, r, log, "shard:22", "w1", next, "ambiguous", 3)
	close(release) // the delayed EndTxn reaches the coordinator now
	b.mustProduce(t, r, log, "shard:22", "w1", next, "later", 3)
	recs := b.checkInvariants(t, "shard:22", log)
	if n := dataOf(recs, next); n != 6 {
		t.Fatalf("new generation holds %d records, want 6", n)
	}
}

// TestFM23_TakeoverWhileCommitHeld: a new owner takes over while the old
// owner's EndTxn is held at the broker. The old transaction is wholly
// before the new barrier or wholly absent; the new owner is acknowledged.
func TestFM23_TakeoverWhileCommitHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newReplica(nil)
	bb := b.newReplica(nil)
	old := a.mustAcquire(t, "shard:23", "w-old", 2*time.Second)
	a.clock.freeze()
	entered, release := b.holdEndTxn()
	done := make(chan reply, 1)
	go func() { done <- a.produce(t, "shard:23", "w-old", old, "held", 4) }()
	<-entered
	b.waitExpired(t, "shard:23")
	acq := make(chan reply, 1)
	go func() { acq <- bb.acquire(t, "shard:23", "w-new", 30*time.Second) }()
	var rep reply
	select {
	case rep = <-acq:
	case <-time.After(20 * time.Second):
		close(release)
		rep = <-acq
	}
	close(release)
	if rep.status != http.StatusCreated {
		t.Fatalf("takeover while a commit is held: %d %s", rep.status, rep.raw)
	}
	fresh := rep.int("token")
	oldRep := <-done
	log := &ackLog{}
	b.mustProduce(t, bb, log, "shard:23", "w-new", fresh, "new", 2)
	// checkInvariants also reads the whole log with its markers: an old
	// commit that lands must have its marker before the new barrier.
	recs := b.checkInvariants(t, "shard:23", log)
	n := dataOf(recs, old)
	switch {
	case oldRep.status != http.StatusOK && oldRep.code() != "generation_ended":
		t.Fatalf("a batch whose commit was in flight was answered %d %s; want 200 or generation_ended", oldRep.status, oldRep.raw)
	case oldRep.status == http.StatusOK && n != 4, n != 0 && n != 4:
		t.Fatalf("old transaction: reply %d %s, %d of 4 records committed (all if acked; all or none otherwise)", oldRep.status, oldRep.raw, n)
	}
	for _, r := range recs {
		if r.Barrier && r.Token == fresh && lastOldOffset(recs, old) > r.Offset {
			t.Fatalf("a record of token %d follows the barrier of token %d at %d", old, fresh, r.Offset)
		}
	}
}

// lastOldOffset is the offset of the last data record of token in recs
// (-1: none).
func lastOldOffset(recs []verify.Record, token int64) int64 {
	last := int64(-1)
	for _, r := range recs {
		if !r.Barrier && r.Token == token {
			last = r.Offset
		}
	}
	return last
}

// procCounts returns the process's librdkafka threads (named "rdk:...";
// every producer instance runs several) and open files.
func procCounts(t *testing.T) (rdkThreads, fds int) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip("no /proc")
	}
	for _, task := range tasks {
		comm, err := os.ReadFile("/proc/self/task/" + task.Name() + "/comm")
		if err == nil && strings.HasPrefix(string(comm), "rdk:") {
			rdkThreads++
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return rdkThreads, len(ents)
}

// TestFM24_ProducerChurnLeaksNothing: every path that ends a producer
// instance destroys it: 200 handovers, 20 failed handovers (the broker
// refuses InitProducerId), 10 fenced sessions and 20 sessions ended by
// the reaper. Afterwards the process runs exactly as many librdkafka
// threads as before (one leaked instance adds several) and no more files.
func TestFM24_ProducerChurnLeaksNothing(t *testing.T) {
	// Not parallel: it counts the whole process's threads and files.
	b := setup(t)
	r := b.newReplica(nil)
	other := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:24", "w1", 30*time.Second)
	churn := churner{t: t, b: b, r: r, other: other, token: token}
	churn.all(1)
	r.g.Idle()
	other.g.Idle()
	baseThreads, baseFDs := procCounts(t)
	churn.all(10)
	log := &ackLog{}
	b.mustProduce(t, r, log, "shard:24", "w1", churn.token, "last", 1)
	eventually(t, 30*time.Second, func() (bool, string) {
		r.g.Idle()
		other.g.Idle()
		threads, fds := procCounts(t)
		msg := fmt.Sprintf("librdkafka threads %d (baseline %d), fds %d (baseline %d)", threads, baseThreads, fds, baseFDs)
		return threads == baseThreads && fds <= baseFDs+2, msg
	})
	b.checkInvariants(t, "shard:24", log)
}

// churner drives each path that ends a producer instance.
type churner struct {
	t        *testing.T
	b        *testBundle
	r, other *replica
	token    int64
	n        int
}

// all runs k rounds: 20 handovers, 2 failed handovers, 1 fenced session
// and 2 reaped sessions per round.
func (c *churner) all(k int) {
	for range k {
		c.handovers(20)
		c.failedHandovers(2)
		c.fenced()
		c.reaped(2)
	}
}

func (c *churner) handovers(n int) {
	for range n {
		rep := c.r.regenerate(c.t, "shard:24", "w1", c.token, 30*time.Second)
		if rep.status != http.StatusCreated {
			c.t.Fatalf("handover: %d %s", rep.status, rep.raw)
		}
		c.token = rep.int("token")
	}
}

// failedHandovers has the broker refuse InitProducerId, so the handover
// fails after its producer was created.
func (c *churner) failedHandovers(n int) {
	var refusing atomic.Bool
	refusing.Store(true)
	fake := c.b.kafka.Fake(c.t)
	fake.ControlKey(kmsg.InitProducerID.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !refusing.Load() {
			return nil, nil, false // the control drops itself
		}
		fake.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
	defer refusing.Store(false)
	for range n {
		c.n++
		if rep := c.r.acquire(c.t, fmt.Sprintf("shard:24%d", c.n), "w1", 30*time.Second); rep.status == http.StatusCreated {
			c.t.Fatalf("handover acknowledged although the broker refused InitProducerId: %s", rep.raw)
		}
	}
}

// fenced has a session fenced by a new generation on another replica (the
// owner moves the lease with its token), then used with the old token.
func (c *churner) fenced() {
	c.n++
	lease := fmt.Sprintf("shard:24%d", c.n)
	old := c.other.mustAcquire(c.t, lease, "w1", 30*time.Second)
	moved := c.r.regenerate(c.t, lease, "w1", old, 30*time.Second)
	if moved.status != http.StatusCreated {
		c.t.Fatalf("moving the lease: %d %s", moved.status, moved.raw)
	}
	if rep := c.other.produce(c.t, lease, "w1", old, "zombie", 1); rep.code() != "fenced" {
		c.t.Fatalf("the old replica's produce after the move: %d %s", rep.status, rep.raw)
	}
	if rep := c.r.do(c.t, "DELETE", fmt.Sprintf("/v1/leases/%s?owner_id=w1&token=%d", lease, moved.int("token")), nil); rep.status != http.StatusNoContent {
		c.t.Fatalf("release: %d %s", rep.status, rep.raw)
	}
}

// reaped has sessions end at their local deadline.
func (c *churner) reaped(n int) {
	for range n {
		c.n++
		c.other.mustAcquire(c.t, fmt.Sprintf("shard:24%d", c.n), "w1", 30*time.Second)
		c.other.clock.advance(time.Hour)
		eventually(c.t, 30*time.Second, func() (bool, string) {
			n := c.other.g.Sessions()
			return n == 0, fmt.Sprintf("%d live sessions on the reaped replica", n)
		})
	}
}

// TestFM28_EpochBumpingErrorsEndGeneration: the broker answers a produce
// with an error from which librdkafka recovers by bumping the epoch of the
// same instance (KIP-360). The generation ends (generation_ended) instead
// of aborting and going on, and every committed data record comes from the
// producer id and epoch its barrier names (checkInvariants reads the whole
// log with its markers).
//
// Where kfake is looser than Apache Kafka: it accepts a stale epoch when a
// producer re-initialises, and it aborts an ongoing transaction inline on
// InitProducerId instead of answering CONCURRENT_TRANSACTIONS; neither
// matters here, where the errors are injected, not provoked.
func TestFM28_EpochBumpingErrorsEndGeneration(t *testing.T) {
	t.Parallel()
	for _, code := range []int16{kerr.UnknownProducerID.Code, kerr.OutOfOrderSequenceNumber.Code, kerr.InvalidProducerIDMapping.Code} {
		t.Run(kerr.ErrorForCode(code).(*kerr.Error).Message, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			r := b.newReplica(nil)
			lease := "shard:28"
			token := r.mustAcquire(t, lease, "w1", 30*time.Second)
			log := &ackLog{}
			b.mustProduce(t, r, log, lease, "w1", token, "before", 2)
			b.failNextProduce(code)
			rep := r.produce(t, lease, "w1", token, "bumped", 3)
			if rep.code() != "generation_ended" && rep.code() != "batch_aborted" {
				t.Fatalf("produce answered %s: %d %s, want generation_ended (or batch_aborted with the epoch unmoved)", kerr.ErrorForCode(code), rep.status, rep.raw)
			}
			retryUntilCommitted(t, b, r, log, lease, "w1", token, "bumped", 3)
			b.checkInvariants(t, lease, log)
		})
	}
}

// failNextAddPartitions answers the next AddPartitionsToTxn request with
// code for every partition it names.
func (b *testBundle) failNextAddPartitions(code int16) *atomic.Int64 {
	var hits atomic.Int64
	b.kafka.Fake(b.t).ControlKey(kmsg.AddPartitionsToTxn.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		hits.Add(1)
		r := req.(*kmsg.AddPartitionsToTxnRequest)
		resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewAddPartitionsToTxnResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				sp.Partition = p
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &hits
}

// TestFM37_FatalErrorIsNotAFence: a fatal producer error that is not a
// fence (the broker refuses the transactional id's authorisation) ends the
// generation as generation_ended with its cause, never fenced: fenced tells
// the worker that a later generation exists, and it would stop working on
// a lease that is still its own. The worker's new generation commits.
func TestFM37_FatalErrorIsNotAFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	lease := "shard:37"
	token := r.mustAcquire(t, lease, "w1", 30*time.Second)
	log := &ackLog{}
	b.mustProduce(t, r, log, lease, "w1", token, "before", 1)
	hits := b.failNextAddPartitions(kerr.TransactionalIDAuthorizationFailed.Code)
	rep := r.produce(t, lease, "w1", token, "refused", 2)
	if hits.Load() != 1 {
		t.Fatalf("injected failure hit %d times, want 1", hits.Load())
	}
	if rep.code() != "generation_ended" || rep.body["cause"] != "fatal" {
		t.Fatalf("produce after a fatal authorisation error: %d %s, want generation_ended with cause fatal", rep.status, rep.raw)
	}
	if rep := r.produce(t, lease, "w1", token, "next", 1); rep.code() != "generation_ended" {
		t.Fatalf("the ended generation's next batch: %d %s", rep.status, rep.raw)
	}
	retryUntilCommitted(t, b, r, log, lease, "w1", token, "refused", 2)
	b.checkInvariants(t, lease, log)
}
