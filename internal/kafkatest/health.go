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
	ctx, cancel := context.WithTimeout(context.Background(), healTimeout)
	defer cancel()
	start := time.Now()
	if err := a.adm.WaitHealthy(ctx, a.node.Nodes(), a.Topic); err != nil {
		a.t.Fatalf("kafkatest: the cluster did not heal within %s: %v", healTimeout, err)
	}
	return time.Since(start)
}

// TxnCoordinator returns the node coordinating transactional id id
// (FindCoordinator), failing the test when none is found.
func (a *Apache) TxnCoordinator(id string) int {
	a.t.Helper()
	return a.askNode(func(ctx context.Context, adm *kafkadev.Admin) (int, error) { return adm.Coordinator(ctx, id) })
}

// GroupCoordinator returns the node coordinating consumer group group
// (FindCoordinator), failing the test when none is found.
func (a *Apache) GroupCoordinator(group string) int {
	a.t.Helper()
	return a.askNode(func(ctx context.Context, adm *kafkadev.Admin) (int, error) { return adm.GroupCoordinator(ctx, group) })
}

// Leader returns the node leading partition p of topic, failing the
// test when none is found.
func (a *Apache) Leader(topic string, p int32) int {
	a.t.Helper()
	return a.askNode(func(ctx context.Context, adm *kafkadev.Admin) (int, error) { return adm.Leader(ctx, topic, p) })
}

// ActiveController returns the node leading the KRaft quorum
// (DescribeQuorum), failing the test when none is found.
func (a *Apache) ActiveController() int {
	a.t.Helper()
	return a.askNode(func(ctx context.Context, adm *kafkadev.Admin) (int, error) { return adm.ActiveController(ctx) })
}

// askNode asks for a node (a coordinator, a leader, the controller),
// at most a minute, failing the test when none is found.
func (a *Apache) askNode(ask func(context.Context, *kafkadev.Admin) (int, error)) int {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := ask(ctx, a.adm)
	if err != nil {
		a.t.Fatalf("kafkatest: %v", err)
	}
	return n
}

// WaitDropped waits until the other nodes have dropped node n from their
// metadata (it missed its heartbeats: killed, paused or cut off) and
// returns how long that took; it fails the test after healTimeout. A
// fault that freezes or cuts a node holds it until then, so the cluster
// has acted on it, rather than for a fixed time.
func (a *Apache) WaitDropped(n int) time.Duration {
	a.t.Helper()
	took, err := a.waitDropped(n)
	if err != nil {
		a.t.Fatalf("kafkatest: %v", err)
	}
	return took
}

// RestartWhenDropped waits until the other nodes have dropped node n
// from their metadata (killed, it missed its heartbeats) and starts it
// again; for a goroutine of the test's (an error, not a failed test).
func (a *Apache) RestartWhenDropped(n int) error {
	if _, err := a.waitDropped(n); err != nil {
		return err
	}
	return a.node.Start()
}

func (a *Apache) waitDropped(n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), healTimeout)
	defer cancel()
	return a.adm.WaitDropped(ctx, n, a.node.Nodes())
}
