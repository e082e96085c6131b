package gateway_test

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

// answer is what a worker was told about one batch of one generation.
type answer struct {
	batch   string
	token   int64
	status  int
	code    string
	offsets []int64 // a 200's
}

// truthful fails t for every finding of the history checker
// (verify.CheckHistory) on the lease's partition: a 200 whose batch is not
// committed at its offsets, a definite refusal whose batch is (the answer
// table, client.ProduceOutcome), an aborted read, a duplicate within one
// generation, a delayed commit. It logs the history's summary and returns
// the answers by kind.
func (b *testBundle) truthful(t *testing.T, name string, read []verify.Record, answers []answer) map[client.Outcome]int {
	t.Helper()
	log, err := verify.ReadLog(b.kafka.Conn, b.kafka.Topic, b.partitionOf(name), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[client.Outcome]int{}
	var ops []verify.Op
	for _, a := range answers {
		kind := client.ProduceOutcome(a.status, a.code)
		kinds[kind]++
		ops = append(ops, verify.Op{Lease: name, Token: a.token, BatchID: a.batch, Answer: historyAnswer[kind], Offsets: a.offsets})
	}
	h := verify.CheckHistory(log, read, ops)
	for _, v := range h.Violations() {
		t.Errorf("history: %v", v)
	}
	t.Logf("history: %s", h)
	return kinds
}

// historyAnswer maps the SDK's answer table onto the history checker's.
var historyAnswer = map[client.Outcome]verify.Answer{client.OutcomeCommitted: verify.AnswerCommitted,
	client.OutcomeRefused: verify.AnswerRefused, client.OutcomeUnknown: verify.AnswerUnknown}

// faultedWorker writes batches to one lease through r the way the answer
// table says: the same batch id after an unknown outcome, a new generation
// after generation_ended or not_holder. It records every answer.
type faultedWorker struct {
	t       *testing.T
	b       *testBundle
	r       *replica
	name    string
	token   int64
	answers []answer
	log     *ackLog
}

// write sends batch until it is committed or the lease is lost; it
// returns whether it was committed.
func (w *faultedWorker) write(batch string) bool {
	for range 20 {
		rep := w.r.produce(w.t, w.name, "w1", w.token, batch, 2)
		a := answer{batch: batch, token: w.token, status: rep.status, code: rep.code()}
		switch {
		case rep.status == http.StatusOK:
			w.b.mustProduceReplied(w.t, w.log, w.name, w.token, batch, rep)
			a.offsets = w.log.acked[len(w.log.acked)-1].Offsets
			w.answers = append(w.answers, a)
			return true
		}
		w.answers = append(w.answers, a)
		switch rep.code() {
		case "generation_ended", "not_holder":
			w.regenerate()
		case "lease_lost", "fenced":
			return false
		}
	}
	w.t.Fatalf("batch %s not committed after 20 attempts: %+v", batch, w.answers[len(w.answers)-1])
	return false
}

// regenerate asks for a new generation until one is granted; when its
// token is no longer the lease's (a failed handover left a grant of its
// own behind), it re-acquires without one, as docs/api.md says.
func (w *faultedWorker) regenerate() {
	eventually(w.t, 60*time.Second, func() (bool, string) {
		rep := w.r.regenerate(w.t, w.name, "w1", w.token, 30*time.Second)
		if rep.code() == "lease_lost" {
			rep = w.r.acquire(w.t, w.name, "w1", 30*time.Second)
		}
		if rep.status == http.StatusCreated {
			w.token = rep.int("token")
		}
		return rep.status == http.StatusCreated, string(rep.raw)
	})
}

// proxiedBroker is a bundle whose broker is reached through fault proxies.
func proxiedBroker(t *testing.T) (*testBundle, *netfault.Links) {
	b := setup(t)
	k, links := kafkatest.StartProxied(t, topic, partitions)
	b.useKafka(k)
	return b, links
}

// brokerFaultAtCommit is faultAtCommit on a bundle whose broker links
// are proxied, fault applied to each link.
func brokerFaultAtCommit(t *testing.T, fault func(*netfault.Link) func()) (*testBundle, *faultedWorker, answer) {
	b, links := proxiedBroker(t)
	w, a := faultAtCommit(t, b, "shard:60", func() func() { return links.Each(fault) })
	return b, w, a
}

// faultAtCommit writes one batch of lease, pauses the next after its
// records are delivered, applies fault, lets the commit run into it, and
// heals (fault's return) once the batch is answered. It returns the
// worker and that answer.
func faultAtCommit(t *testing.T, b *testBundle, lease string, fault func() (heal func())) (*faultedWorker, answer) {
	g := newGate(gateway.HookBeforeCommit, lease)
	g.armed.Store(false)
	defer g.open()
	r := b.newReplica(hooks(g))
	w := &faultedWorker{t: t, b: b, r: r, name: lease, log: &ackLog{}}
	w.token = r.mustAcquire(t, w.name, "w1", 30*time.Second)
	w.write("b0")
	g.armed.Store(true)
	answered := make(chan reply, 1)
	go func() { answered <- r.produce(t, w.name, "w1", w.token, "b1", 2) }()
	g.wait(t)
	heal := fault()
	g.open()
	rep := <-answered
	heal()
	a := answer{batch: "b1", token: w.token, status: rep.status, code: rep.code()}
	w.answers = append(w.answers, a)
	return w, a
}

// recovers asserts that a (the answer of a batch caught by a fault at its
// commit) is outcome unknown, then has the worker take a new generation,
// write b1 and b2, and checks every answer against the log, which it
// returns.
func (w *faultedWorker) recovers(a answer, fault string) []verify.Record {
	w.t.Helper()
	if got := client.ProduceOutcome(a.status, a.code); got != client.OutcomeUnknown {
		w.t.Fatalf("a commit into %s answered %d %s (%s), want outcome unknown", fault, a.status, a.code, got)
	}
	w.regenerate()
	w.write("b1")
	w.write("b2")
	recs := w.b.checkInvariants(w.t, w.name, w.log)
	w.b.truthful(w.t, w.name, recs, w.answers)
	return recs
}

// TestFM60_BrokerPartitionedAtCommit: the broker's link drops every byte
// (no reset) between a batch's records and its commit. The answer is
// outcome unknown (the commit's reply cannot come), never 200 and never a
// definite refusal; once the link heals the worker's next generation
// commits the batch, and the log agrees with every answer.
func TestFM60_BrokerPartitionedAtCommit(t *testing.T) {
	t.Parallel()
	_, w, a := brokerFaultAtCommit(t, func(l *netfault.Link) func() { return l.Blackhole(netfault.Both) })
	w.recovers(a, "a partitioned broker")
}

// TestFM61_BrokerRepliesLostAtCommit: the link is half-open, requests
// reach the broker and its replies are dropped: the commit is applied and
// the gateway cannot know. The answer must be outcome unknown; the log
// then holds the batch under the answered token, which a definite refusal
// would have denied.
func TestFM61_BrokerRepliesLostAtCommit(t *testing.T) {
	t.Parallel()
	_, w, a := brokerFaultAtCommit(t, func(l *netfault.Link) func() { return l.Blackhole(netfault.Downstream) })
	recs := w.recovers(a, "a broker whose replies were lost")
	t.Logf("batch b1 of the lost reply in the log: %v", batchRecords(recs, "b1") > 2)
}

// TestFM62_ResetsAndSlowLinkStayTruthful: batches written while the
// broker's link adds 50±25 ms each way and is reset at random moments:
// every answer agrees with the log, every acknowledged batch is there in
// order, and the worker gets through every batch.
func TestFM62_ResetsAndSlowLinkStayTruthful(t *testing.T) {
	t.Parallel()
	b, links := proxiedBroker(t)
	r := b.newReplica(nil)
	w := &faultedWorker{t: t, b: b, r: r, name: "shard:62", log: &ackLog{}}
	w.token = r.mustAcquire(t, w.name, "w1", 30*time.Second)
	slow := links.Each(func(l *netfault.Link) func() {
		return l.Latency(netfault.Both, 50*time.Millisecond, 25*time.Millisecond)
	})
	defer slow()
	for i := range 12 {
		if i%3 == 1 {
			undo := links.Each(func(l *netfault.Link) func() { return l.Reset() })
			time.AfterFunc(150*time.Millisecond, undo)
		}
		if !w.write("b" + itoa(int64(i))) {
			t.Fatalf("lease lost at batch %d: %+v", i, w.answers[len(w.answers)-1])
		}
	}
	slow()
	kinds := b.truthful(t, w.name, b.checkInvariants(t, w.name, w.log), w.answers)
	t.Logf("answers: %d committed, %d unknown, %d definite refusals", kinds[client.OutcomeCommitted], kinds[client.OutcomeUnknown], kinds[client.OutcomeRefused])
}

// proxiedStore is a lease store over a pool reached through a fault proxy.
func proxiedStore(t *testing.T, b *testBundle) (*leasestore.Store, *netfault.Link) {
	t.Helper()
	pool, link := pgtest.Proxied(t, b.db)
	store, err := leasestore.New(pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		t.Fatal(err)
	}
	return store, link
}

// TestFM63_PostgresPartitionFailsClosedInTime: with the lease store's link
// dropping every byte, a renewal is answered 503 store_unavailable by the
// session's local deadline (it cannot keep the session alive past it) and
// an acquire by its handover budget, instead of hanging with the link;
// batches commit until the local deadline and are refused after it; once
// the link heals, the lease is taken again.
func TestFM63_PostgresPartitionFailsClosedInTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store, link := proxiedStore(t, b)
	r := b.newReplicaOn(store, nil)
	const ttl = 3 * time.Second
	w := &faultedWorker{t: t, b: b, r: r, name: "shard:63", log: &ackLog{}}
	w.token = r.mustAcquire(t, w.name, "w1", ttl)
	heal := link.Blackhole(netfault.Both)
	w.write("during")
	start := time.Now()
	rep := r.do(t, "PATCH", "/v1/leases/shard:63", map[string]any{"owner_id": "w1", "token": w.token, "ttl_ms": ttl.Milliseconds()})
	if took := time.Since(start); rep.code() != "store_unavailable" || took > ttl+time.Second {
		t.Fatalf("renewal over a partitioned store: %d %s after %s, want 503 store_unavailable within the local deadline (%s)", rep.status, rep.raw, took, ttl)
	}
	start = time.Now()
	rep = r.acquire(t, "shard:64", "w2", ttl)
	if took := time.Since(start); rep.code() != "store_unavailable" || took > ttl {
		t.Fatalf("acquire over a partitioned store: %d %s after %s, want 503 store_unavailable within the handover budget", rep.status, rep.raw, took)
	}
	eventually(t, 10*time.Second, func() (bool, string) {
		return r.g.Sessions() == 0, fmt.Sprintf("%d sessions", r.g.Sessions())
	})
	rep = r.produce(t, w.name, "w1", w.token, "after", 1)
	if rep.status == http.StatusOK {
		t.Fatalf("a batch past the local deadline was committed: %s", rep.raw)
	}
	w.answers = append(w.answers, answer{batch: "after", token: w.token, status: rep.status, code: rep.code()})
	heal()
	eventually(t, 30*time.Second, func() (bool, string) {
		rep = r.acquire(t, w.name, "w1", 30*time.Second)
		return rep.status == http.StatusCreated, string(rep.raw)
	})
	recs := b.checkInvariants(t, w.name, w.log)
	b.truthful(t, w.name, recs, w.answers)
	if n := batchRecords(recs, "after"); n != 0 {
		t.Fatalf("%d records of the batch sent past the local deadline are in the log", n)
	}
}

