package materializer_test

import (
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/materializer"
)

// TestFM119_TrustedSinkOutlivesItsGroupCoordinatorsCrash: on three Apache
// Kafka nodes of the test's own, the node that coordinates the sink's
// consumer group (where SendOffsetsToTransaction commits the input
// offsets) is killed while the sink runs, and started again once the
// cluster has dropped it. librdkafka 2.11.1 never times out that part of
// the call and, the coordinator gone from the metadata, waits on it for
// minutes (the long broker-fault run stalled 5 min, then 10 more). The
// sink must leave the wedged call after its timeout and wedgeGrace, join
// the group again with new producers, and the trusted topic is then the
// ledger's, each record once.
func TestFM119_TrustedSinkOutlivesItsGroupCoordinatorsCrash(t *testing.T) {
	t.Parallel()
	a := kafkatest.StartApache(t, topic, partitions, kafkatest.ApacheOptions{Nodes: 3, Config: []string{
		"broker.session.timeout.ms=6000", "broker.heartbeat.interval.ms=1000"}})
	b := setupOn(t, a.Cluster)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	want := b.ledgerView(1)

	name, groupNode := splitCoordinators(t, b, a)
	logs := newLineWatch("wedged")
	restarted := make(chan error, 1)
	var once sync.Once
	crash := func(c *materializer.TrustedConfig) {
		c.TransactionTimeout = 5 * time.Second
		c.Hooks.BeforeCommit = func(string, int32) error {
			once.Do(func() {
				a.Kill(groupNode)
				go func() { restarted <- a.RestartWhenDropped(groupNode) }()
			})
			return nil
		}
	}
	ts := b.newTrusted(name, crash, func(c *materializer.Config) {
		c.MaxBatch = 4
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the sink's log:\n%s\nits goroutines:\n%s", logs.log.String(), sinkGoroutines())
		}
	})
	start := time.Now()
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatalf("the sink stopped when its group coordinator crashed: %v (FM119)\n%s", err, logs.log.String())
	}
	select {
	case <-logs.seen:
	default:
		t.Fatalf("no call wedged: the test proved nothing\n%s", logs.log.String())
	}
	t.Logf("a call wedged and was left; caught up %s after start", time.Since(start).Round(100*time.Millisecond))
	if err := <-restarted; err != nil {
		t.Fatalf("the crashed group coordinator: %v", err)
	}
	if got := b.trustedView(ts, 1); got != want {
		t.Fatalf("after the group coordinator's crash:\n%s\nwant:\n%s", got, want)
	}
}

// splitCoordinators picks a sink name whose consumer group and partition
// 1's producer have their coordinators on different nodes (so the
// producer's AddOffsetsToTxn is answered and its TxnOffsetCommit meets
// the crash) and returns it with the group's coordinator.
func splitCoordinators(t *testing.T, b *testBundle, a *kafkatest.Apache) (string, int) {
	prefix := b.newTrusted("probe", nil, nil).TransactionalIDPrefix()
	for i := range 20 {
		name := fmt.Sprintf("wedged%d", i)
		g, x := a.GroupCoordinator("fencegate-"+name), a.TxnCoordinator(fmt.Sprintf("%s%s/%s/%d", prefix, name, b.topic, 1))
		if g != x {
			return name, g
		}
	}
	t.Fatal("no sink name with its group and producer coordinated apart")
	return "", 0
}

// sinkGoroutines are this process's goroutines in the trusted sink's
// code, with their stacks: where a stalled sink waits.
func sinkGoroutines() string {
	var all strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&all, 2)
	return materializer.SinkGoroutines(all.String())
}
