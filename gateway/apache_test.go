package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
)

// These tests run on an Apache Kafka broker of their own
// (kafkatest.StartApache, deploy/dev/kafka.sh), for the faults that would
// break the shared broker: each is a place where Apache Kafka and the
// embedded broker differ (docs/testing.md, "Apache Kafka and the embedded
// broker").

// apacheBundle is a bundle whose broker is an Apache Kafka of the test's own.
func apacheBundle(t *testing.T, o kafkatest.ApacheOptions) (*testBundle, *kafkatest.Apache) {
	b := setup(t)
	a := kafkatest.StartApache(t, topic, partitions, o)
	b.useKafka(a.Cluster)
	return b, a
}

// TestFM74_ApacheBrokerKilledWithTransactionOpen: the broker is killed
// with SIGKILL between a batch's records and its commit, and started again
// on its data. Apache Kafka keeps the open transaction in
// __transaction_state (kfake forgets it: FM74); the batch is answered
// outcome unknown, the next generation's InitProducerId aborts the open
// transaction before its barrier, so no record of the killed transaction
// is ever read_committed, every batch acknowledged before the kill is in
// the log, and the worker's next generation commits the rest.
func TestFM74_ApacheBrokerKilledWithTransactionOpen(t *testing.T) {
	t.Parallel()
	b, a := apacheBundle(t, kafkatest.ApacheOptions{})
	w, ans := faultAtCommit(t, b, "shard:74", func() func() { a.Kill(1); return a.Start })
	recs := w.recovers(ans, "a broker killed with the transaction open")
	if n := batchRecords(recs, "b1"); n != 2 {
		t.Fatalf("batch b1 has %d records read_committed, want 2 (its retry only; the killed transaction's must be aborted)\n%s",
			n, a.LogTail(1, 20))
	}
}

