package gateway_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/kafkatest"
)

// These tests run on an Apache Kafka broker of their own
// (kafkatest.StartApache, deploy/dev/kafka.sh), for the faults that would
// break the shared broker: each is a place where Apache Kafka and the
// embedded broker differ (docs/failure-modes.md, "Where Apache Kafka and
// the embedded broker differ").

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
