package baseline

import (
	"testing"

	"github.com/fencegate/fencegate/barrier"
)

// TestBaselineBatchStampsLikeTheGateway: a stamped baseline record carries
// exactly the gateway's data-record headers (barrier.ReadStamp reads them
// back, seq in record order) and a plain one carries none: the yardstick
// pays for what the gateway pays for.
func TestBaselineBatchStampsLikeTheGateway(t *testing.T) {
	t.Parallel()
	b := transaction{topic: "t", partition: 3, lease: "shard:7", owner: "w7-0", size: 4, value: []byte("v")}
	for i, m := range b.messages(9) {
		if len(m.Headers) != barrier.DataHeaders {
			t.Fatalf("record %d: %d headers, want %d", i, len(m.Headers), barrier.DataHeaders)
		}
		st, err := barrier.ReadStamp(m.Headers)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want := barrier.Stamp{Lease: "shard:7", Token: 1, Owner: "w7-0", Batch: "w7-0-9", Seq: i}
		if st != want {
			t.Errorf("record %d: stamp %+v, want %+v", i, st, want)
		}
		if *m.TopicPartition.Topic != "t" || m.TopicPartition.Partition != 3 || string(m.Value) != "v" || len(m.Key) == 0 {
			t.Errorf("record %d: %+v", i, m)
		}
	}
	b.plain = true
	for i, m := range b.messages(9) {
		if len(m.Headers) != 0 {
			t.Errorf("plain record %d has headers %v", i, m.Headers)
		}
	}
}
