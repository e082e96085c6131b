package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/loadtest/baseline"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/txnmap"
)

// hiddenCommands are the processes `loadtest --separate-processes` starts
// as its children (package loadtest/stack execs them under these names);
// they are not listed in the usage. This file is the one place they are
// implemented.
func hiddenCommands() map[string]command {
	return map[string]command{
		stack.CommandDevBroker: {"serve the development broker (kfake) alone", runDevBroker},
		stack.CommandBaseline:  {"run one baseline of the load harness and print its figures as JSON", runLoadtestBaseline},
	}
}

// runDevBroker serves kfake, the development broker of `fencegate dev`, as
// a process of its own, with the topics of a routes file and extra
// topics. It prints "ready <addr>" once it accepts connections and serves
// until SIGINT or SIGTERM.
func runDevBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet(stack.CommandDevBroker, stderr)
	listen := fs.String("listen", defaultKafkaBrokers, "listen address")
	cfgPath := fs.String("config", devConfig, "routes file whose topics are created")
	topics := fs.String("topic", "", "more topics to create, comma-separated")
	partitions := fs.Int("partitions", 16, "partitions of each --topic")
	if err := parse(fs, args); err != nil {
		return err
	}
	fc, _, err := fileconfig.Load(*cfgPath)
	if err != nil {
		return err
	}
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			fc.Routes = append(fc.Routes, txnmap.Route{Topic: t, Partitions: int32(*partitions)})
		}
	}
	cluster, err := startDevBroker(*listen, fc)
	if err != nil {
		return err
	}
	defer cluster.Close()
	fmt.Fprintf(stdout, "ready %s\n", strings.Join(cluster.ListenAddrs(), ","))
	<-ctx.Done()
	return nil
}

// runLoadtestBaseline runs the direct baseline or the bare-producer
// yardstick of the load harness in this process and prints its figures
// as JSON on stdout; its flags, besides Kafka's, are baseline.Child's.
func runLoadtestBaseline(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet(stack.CommandBaseline, stderr)
	var kf commonFlags
	fs.StringVar(&kf.brokers, "kafka-brokers", defaultKafkaBrokers, "Kafka bootstrap servers")
	kf.registerKafka(fs, "harness")
	var b baseline.Child
	b.Register(fs.FlagSet)
	if err := parse(fs, args); err != nil {
		return err
	}
	conn := kf.kafkaConn()
	if err := conn.Validate(); err != nil {
		return err
	}
	out, err := b.Run(ctx, conn)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(out)
}
