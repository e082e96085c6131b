package stack

import (
	"fmt"

	"github.com/fencegate/fencegate/internal/kafkadev"
)

// ClusterConfig are the server.properties lines of the cluster that
// SeparateOptions.KafkaCluster starts, besides kafka.sh's (replication
// factor 3 and min.insync.replicas 2 for the topics and
// __transaction_state): a broker that stops heartbeating is fenced by the
// controller after 6 s, so that a paused or cut-off node (held so until
// the others drop it) loses its partitions soon.
var ClusterConfig = []string{"broker.session.timeout.ms=6000", "broker.heartbeat.interval.ms=1000"}

// startCluster starts the three-node Apache Kafka cluster of
// kafka.sh cluster, each node behind a fault proxy, in a directory of its
// own, stopped by s.Close (and by kafka.sh's watcher if the harness dies
// first), and points opts.Brokers at it.
func (s *Stack) startCluster(opts *SeparateOptions) error {
	c, err := kafkadev.New(kafkadev.Options{Nodes: 3, Proxied: true, Config: ClusterConfig, DirPattern: "fencegate-loadtest-kafka-"})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, c.Close)
	if err := c.Launch(); err != nil {
		return fmt.Errorf("the three-node Apache Kafka cluster: %w\n%s", err, c.LogTail(1, 20))
	}
	s.apache = c
	opts.Brokers = c.Brokers
	return nil
}

// KafkaCluster is the cluster SeparateOptions.KafkaCluster started, for
// its faults (nil: none).
func (s *Stack) KafkaCluster() *kafkadev.Cluster { return s.apache }
