package gateway_test

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
)

// failNextProduce answers the next Produce request with code instead of
// handling it.
func (b *testBundle) failNextProduce(code int16) *atomic.Int64 {
	var hits atomic.Int64
	b.kafka.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
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
	b.kafka = kafkatest.Start(t, topic, partitions, kfake.NumBrokers(3))
	gate := newGate(gateway.HookBeforeCommit, "shard:29")
	r := b.newReplica(hooks(gate))
	token := r.mustAcquire(t, "shard:29", "w1", 30*time.Second)
	before := b.kafka.CoordinatorFor("fencegate/test/shard:29")
	done := make(chan reply, 1)
	go func() { done <- r.produce(t, "shard:29", "w1", token, "moved", 4) }()
	gate.wait(t)
	for range 20 {
		b.kafka.RehashCoordinators()
		if b.kafka.CoordinatorFor("fencegate/test/shard:29") != before {
			break
		}
	}
	if b.kafka.CoordinatorFor("fencegate/test/shard:29") == before {
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
	b.kafka.ControlKey(kmsg.EndTxn.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.kafka.DropControl()
		if !taken.CompareAndSwap(false, true) {
			return nil, nil, false // a second EndTxn while the first sleeps
		}
		close(entered)
		b.kafka.SleepControl(func() { <-release })
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
	recs := b.checkInvariants(t, "shard:23", log)
	n := dataOf(recs, old)
	if oldRep.status == http.StatusOK && n != 4 || oldRep.status != http.StatusOK && n != 0 {
		t.Fatalf("old transaction: reply %d, %d of 4 records committed (want all if acked, none if not)", oldRep.status, n)
	}
}

// procCounts returns the process's OS thread and open file counts.
func procCounts(t *testing.T) (threads, fds int) {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc")
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return threads, len(ents)
}

// TestFM24_HandoverChurnLeaksNothing: 500 handovers leave the process's
// thread and file-descriptor counts at their baseline (every librdkafka
// instance is destroyed).
func TestFM24_HandoverChurnLeaksNothing(t *testing.T) {
	// Not parallel: it counts the whole process's threads and files.
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:24", "w1", 30*time.Second)
	log := &ackLog{}
	churn := func(n int) {
		for range n {
			rep := r.regenerate(t, "shard:24", "w1", token, 30*time.Second)
			if rep.status != http.StatusCreated {
				t.Fatalf("handover: %d %s", rep.status, rep.raw)
			}
			token = rep.int("token")
		}
		r.g.Idle()
	}
	churn(5)
	baseThreads, baseFDs := procCounts(t)
	churn(500)
	b.mustProduce(t, r, log, "shard:24", "w1", token, "last", 1)
	// One live producer remains in both measurements; Go may keep a few
	// idle OS threads it started for cgo calls.
	eventually(t, 30*time.Second, func() (bool, string) {
		threads, fds := procCounts(t)
		msg := fmt.Sprintf("threads %d (baseline %d), fds %d (baseline %d)", threads, baseThreads, fds, baseFDs)
		return threads <= baseThreads+4 && fds <= baseFDs+2, msg
	})
	b.checkInvariants(t, "shard:24", log)
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
