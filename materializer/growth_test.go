package materializer_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/txnmap"
)

// TestFM84_SinksAgreeOnABatchResentAcrossPartitionGrowth: owner o writes
// batch b1 of shard:17 on partition 1 under 16 partitions; the topic (and
// the trusted topic's three) and the route grow to 32, and the same owner
// resends b1 in its next generation, now on partition 17 (it never got
// the first answer). The Postgres ledger and the trusted topic must judge
// the resent batch alike on both partitions: the two sinks may not
// disagree on what the lease's newest batch is.
func TestFM84_SinksAgreeOnABatchResentAcrossPartitionGrowth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = "shard:17"
	first := b.write(1, bar(lease, 1), data(lease, 1, "b1", 0), data(lease, 1, "b1", 1))
	b.runUntil(b.newMaterializer(nil), b.db, 1, first)
	before := b.newTrusted("t84", nil, nil)
	if err := b.runTrustedUntil(before, 1, first); err != nil {
		t.Fatal(err)
	}

	trusted, receipts, state := before.Topics(b.topic)
	for _, topic := range []string{b.topic, trusted, receipts, state} {
		if err := kafkatest.GrowTopic(b.kafka.Conn, topic, 2*partitions); err != nil {
			t.Fatal(err)
		}
	}
	grown, err := txnmap.NewRouter(b.kafka.RouterPrefix("test"), []txnmap.Route{{Pattern: "shard:*", Topic: b.topic, Partitions: 2 * partitions}})
	if err != nil {
		t.Fatal(err)
	}
	b.router, b.writer = grown, b.freshWriter()
	resent := b.write(17, bar(lease, 2), data(lease, 2, "b1", 0), data(lease, 2, "b1", 1))
	b.runUntil(b.newMaterializer(nil), b.db, 17, resent)
	after := b.newTrusted("t84", nil, nil)
	if err := b.runTrustedUntil(after, 17, resent); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{1, 17} {
		if l, k := b.ledgerView(p), b.trustedView(after, p); l != k {
			t.Errorf("partition %d: the ledger and the trusted topic disagree:\nledger:\n%s\ntrusted:\n%s", p, l, k)
		}
	}
}
