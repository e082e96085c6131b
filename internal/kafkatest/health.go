package kafkatest

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/internal/kafkadev"
)

// healTimeout bounds how long a cluster may take to heal after a fault:
// a JVM restart and log recovery on a loaded two-core machine, Kafka's
// own time and not fencegate's.
const healTimeout = 3 * time.Minute

// WaitHealthy waits until the cluster has healed after a fault: every
// node is registered and every partition of the test's topic and of
// __transaction_state has a leader and its full set of replicas in sync
// (kafkadev's rule). It returns how long that took and fails the test
// after healTimeout. A test that bounds fencegate's recovery starts its
// clock here, so the bound measures fencegate and not the broker's
// restart.
func (a *Apache) WaitHealthy() time.Duration {
	a.t.Helper()
	adm, err := a.node.NewAdmin()
	if err != nil {
		a.t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), healTimeout)
	defer cancel()
	start := time.Now()
	if err := adm.WaitHealthy(ctx, a.node.Nodes(), a.Topic); err != nil {
		a.t.Fatalf("kafkatest: the cluster did not heal within %s: %v", healTimeout, err)
	}
	return time.Since(start)
}

// TxnCoordinator returns the node coordinating transactional id id
// (FindCoordinator), failing the test when none is found.
func (a *Apache) TxnCoordinator(id string) int {
	a.t.Helper()
	return a.coordinator(func(ctx context.Context, adm *kafkadev.Admin) (int, error) { return adm.Coordinator(ctx, id) })
}

// GroupCoordinator returns the node coordinating consumer group group
// (FindCoordinator), failing the test when none is found.
func (a *Apache) GroupCoordinator(group string) int {
	a.t.Helper()
	return a.coordinator(func(ctx context.Context, adm *kafkadev.Admin) (int, error) { return adm.GroupCoordinator(ctx, group) })
}

func (a *Apache) coordinator(ask func(context.Context, *kafkadev.Admin) (int, error)) int {
	a.t.Helper()
	adm, err := a.node.NewAdmin()
	if err != nil {
		a.t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := ask(ctx, adm)
	if err != nil {
		a.t.Fatalf("kafkatest: %v", err)
	}
	return n
}

// RestartWhenDropped waits until the other nodes have dropped node n
// from their metadata (killed, it missed its heartbeats) and starts it
// again; for a goroutine of the test's (an error, not a failed test).
func (a *Apache) RestartWhenDropped(n int) error {
	adm, err := a.node.NewAdmin()
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), healTimeout)
	defer cancel()
	if _, err := adm.WaitDropped(ctx, n, a.node.Nodes()); err != nil {
		return err
	}
	return a.node.Start()
}
