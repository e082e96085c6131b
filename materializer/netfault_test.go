package materializer_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// TestFM67_MaterializerLinksCutAndHealed: the materializer's links to
// Postgres and to the broker are each partitioned (bytes dropped, no
// reset) and reset while it applies a stream of records, run as a
// supervisor runs it (restarted whenever it stops with an error). Once
// the links heal it reaches the end of the partition, and its ledger is
// the one a run without faults builds from offset 0: nothing lost,
// nothing twice.
func TestFM67_MaterializerLinksCutAndHealed(t *testing.T) {
	t.Parallel()
	k, brokers := kafkatest.StartProxied(t, topic, partitions)
	b := setupOn(t, k)
	pool, pg := pgtest.Proxied(t, b.db)
	m, err := materializer.New(pool, b.router, materializer.Config{Kafka: b.kafka.Conn, BarrierKey: key, PollTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	restarts := make(chan error, 100)
	go func() {
		for ctx.Err() == nil {
			if err := m.Run(ctx); err != nil {
				restarts <- err
			}
			// A supervisor's restart delay (systemd's RestartSec), not a
			// wait for an event: without it the restarts would open
			// connections as fast as they fail.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() {
		for len(restarts) > 0 {
			t.Logf("stopped: %v", <-restarts)
		}
	}()
	last := b.workload()
	faults := []func() func(){
		func() func() { return pg.Blackhole(netfault.Both) },
		func() func() {
			return brokers.Each(func(l *netfault.Link) func() { return l.Blackhole(netfault.Both) })
		},
		func() func() { return pg.Reset() },
		func() func() { return pg.Blackhole(netfault.Downstream) },
	}
	for _, fault := range faults {
		<-netfault.For(time.Second, fault) // each fault's window, then healed
		last = b.workload()
	}
	b.waitPosition(b.db, 1, last+1, make(chan error))
	cancel()
	t.Logf("%d restarts after errors", len(restarts))
	got := snapshot(t, b.db)
	fresh := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(fresh, nil), fresh, 1, last)
	if want := snapshot(t, fresh); got != want {
		t.Fatalf("the ledger built through the faults differs from a clean replay:\n%s\nwant:\n%s", got, want)
	}
}
