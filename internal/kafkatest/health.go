package kafkatest

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// healTimeout bounds how long a cluster may take to heal after a fault:
// a JVM restart and log recovery on a loaded two-core machine, Kafka's
// own time and not fencegate's.
const healTimeout = 3 * time.Minute

// WaitHealthy waits until the cluster has healed after a fault: every
// node is registered and every partition of every topic (the test's and
// the internal ones, __transaction_state among them) has a leader and its
// full set of replicas in sync. It returns how long that took and fails
// the test after healTimeout. A test that bounds fencegate's recovery
// starts its clock here, so the bound measures fencegate and not the
// broker's restart.
func (a *Apache) WaitHealthy() time.Duration {
	a.t.Helper()
	opts, err := a.Conn.KgoOpts()
	if err != nil {
		a.t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		a.t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		why := a.unhealthy(cl)
		if why == "" {
			return time.Since(start)
		}
		if time.Since(start) > healTimeout {
			a.t.Fatalf("kafkatest: the cluster did not heal within %s: %s", healTimeout, why)
		}
		<-tick.C
	}
}

// unhealthy says what keeps the cluster from being healed, or "".
func (a *Apache) unhealthy(cl *kgo.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest() // no topics named: every topic, internal ones too
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "metadata: " + err.Error()
	}
	if len(resp.Brokers) < a.nodes() {
		return fmt.Sprintf("%d of %d nodes registered", len(resp.Brokers), a.nodes())
	}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 || len(p.ISR) < len(p.Replicas) {
				return fmt.Sprintf("%s partition %d: leader %d, in sync %v of %v (error %d)",
					metadataTopic(tp), p.Partition, p.Leader, p.ISR, p.Replicas, p.ErrorCode)
			}
		}
	}
	return ""
}

func metadataTopic(tp kmsg.MetadataResponseTopic) string {
	if tp.Topic == nil {
		return fmt.Sprintf("topic %x", tp.TopicID)
	}
	return *tp.Topic
}
