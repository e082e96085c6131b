package txnmap_test

import (
	"testing"

	"github.com/fencegate/fencegate/txnmap"
)

// TestResolveUnder: the route's rule under another partition count puts
// a lease where that count put it; Resolve names the count it used.
func TestResolveUnder(t *testing.T) {
	t.Parallel()
	r, err := txnmap.NewRouter("p", []txnmap.Route{{Pattern: "shard:*", Topic: "t", Partitions: 32},
		{Pattern: "h:*", Topic: "h", Partitions: 32, Rule: txnmap.RuleMurmur2}})
	if err != nil {
		t.Fatal(err)
	}
	now, _ := r.Resolve("shard:17")
	before, err := r.ResolveUnder("shard:17", 16)
	if err != nil || now.Partition != 17 || now.Partitions != 32 || before.Partition != 1 || before.Partitions != 16 || before.Topic != "t" {
		t.Fatalf("shard:17 now %+v, under 16 %+v %v", now, before, err)
	}
	h, _ := r.ResolveUnder("h:x", 1)
	if h.Partition != 0 {
		t.Fatalf("murmur2 under 1 partition: %+v", h)
	}
	if _, err := r.ResolveUnder("shard:17", 0); err == nil {
		t.Fatal("ResolveUnder 0 partitions: no error")
	}
}