// TestFM64_BrokerErrorsStayTruthful: the broker answers a request of the
// batch path with an error (kfake's Fault API), twice: a coordinator that
// moved or is loading, a transaction still ending, a partition short of
// replicas, and a timeout after the broker acted (the work is done, the
// answer says it may not be). The worker follows the answer table; every
// answer agrees with the log, every acknowledged batch is there once and
// in order.
func TestFM64_BrokerErrorsStayTruthful(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		key  kmsg.Key
		err  *kerr.Error
	}{
		{"EndTxn NOT_COORDINATOR", kmsg.EndTxn, kerr.NotCoordinator},
		{"EndTxn COORDINATOR_LOAD_IN_PROGRESS", kmsg.EndTxn, kerr.CoordinatorLoadInProgress},
		{"EndTxn REQUEST_TIMED_OUT after acting", kmsg.EndTxn, kerr.RequestTimedOut},
		{"AddPartitionsToTxn CONCURRENT_TRANSACTIONS", kmsg.AddPartitionsToTxn, kerr.ConcurrentTransactions},
		{"AddPartitionsToTxn NOT_COORDINATOR", kmsg.AddPartitionsToTxn, kerr.NotCoordinator},
		{"Produce NOT_ENOUGH_REPLICAS", kmsg.Produce, kerr.NotEnoughReplicas},
		{"Produce NOT_ENOUGH_REPLICAS_AFTER_APPEND", kmsg.Produce, kerr.NotEnoughReplicasAfterAppend},
		{"Produce REQUEST_TIMED_OUT after acting", kmsg.Produce, kerr.RequestTimedOut},
		{"InitProducerID COORDINATOR_LOAD_IN_PROGRESS", kmsg.InitProducerID, kerr.CoordinatorLoadInProgress},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			r := b.newReplica(nil)
			w := &faultedWorker{t: t, b: b, r: r, name: "shard:64", log: &ackLog{}}
			w.token = r.mustAcquire(t, w.name, "w1", 30*time.Second)
			w.write("b0")
			h := b.kafka.Fake(t).Fault(kfake.Fault{Keys: []kmsg.Key{c.key}, Err: c.err, Count: 2})
			defer h.Remove()
			if c.key == kmsg.InitProducerID {
				w.regenerate()
			}
			for _, batch := range []string{"b1", "b2", "b3"} {
				if !w.write(batch) {
					t.Fatalf("lease lost at %s: %+v", batch, w.answers[len(w.answers)-1])
				}
			}
			if h.Hits() == 0 {
				t.Fatalf("the fault never matched a request")
			}
			kinds := b.truthful(t, w.name, b.checkInvariants(t, w.name, w.log), w.answers)
			t.Logf("%d faulted requests; answers: %d committed, %d unknown, %d definite", h.Hits(),
				kinds[client.OutcomeCommitted], kinds[client.OutcomeUnknown], kinds[client.OutcomeRefused])
		})
	}
}