// TestKafkaToolsReadWhatTheGatewayWrote: Kafka's own tools are readers
// independent of every reader fencegate wrote. On a real Kafka, two
// generations of a lease write batches (a handover between them); then
// kafka-console-consumer (read_committed) holds exactly the acknowledged
// batches' records at their acknowledged offsets, stamped with their
// lease, token and batch, plus one barrier per generation and nothing
// else; and kafka-transactions names the lease's transactional id with the
// producer id and epoch the gateway granted the current generation and
// reports at /v1/leases/{name} and in fencegate_lease_producer_epoch.
// librdkafka speaks transaction version 1, so on a TV2 cluster its epoch
// still stays put across a generation's commits (every data record
// carries its barrier's epoch: checked by CommitOrder in checkInvariants).
func TestKafkaToolsReadWhatTheGatewayWrote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.useKafka(kafkatest.StartReal(t, topic, partitions))
	mod, serve := withMetrics(t)
	r := b.newReplica(func(c *gateway.Config) { mod(c); c.LeaseMetrics = true })
	serve(r)
	name, log := "shard:36", &ackLog{}
	first := granted(t, r.acquireAsWorker(t, name, "w1", 30*time.Second))
	b.mustProduce(t, r, log, name, "w1", first.int("token"), "a", 2)
	b.mustProduce(t, r, log, name, "w1", first.int("token"), "b", 3)
	if rep := r.do(t, "DELETE", "/v1/leases/"+name+"?owner_id=w1&token="+itoa(first.int("token")), nil); rep.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rep.status, rep.raw)
	}
	second := granted(t, r.acquireAsWorker(t, name, "w2", 30*time.Second))
	b.mustProduce(t, r, log, name, "w2", second.int("token"), "c", 2)
	b.checkInvariants(t, name, log)

	recs := kafkatest.ConsoleRead(t, b.kafka.Conn, b.kafka.Topic, b.partitionOf(name))
	want := map[int64]string{} // offset -> batch
	for _, a := range log.acked {
		for _, off := range a.Offsets {
			want[off] = a.BatchID
		}
	}
	barriers := 0
	for _, rec := range recs {
		switch {
		case rec.Headers[barrier.HeaderBarrier] != "":
			barriers++
		case want[rec.Offset] == "" || rec.Headers[barrier.HeaderBatch] != want[rec.Offset] || rec.Headers[barrier.HeaderLease] != name:
			t.Errorf("console consumer: offset %d batch %q lease %q: not an acknowledged record", rec.Offset, rec.Headers[barrier.HeaderBatch], rec.Headers[barrier.HeaderLease])
		default:
			delete(want, rec.Offset)
		}
	}
	if len(want) > 0 || barriers != 2 {
		t.Fatalf("console consumer read %d records: %d acknowledged ones missing (%v), %d barriers (want 2)", len(recs), len(want), want, barriers)
	}

	id := b.txnID(name)
	if !kafkatest.ListTransactions(t, b.kafka.Conn)[id] {
		t.Fatalf("kafka-transactions list does not name %s", id)
	}
	got := kafkatest.DescribeTransaction(t, b.kafka.Conn, id)
	if got.ProducerID != second.int("producer_id") || int64(got.ProducerEpoch) != second.int("producer_epoch") ||
		got.ProducerEpoch <= int16(first.int("producer_epoch")) {
		t.Fatalf("kafka-transactions describe %s: producer %d epoch %d (%s); the gateway granted %d epoch %d (first generation epoch %d)",
			id, got.ProducerID, got.ProducerEpoch, got.State, second.int("producer_id"), second.int("producer_epoch"), first.int("producer_epoch"))
	}
	view := r.do(t, "GET", "/v1/leases/"+name, nil)
	gauge, _ := scrapeMetrics(t, r.metricsURL).value("fencegate_lease_producer_epoch", map[string]string{"fencegate_lease": name})
	if view.int("producer_id") != got.ProducerID || view.int("producer_epoch") != int64(got.ProducerEpoch) || gauge != float64(got.ProducerEpoch) {
		t.Fatalf("the coordinator says producer %d epoch %d; /v1/leases says %d epoch %d (%s), the epoch gauge %v",
			got.ProducerID, got.ProducerEpoch, view.int("producer_id"), view.int("producer_epoch"), view.raw, gauge)
	}
	t.Logf("console consumer: %d records (%d barriers); kafka-transactions: %s producer %d epoch %d %s",
		len(recs), barriers, id, got.ProducerID, got.ProducerEpoch, got.State)
}

func granted(t *testing.T, rep reply) reply {
	t.Helper()
	if rep.status != http.StatusCreated {
		t.Fatalf("acquire: %d %s", rep.status, rep.raw)
	}
	return rep
}

// expiringBroker is an Apache Kafka whose coordinator forgets a
// transactional id after 2 s idle (default 7 days) and whose partitions
// forget a producer id as fast, checked every half second.
func expiringBroker(t *testing.T) (*testBundle, *kafkatest.Apache) {
	return apacheBundle(t, kafkatest.ApacheOptions{Config: []string{
		"transactional.id.expiration.ms=2000",
		"transaction.remove.expired.transaction.cleanup.interval.ms=500",
		"producer.id.expiration.ms=2000",
		"producer.id.expiration.check.interval.ms=500",
	}})
}

