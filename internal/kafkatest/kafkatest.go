// Package kafkatest starts the in-process kfake broker for tests.
package kafkatest

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fencegate/fencegate/kafkaconn"
)

// Cluster is a running kfake cluster.
type Cluster struct {
	*kfake.Cluster
	Brokers string
	// Conn is how clients reach the cluster (PLAINTEXT unless started by
	// StartTLS).
	Conn kafkaconn.Config
}

// Start starts a one-broker kfake cluster with topic seeded with
// partitions partitions, closed when t ends.
func Start(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) *Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")
	return &Cluster{Cluster: c, Brokers: brokers, Conn: kafkaconn.Config{Brokers: brokers}}
}