// TestFM65_LeadersAndCoordinatorsMoveUnderLoad: three brokers; while four
// leases write batches in turn, partition leaders are moved and shuffled
// and transaction coordinators re-hashed every 50 ms. Every answer agrees
// with the log and every acknowledged batch is in it once, in order.
func TestFM65_LeadersAndCoordinatorsMoveUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.useKafka(kafkatest.Start(t, topic, partitions, kfake.NumBrokers(3)))
	fake := b.kafka.Fake(t)
	r := b.newReplica(nil)
	var ws []*faultedWorker
	for i := range 4 {
		w := &faultedWorker{t: t, b: b, r: r, name: fmt.Sprintf("shard:%d", 65+i), log: &ackLog{}}
		w.token = r.mustAcquire(t, w.name, "w1", 30*time.Second)
		ws = append(ws, w)
	}
	stop := make(chan struct{})
	moved := make(chan int)
	go func() {
		n := 0
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				moved <- n
				return
			case <-tick.C:
			}
			n++
			for _, w := range ws {
				_ = fake.MoveTopicPartition(topic, b.partitionOf(w.name), int32(n%3))
			}
			fake.RehashCoordinators()
			if n%4 == 0 {
				fake.ShufflePartitionLeaders()
			}
		}
	}()
	for i := range 8 {
		for _, w := range ws {
			if !w.write("b" + itoa(int64(i))) {
				t.Fatalf("%s lost at batch %d: %+v", w.name, i, w.answers[len(w.answers)-1])
			}
		}
	}
	close(stop)
	t.Logf("%d rounds of moves", <-moved)
	for _, w := range ws {
		b.truthful(t, w.name, b.checkInvariants(t, w.name, w.log), w.answers)
	}
}