// TestFM76_ExpiredTransactionalIDKeepsTheFence: on a broker set to forget
// idle transactional ids after 2 s (transactional.id.expiration.ms, 7 days
// by default), what fencegate relies on still holds:
//
//   - parked: a parked lease's id is forgotten; its next batch is answered
//     not_holder, the worker's new generation runs InitProducerId on the
//     forgotten id (a new producer id, epoch 0: no older epoch to bump)
//     and commits the batch;
//   - zombie idle: a frozen replica keeps a live producer of generation 1
//     while its id is forgotten and generation 2 takes the lease; its next
//     batch is refused, nothing of it committed;
//   - zombie mid-commit: the same with generation 1's records sent into an
//     open transaction (aborted by the coordinator at its timeout, then
//     forgotten) before the takeover; its commit is refused.
//
// The broker never reuses a producer id, so a producer of a forgotten id
// is refused by the coordinator (the id now maps to another producer, or
// to none) and by the partitions' transaction verification: the fence
// holds without the epoch bump. docs/testing.md FM76 says so, with
// the limit.
func TestFM76_ExpiredTransactionalIDKeepsTheFence(t *testing.T) {
	t.Parallel()
	b, _ := expiringBroker(t)
	t.Run("parked", func(t *testing.T) { expiredWhileParked(t, b) })
	t.Run("zombie idle", func(t *testing.T) { expiredUnderZombie(t, b, "shard:761", gateway.HookAdmitted) })
	t.Run("zombie mid-commit", func(t *testing.T) { expiredUnderZombie(t, b, "shard:762", gateway.HookBeforeCommit) })
}

func expiredWhileParked(t *testing.T, b *testBundle) {
	r := b.newReplica(func(c *gateway.Config) { c.ParkAfter = 200 * time.Millisecond })
	w := &faultedWorker{t: t, b: b, r: r, name: "shard:760", log: &ackLog{}}
	first := granted(t, r.acquireAsWorker(t, w.name, "w1", 30*time.Second))
	w.token = first.int("token")
	w.write("b0")
	kafkatest.WaitForgotten(t, b.kafka.Conn, b.txnID(w.name))
	rep := r.produce(t, w.name, "w1", w.token, "b1", 2)
	w.answers = append(w.answers, answer{batch: "b1", token: w.token, status: rep.status, code: rep.code()})
	if rep.code() != "not_holder" {
		t.Fatalf("first batch of a parked lease whose id was forgotten: %d %s, want not_holder", rep.status, rep.raw)
	}
	w.regenerate()
	w.write("b1")
	b.truthful(t, w.name, b.checkInvariants(t, w.name, w.log), w.answers)
}

// expiredUnderZombie freezes replica A's produce at hook (its clock
// stopped, so it never ends the session), waits until the broker forgot
// the lease's transactional id, lets replica B take the lease, then
// resumes A: the broker must refuse A's batch.
func expiredUnderZombie(t *testing.T, b *testBundle, lease string, hook gateway.Hook) {
	gate := newGate(hook, lease)
	a := b.newReplica(func(c *gateway.Config) {
		hooks(gate)(c)
		c.ParkAfter = gateway.ParkNever
		c.Kafka.TransactionTimeoutMS = 2000
	})
	bb := b.newReplica(nil)
	log := &ackLog{}
	old := a.mustAcquire(t, lease, "w-old", 6*time.Second)
	gate.armed.Store(false)
	b.mustProduce(t, a, log, lease, "w-old", old, "before", 1)
	gate.armed.Store(true)
	a.clock.freeze()
	done := make(chan reply, 1)
	go func() { done <- a.produce(t, lease, "w-old", old, "zombie", 3) }()
	gate.wait(t)
	kafkatest.WaitForgotten(t, b.kafka.Conn, b.txnID(lease))
	fresh := b.takeover(t, bb, lease, "w-new")
	b.mustProduce(t, bb, log, lease, "w-new", fresh, "new-owner", 2)
	gate.open()
	rep := <-done
	if rep.status == http.StatusOK {
		t.Fatalf("the zombie's batch after its id was forgotten: %d %s, want a refusal", rep.status, rep.raw)
	}
	t.Logf("the zombie's batch: %d %s (%s)", rep.status, rep.code(), client.ProduceOutcome(rep.status, rep.code()))
	recs := b.checkInvariants(t, lease, log)
	if n := dataOf(recs, old); n != 1 {
		t.Fatalf("%d records of the old generation are committed, want 1 (its batch before the freeze)", n)
	}
}
