package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fencegate/fencegate/gateway"
)

// devBarrierKey signs barriers in development only.
const devBarrierKey = "fencegate-development-barrier-key"

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := flagSet("dev", stderr)
	f.register(fs)
	kafkaListen := fs.String("kafka-listen", "127.0.0.1:9092", "listen address of the embedded development broker")
	if err := parse(fs, args); err != nil {
		return err
	}
	f.migrate = true
	if f.barrierKey == "" {
		f.barrierKey = devBarrierKey
	}
	log := newLogger(stderr, f.logJSON)
	fc, _, _, err := gateway.LoadFileConfig(f.configPath)
	if err != nil {
		return err
	}
	cluster, err := startDevBroker(*kafkaListen, fc)
	if err != nil {
		return err
	}
	defer cluster.Close()
	f.brokers = *kafkaListen
	log.Warn("DEVELOPMENT BROKER: kfake from franz-go, in-process, NOT Apache Kafka; for development and tests only",
		"addr", *kafkaListen)
	return serve(ctx, f, log, nil)
}

// startDevBroker starts kfake on addr with every routed topic created.
func startDevBroker(addr string, fc gateway.FileConfig) (*kfake.Cluster, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("kafka-listen port: %w", err)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.ClusterID("fencegate-dev")}
	for _, r := range fc.Routes {
		opts = append(opts, kfake.SeedTopics(r.Partitions, r.Topic))
	}
	return kfake.NewCluster(opts...)
}