// TestFM66_BrokerRestartedMidTransaction: the broker is a process of its
// own persisting every write (kfakeserve --data-dir); it is stopped
// between a batch's records and its commit and started again on the same
// port and data. The batch is answered outcome unknown, never a definite
// refusal or a 200; the next generation's epoch bump aborts the open
// transaction before its barrier; every batch acknowledged before the
// restart is still in the log after it, and the worker's next generation
// commits the rest. (Killed with SIGKILL instead, kfake loses the open
// transaction: docs/testing.md, "Not modelled by the development
// broker".)
func TestFM66_BrokerRestartedMidTransaction(t *testing.T) {
	t.Parallel()
	b, p := brokerProcess(t)
	w, a := faultAtCommit(t, b, "shard:66", func() func() { p.Stop(); return p.Start })
	w.recovers(a, "a stopped broker")
}

// TestFM66_BrokerKilledBetweenBatches: the broker is killed with SIGKILL
// with no transaction open, a batch is sent while it is down, and it is
// started again on its data: every batch acknowledged before the crash is
// still in the log, the batch sent during the outage is answered
// truthfully, and the worker goes on.
func TestFM66_BrokerKilledBetweenBatches(t *testing.T) {
	t.Parallel()
	b, p := brokerProcess(t)
	r := b.newReplica(nil)
	w := &faultedWorker{t: t, b: b, r: r, name: "shard:67", log: &ackLog{}}
	w.token = r.mustAcquire(t, w.name, "w1", 30*time.Second)
	w.write("b0")
	w.write("b1")
	p.Kill()
	rep := r.produce(t, w.name, "w1", w.token, "b2", 2)
	w.answers = append(w.answers, answer{batch: "b2", token: w.token, status: rep.status, code: rep.code()})
	p.Start()
	if rep.code() == "generation_ended" || rep.code() == "not_holder" {
		w.regenerate()
	}
	w.write("b2")
	w.write("b3")
	b.truthful(t, w.name, b.checkInvariants(t, w.name, w.log), w.answers)
}

