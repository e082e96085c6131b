package verify_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/verify"
)

// txnProducer is a transactional franz-go producer of one transactional
// id; timeout is its transaction.timeout.ms.
func txnProducer(t *testing.T, k *kafkatest.Cluster, id string, timeout time.Duration) *kgo.Client {
	t.Helper()
	opts, err := k.Conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.TransactionalID(k.RouterPrefix("readpartition")+"-"+id),
		kgo.TransactionTimeout(timeout), kgo.DefaultProduceTopic(k.Topic))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTxn begins a transaction of cl and produces key in it.
func produceTxn(t *testing.T, cl *kgo.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Partition: 0}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// endTxn commits or aborts cl's transaction.
func endTxn(t *testing.T, cl *kgo.Client, how kgo.TransactionEndTry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.EndTransaction(ctx, how); err != nil {
		t.Fatal(err)
	}
}

// openThenCommitted leaves a transaction of producer "open" open at offset
// 0 and commits one of producer "committed" after it (offset 1, marker at
// 2): the high watermark is 3, the last stable offset 0.
func openThenCommitted(t *testing.T, openTimeout time.Duration) (*kafkatest.Cluster, *kgo.Client) {
	t.Helper()
	k := kafkatest.Start(t, "readpartition", 1)
	open := txnProducer(t, k, "open", openTimeout)
	produceTxn(t, open, "open")
	committed := txnProducer(t, k, "committed", time.Minute)
	produceTxn(t, committed, "committed")
	endTxn(t, committed, kgo.TryCommit)
	return k, open
}

// lastStable lists the last stable offset of k's partition 0.
func lastStable(t *testing.T, k *kafkatest.Cluster) int64 {
	t.Helper()
	opts, err := k.Conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = 1 // read_committed: the end is the last stable offset
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = k.Topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("list offsets: %+v", resp.Topics)
	}
	return resp.Topics[0].Partitions[0].Offset
}

func keys(recs []verify.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Key))
	}
	return out
}

// The load harness's I3 "losses" (BENCHMARKS-history.md, "Earlier: each
// process on its own", run D): a handover whose barrier transaction was
// left open (its request cancelled at the end of
// the run; the gateway leaves it to the broker's transaction timeout) held
// the last stable offset of its partition, and ReadPartition took the last
// stable offset for the end of the partition: it returned, without error,
// everything before the open transaction and nothing of the batches other
// leases committed after it. A reader must wait for the open transaction
// to end, as the broker's transaction timeout ends this one.
func TestReadPartitionWaitsForOpenTransaction(t *testing.T) {
	k, _ := openThenCommitted(t, 5*time.Second)
	if stable := lastStable(t, k); stable != 0 {
		t.Fatalf("precondition: last stable offset %d, want 0 (the open transaction ended early)", stable)
	}
	recs, err := verify.ReadPartition(k.Conn, k.Topic, 0, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(recs); len(got) != 1 || got[0] != "committed" || recs[0].Offset != 1 {
		t.Fatalf("read %v, want the committed record at offset 1 (the open one aborted by its transaction timeout)", got)
	}
}

// A transaction that does not end before the timeout makes ReadPartition
// fail, naming where it holds readers, instead of answering a prefix of
// the partition; once it ends the committed record is read.
func TestReadPartitionFailsWhileTransactionOpen(t *testing.T) {
	k, open := openThenCommitted(t, time.Minute)
	recs, err := verify.ReadPartition(k.Conn, k.Topic, 0, 2*time.Second)
	switch {
	case err == nil:
		t.Fatalf("read %v without error while a transaction holds the last stable offset at 0; the committed record at offset 1 is unread", keys(recs))
	case !strings.Contains(err.Error(), "the last stable offset is 0"):
		t.Fatalf("error %q does not name the last stable offset 0", err)
	}
	endTxn(t, open, kgo.TryAbort)
	recs, err = verify.ReadPartition(k.Conn, k.Topic, 0, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(recs); len(got) != 1 || got[0] != "committed" {
		t.Fatalf("read %v after the abort, want only the committed record", got)
	}
}
