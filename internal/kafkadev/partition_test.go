package kafkadev_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkadev"
	"github.com/fencegate/fencegate/kafkaconn"
)

// TestIsolateCutsANodeOffBothWays: Isolate is a partition of one node
// from the clients and the other nodes, in both directions. A node cut
// off only from what is sent to it still heartbeats to the active
// controller over its own connections and is never fenced; cut off both
// ways, the quorum fences it (it leaves the cluster's metadata as the
// other nodes answer it), and healed, it returns and the cluster is whole.
// On Apache Kafka 4.4, three nodes of the test's own; the node cut off is
// one that does not lead the quorum.
func TestIsolateCutsANodeOffBothWays(t *testing.T) {
	c, err := kafkadev.New(kafkadev.Options{Nodes: 3, Proxied: true, DirPattern: "fencegate-kafkadev-test-"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Launch(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := (kafkaconn.Config{Brokers: c.Brokers}).CreateTopic(ctx, "isolate", 3, nil); err != nil {
		t.Fatal(err)
	}
	adm, err := c.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.WaitHealthy(ctx, 3, "isolate"); err != nil {
		t.Fatal(err)
	}
	active, err := adm.ActiveController(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := active%3 + 1
	heal, err := c.Isolate(n)
	if err != nil {
		t.Fatal(err)
	}
	fenced := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		live, err := adm.Nodes(ctx)
		if err == nil && !slices.Contains(live, n) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			heal()
			t.Fatalf("node %d, cut off, is still in the cluster's metadata (%v, %v): it still reaches the quorum", n, live, err)
		}
	}
	t.Logf("node %d (the active controller is %d) fenced %s after its cut", n, active, time.Since(fenced).Round(time.Millisecond))
	heal()
	if err := adm.WaitHealthy(ctx, 3, "isolate"); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}