// brokerProcess is a bundle whose broker is a persisting process.
func brokerProcess(t *testing.T) (*testBundle, *kafkatest.Process) {
	b := setup(t)
	p := kafkatest.StartProcess(t, topic, partitions)
	b.useKafka(p.Cluster)
	return b, p
}

// TestFM68_NetworkFaultsLeakNothing: after the broker's link was
// partitioned at a commit, reset, slowed, and the lease store's link
// partitioned, and the worker went on, the process runs as many
// librdkafka threads, goroutines and open files as before the faults (a
// producer, a connection or a goroutine left behind by a fault shows).
func TestFM68_NetworkFaultsLeakNothing(t *testing.T) {
	// Not parallel: it counts the whole process's threads and files.
	b, links := proxiedBroker(t)
	store, pg := proxiedStore(t, b)
	r := b.newReplicaOn(store, nil)
	w := &faultedWorker{t: t, b: b, r: r, name: "shard:68", log: &ackLog{}}
	w.token = r.mustAcquire(t, w.name, "w1", 30*time.Second)
	w.write("warm")
	r.g.Idle()
	baseThreads, baseFDs := procCounts(t)
	baseGoroutines := runtime.NumGoroutine()
	for i, fault := range []func() func(){
		func() func() { return links.Each(func(l *netfault.Link) func() { return l.Blackhole(netfault.Both) }) },
		func() func() { return links.Each(func(l *netfault.Link) func() { return l.Reset() }) },
		func() func() {
			return links.Each(func(l *netfault.Link) func() { return l.Latency(netfault.Both, 100*time.Millisecond, 0) })
		},
		func() func() { return pg.Blackhole(netfault.Both) },
	} {
		undo := fault()
		rep := r.produce(t, w.name, "w1", w.token, fmt.Sprintf("f%d", i), 1)
		a := answer{batch: fmt.Sprintf("f%d", i), token: w.token, status: rep.status, code: rep.code()}
		if rep.status == http.StatusOK {
			b.mustProduceReplied(t, w.log, w.name, w.token, a.batch, rep)
			a.offsets = w.log.acked[len(w.log.acked)-1].Offsets
		}
		w.answers = append(w.answers, a)
		undo()
		if rep.code() == "generation_ended" || rep.code() == "not_holder" {
			w.regenerate()
		}
		w.write(fmt.Sprintf("after%d", i))
	}
	eventually(t, 60*time.Second, func() (bool, string) {
		r.g.Idle()
		threads, fds := procCounts(t)
		gs := runtime.NumGoroutine()
		return threads <= baseThreads && fds <= baseFDs+2 && gs <= baseGoroutines+5,
			fmt.Sprintf("librdkafka threads %d (before %d), fds %d (before %d), goroutines %d (before %d)", threads, baseThreads, fds, baseFDs, gs, baseGoroutines)
	})
	b.truthful(t, w.name, b.checkInvariants(t, w.name, w.log), w.answers)
}
