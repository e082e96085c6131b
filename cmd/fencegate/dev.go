package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/materializer/schema"
)

// devBarrierKey signs barriers in development only.
const devBarrierKey = "fencegate-development-barrier-key"

// devConfigYAML is the routes and clients file of `fencegate dev`:
// bearer dev-token, allowed on every lease. It is built in, so that dev
// runs from any directory; devConfig is the same file in the repository
// (TestDevConfigFilesAgree).
//
//go:embed devconfig.yaml
var devConfigYAML []byte

// devConfig is the repository's copy of devConfigYAML, the default of the
// harness's development broker (hidden.go).
const devConfig = "deploy/dev/fencegate.yaml"

// devReplicaCredential is the replicas' shared credential in development:
// public, so serve refuses it outside `fencegate dev` (FM45). With it, the
// replicas of `fencegate dev` and `fencegate dev --join` forward to each
// other.
const devReplicaCredential = "fencegate-development-replica-credential"

// devToken is the bearer token of the development file: public, so serve
// refuses a config that accepts it outside `fencegate dev` (FM45).
const devToken = "dev-token"

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := flagSet("dev", stderr)
	f.register(fs)
	// dev clears the ledger of its database at start: its own, unless
	// told otherwise, and never one it did not create (FM45).
	db := fs.Lookup("database-url")
	db.DefValue, db.Usage = devDatabaseURL, "Postgres URL of dev's own database: created and marked by dev when missing; "+
		"a database dev did not create is refused, never cleared"
	_ = db.Value.Set(devDatabaseURL)
	fs.Lookup("kafka-brokers").Usage = "a real Kafka instead of the embedded broker (make run-kafka: Apache Kafka of deploy/dev/kafka.sh); " +
		"dev creates the routed topics there when missing (default: the embedded broker at --kafka-listen)"
	fs.Lookup("config").Usage = "routes and clients YAML file (empty: the development file built into the binary, " +
		"the same as deploy/dev/fencegate.yaml)"
	var kafkaListen, matListen, sinks *string
	var join *bool
	fs.settingsOf(func() {
		kafkaListen = fs.String("kafka-listen", defaultKafkaBrokers, "listen address of the embedded development broker")
		matListen = fs.String("materializer-listen", defaultMaterializerListen, "listen address of the materializer's HTTP port")
		sinks = fs.String("sinks", defaultSinks, "the materializer's sinks: postgres, kafka (the trusted topic, T.trusted) or postgres,kafka")
		join = fs.Bool("join", false, "run one more gateway replica beside a running fencegate dev (give it another --listen): "+
			"no broker, no materializer, no reset; it uses the development broker at --kafka-listen and dev's database, and the replicas forward to each other")
	})
	if err := parse(fs, args); err != nil {
		return err
	}
	f.migrate = true
	// Only dev runs on the development file, key and credential: all are
	// public.
	f.dev = true
	if f.barrierKey == "" && f.barrierKeyFile == "" {
		f.barrierKey = devBarrierKey
	}
	if f.replicaCredFile == "" {
		f.replicaCred = devReplicaCredential
	}
	log := newLogger(stderr, f.logJSON)
	if *join {
		if !isSet(fs, "kafka-brokers") {
			f.brokers = *kafkaListen
		}
		return joinDev(ctx, f, log)
	}
	raw, err := f.readConfig()
	if err != nil {
		return err
	}
	fc, _, err := fileconfig.Parse(raw)
	if err != nil {
		return err
	}
	if err := resetDevDatabase(ctx, f.databaseURL, log); err != nil {
		return err
	}
	if isSet(fs, "kafka-brokers") {
		if err := ensureDevTopics(ctx, f.kafkaConn(), fc); err != nil {
			return err
		}
		log.Info("dev on the Kafka of --kafka-brokers, not the embedded broker", "brokers", f.brokers)
	} else {
		cluster, err := startDevBroker(*kafkaListen, fc)
		if err != nil {
			return err
		}
		defer cluster.Close()
		f.brokers = *kafkaListen
		log.Warn("DEVELOPMENT BROKER: kfake from franz-go, in-process, NOT Apache Kafka; for development and tests only",
			"addr", *kafkaListen)
	}
	mf := materializeFlags{commonFlags: f.commonFlags, listen: *matListen, sinks: *sinks}
	mf.migrate = false
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve(gctx, f, log.With("component", "gateway"), nil) })
	g.Go(func() error { return materialize(gctx, mf, log.With("component", "materializer")) })
	return g.Wait()
}

// joinDev runs a second gateway replica of a running `fencegate dev`: its
// own replica name (the default one gets the listen port), dev's broker
// (f.brokers) and database, nothing reset.
func joinDev(ctx context.Context, f serveFlags, log *slog.Logger) error {
	if err := requireDevDatabase(ctx, f.databaseURL); err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(f.listen); err == nil && f.replica == defaultReplica() {
		f.replica += "-" + port
	}
	f.migrate = false
	log.Info("joining fencegate dev as another replica", "replica", f.replica, "kafka", f.brokers)
	return serve(ctx, f, log.With("component", "gateway"), nil)
}

// resetDevDatabase migrates dev's database and clears its ledger and
// recorded route placements, once it is sure dev created that database
// (ensureDevDatabase); any other database is refused untouched.
//
// The development broker starts empty every time; the ledger of an
// earlier run would point at offsets that no longer exist, and its topics
// are made from this config, whatever partitions an earlier run recorded.
func resetDevDatabase(ctx context.Context, url string, log *slog.Logger) error {
	name, err := ensureDevDatabase(ctx, url, log)
	if err != nil {
		return err
	}
	pool, store, err := openStore(ctx, url, true, false, 0, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err = schema.Migrate(ctx, pool); err == nil {
		err = schema.Reset(ctx, pool)
	}
	if err == nil {
		err = store.ForgetPlacements(ctx)
	}
	if err == nil {
		err = store.ForgetRollouts(ctx)
	}
	if err != nil {
		return err
	}
	log.Info("development broker is empty: materializer state, route placements and rollout states cleared "+
		"(fences, ledger, positions, placements, rollout states)", "database", name)
	return nil
}

// isSet reports whether flag name was given, on the command line or in
// its environment variable.
func isSet(fs *cmdFlags, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// ensureDevTopics creates every routed topic on a real Kafka with the
// config's partitions, and refuses one that exists with another count.
func ensureDevTopics(ctx context.Context, conn kafkaconn.Config, fc fileconfig.File) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, r := range fc.Routes {
		if err := conn.CreateTopic(ctx, r.Topic, r.Partitions, nil); err != nil {
			return err
		}
		n, err := conn.TopicPartitions(ctx, r.Topic)
		if err != nil {
			return err
		}
		if n != r.Partitions {
			return fmt.Errorf("topic %s on %s has %d partitions, the development config's route %q %d", r.Topic, conn, n, r.Pattern, r.Partitions)
		}
	}
	return nil
}

// startDevBroker starts kfake on addr with every routed topic created.
func startDevBroker(addr string, fc fileconfig.File) (*kfake.Cluster, error) {
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
