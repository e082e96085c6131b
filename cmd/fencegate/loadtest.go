package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

func runLoadtest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("loadtest", stderr)
	sc := loadtest.Defaults()
	embedded := fs.Bool("embedded", false, "start the whole stack in-process (project Postgres, kfake, gateway, materializer)")
	child := fs.Bool("gateway-child", false, "with --embedded: run the gateway as a child process (needed by --kill-gateway-after)")
	replicas := fs.Int("replicas", 1, "with --embedded: gateway replicas; more than 1 runs each as a child process (--freeze-replica-every needs 2)")
	balancer := fs.String("balancer", "", "with --embedded --replicas 2 or more: a load balancer in front of the replicas, \"haproxy\" (Debian's; deploy/dev/haproxy.sh install); the workers are then SDK workers whose base URL is the balancer, and the worker faults (--freeze-every, --churn-every) are off")
	var sep stack.SeparateOptions
	separate := fs.Bool("separate-processes", false, "with --embedded: run the broker, the gateway (--replicas N: N of them), the materializer and each baseline as child processes, and report each one's CPU and memory")
	materializer := fs.Bool("materializer", true, "with --separate-processes: run the materializer child (false: none, and the ledger is not checked; for runs that measure the gateways)")
	fs.StringVar(&sep.GatewayDebugListen, "gateway-debug-listen", "", "with --separate-processes: the gateway child's --debug-listen (pprof), e.g. 127.0.0.1:6060")
	fs.BoolVar(&sep.PauseMaterializer, "pause-materializer", false, "with --separate-processes: stop the materializer (SIGSTOP) during the gateway phase, as it is during the direct baseline; the ledger is checked after it caught up")
	fs.IntVar(&sep.BareHandovers, "bare-handovers", 0, "with --separate-processes: loops at once of the handover yardstick (new producer, InitTransactions, one-record transaction) run after the gateway phase (0: none; the gateway's --max-handovers is 16)")
	fs.StringVar(&sep.Brokers, "separate-brokers", "", "with --separate-processes: an external Kafka cluster (Apache Kafka: deploy/dev/kafka.sh start, 127.0.0.1:9192) instead of the kfake broker child; the harness creates its topics there and keeps existing ones (delete them before the run: deploy/bench/apache.sh does)")
	fs.IntVar(&sep.BrokerPID, "separate-broker-pid", 0, "with --separate-brokers: the broker's pid, whose CPU the report gives per phase like a child's (kafka.sh pids)")
	fs.BoolVar(&sep.KafkaCluster, "kafka-cluster", false, "with --embedded: start a three-node Apache Kafka cluster of the harness's own (deploy/dev/kafka.sh cluster in a directory of its own, every node behind a fault proxy) and run the stack on it as --separate-processes does (implied), for --broker-fault-every")
	fs.IntVar(&sep.BareProducers, "bare-producers", 8, "with --separate-processes: producers of the bare-producer yardstick run after the direct baseline (0: none)")
	fs.Func("gateway-arg", "with --separate-processes: one more serve `FLAG` for the gateway child, after the harness's own (a later flag wins), e.g. --gateway-arg=--park-after=0; repeatable", func(v string) error {
		sep.GatewayArgs = append(sep.GatewayArgs, v)
		return nil
	})
	clients := fs.Int("clients", 1, "with --embedded: API clients registered with the harness's gateways, each with a bearer token of its own; workers are spread over them round-robin (the gateway caps requests in flight per client)")
	lifted := gateway.ServerConfig{MaxInFlight: 1 << 16, MaxInFlightPerClient: 1 << 16}
	var caps gateway.ServerConfig
	fs.IntVar(&caps.MaxInFlight, "gateway-max-inflight", lifted.MaxInFlight, "with --embedded: the harness's gateways' --max-inflight (default lifted; serve's default is 1024)")
	fs.IntVar(&caps.MaxInFlightPerClient, "gateway-max-inflight-per-client", lifted.MaxInFlightPerClient, "with --embedded: the harness's gateways' --max-inflight-per-client (default lifted; serve's default is 256)")
	gw := fs.String("gateway", "", "gateway URL (without --embedded)")
	brokers := fs.String("kafka-brokers", defaultKafkaBrokers, "Kafka bootstrap servers of that gateway")
	var kf commonFlags
	kf.registerKafka(fs, "harness")
	dbURL := fs.String("database-url", defaultDatabaseURL, "Postgres: the server for --embedded, the gateway's database otherwise")
	cfgPath := fs.String("config", "deploy/dev/fencegate.yaml", "the gateway's routes file (without --embedded)")
	token := new(string)
	*token = devToken
	secretVar(fs, token, "token", "workers' bearer token (without --embedded; default dev-token, the development token)")
	scenario := fs.String("scenario", "", "YAML scenario file (replaces the scenario flags)")
	jsonOut := fs.String("json", "", "write the JSON report here")
	htmlOut := fs.String("html", "", "write the HTML report here")
	fs.IntVar(&sc.Leases, "leases", sc.Leases, "number of leases")
	fs.IntVar(&sc.WorkersPerLease, "workers-per-lease", sc.WorkersPerLease, "contending workers per lease")
	fs.IntVar(&sc.BatchSize, "batch-size", sc.BatchSize, "records per batch")
	fs.IntVar(&sc.RecordSize, "record-size", sc.RecordSize, "bytes per record")
	fs.Float64Var(&sc.Rate, "rate", sc.Rate, "target batches/s per lease (0: open loop)")
	fs.DurationVar(&sc.BatchEvery, "batch-every", sc.BatchEvery, "pace each worker at one batch every this long (the rate as an interval; 0: --rate decides)")
	fs.BoolVar(&sc.ColdStart, "cold-start", sc.ColdStart, "end the gateway phase once every lease has had its first batch acknowledged (--duration bounds it): a cold start of all leases at once, timed, with its handovers per second and their CPU")
	fs.DurationVar(&sc.Duration, "duration", sc.Duration, "gateway phase duration (each baseline runs half of it)")
	fs.DurationVar(&sc.TTL, "ttl", sc.TTL, "lease TTL")
	fs.DurationVar(&sc.RenewEvery, "renew-every", 0, "renew interval (default TTL/3)")
	fs.DurationVar(&sc.FreezeEvery, "freeze-every", sc.FreezeEvery, "freeze a holder this often (0: off)")
	fs.DurationVar(&sc.ChurnEvery, "churn-every", sc.ChurnEvery, "force a handover this often (0: off)")
	fs.DurationVar(&sc.AmbiguityEvery, "ambiguity-every", 0, "hold an EndTxn past the commit timeout this often (embedded; 0: off)")
	fs.DurationVar(&sc.KillGatewayAfter, "kill-gateway-after", 0, "kill -9 the gateway child this long into the run, then restart it (0: off)")
	fs.DurationVar(&sc.FreezeReplicaEvery, "freeze-replica-every", 0, "SIGSTOP one gateway replica this often, mid-batch, while its leases move to another (embedded; starts 2 replicas; 0: off)")
	fs.DurationVar(&sc.ReplicaPause, "replica-pause", 0, "how long a frozen replica stays stopped (default 3 x TTL)")
	fs.DurationVar(&sc.DrainReplicaAfter, "drain-replica-after", 0, "SIGTERM the first gateway replica this long into the run, wait for its drain, restart it (embedded; starts 2 replicas; 0: off)")
	fs.DurationVar(&sc.KillReplicaEvery, "kill-replica-every", 0, "SIGKILL one gateway replica in turn this often, under load, and restart it at once on the same port and replica name (embedded; starts 2 replicas; 0: off)")
	fs.DurationVar(&sc.KillMaterializerEvery, "kill-materializer-every", 0, "SIGKILL the materializer child this often, mid-chunk when busy, and restart it at once (--separate-processes; 0: off)")
	ledgerValues := fs.String("ledger-values", string(defaultLedgerValues), "the materializer's --ledger-values: keep, or drop (metadata-only rows; --stateful reads the values back from the raw topic by digest)")
	fs.DurationVar(&sc.TrustedRebalanceEvery, "trusted-rebalance-every", 0, "with --trusted and --separate-processes: start a second trusted sink instance in the sink's group this often, or stop the one running, so partitions move between two instances under load (0: off)")
	trusted := fs.Bool("trusted", false, "the materializer also writes the trusted topic (--sinks postgres,kafka), and the run checks it as it checks the ledger")
	fs.BoolVar(&sc.RollingRestart, "rolling-restart", false, "a quarter into the run, restart every gateway replica in turn: SIGTERM, drain and exit, restart, ready (and back in the balancer's rotation), next (embedded; starts 2 replicas)")
	fs.StringVar(&sc.Body, "body", sc.Body, "batch body workers send: binary (as the SDK) or json (as curl)")
	fs.BoolVar(&sc.MixedFleet, "mixed-fleet", false, "with --embedded (in-process gateway): run direct workers (old binaries: leases through the API, their own producer; one frozen past its TTL) beside the gateway workers on shard:*, walk the rollout observe -> gated -> enforced through the admin API, then apply the ACL plan; the faults and baselines are off")
	fs.DurationVar(&sc.StateDuration, "state-duration", 0, "with --mixed-fleet: time in each rollout state (default duration/3)")
	fs.IntVar(&sc.DirectWorkers, "direct-workers", 0, "with --mixed-fleet: direct workers, one lease each (default 2)")
	fs.BoolVar(&sc.Stateful, "stateful", false, "stateful workers: each lease processes items 0, 1, ... resuming from its checkpoint after every new generation (each batch carries items i..j and the checkpoint j+1); checks I6 (each item once, in order, in the ledger) and runs the naive baseline stateful (its resume point apart from its writes)")
	fs.StringVar(&sc.NetFault, "net-fault", "", "with --embedded (in-process gateway): apply a network fault through fault proxies on the stack's links, one of "+strings.Join(loadtest.NetFaultKinds, ", ")+" (off when empty)")
	fs.StringVar(&sc.NetFaultLink, "net-fault-link", "all", "the links --net-fault cuts: broker (every client's broker connections), postgres (the gateway's and materializer's), or all")
	fs.DurationVar(&sc.NetFaultEvery, "net-fault-every", 0, "how often --net-fault applies its fault (default 5 x --net-fault-for)")
	fs.DurationVar(&sc.NetFaultFor, "net-fault-for", loadtest.DefaultNetFaultFor, "how long each --net-fault lasts")
	fs.DurationVar(&sc.BrokerFaultEvery, "broker-fault-every", 0, "with --kafka-cluster: strike the broker faults ("+strings.Join(loadtest.BrokerFaultKinds(), ", ")+") in turn, one at a time, each this long after the last was judged (the cluster whole again, then every lease served within one TTL); 0: off")
	fs.IntVar(&sc.BrokerFaultRounds, "broker-fault-rounds", 0, "with --broker-fault-every: end the gateway phase after this many rounds of the broker faults (--duration bounds it; 0: the duration decides)")
	fs.Func("broker-faults", "with --broker-fault-every: the `KINDS` that strike, comma-separated (default all: "+strings.Join(loadtest.BrokerFaultKinds(), ",")+")", func(v string) error {
		sc.BrokerFaults = strings.Split(v, ",")
		return nil
	})
	fs.BoolVar(&sc.Direct, "direct", sc.Direct, "run the direct baseline")
	fs.BoolVar(&sc.Naive, "naive", sc.Naive, "run the naive baseline")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *scenario != "" {
		var err error
		if sc, err = loadtest.LoadScenario(*scenario); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if sep.KafkaCluster {
		if !*embedded || sep.Brokers != "" {
			return errors.New("--kafka-cluster needs --embedded (and no --separate-brokers: it starts its own)")
		}
		*separate = true
	}
	// The replica faults start the replicas they need.
	*replicas = max(*replicas, sc.Replicas())
	kf.brokers = *brokers
	if !*embedded && (*clients != 1 || caps != lifted) {
		return errors.New("--clients and --gateway-max-inflight* need --embedded: the harness registers the clients with the gateways it starts")
	}
	if len(sep.GatewayArgs) > 0 && !*separate {
		return errors.New("--gateway-arg needs --separate-processes")
	}
	sep.NoMaterializer = !*materializer
	if sep.NoMaterializer && (!*separate || sep.PauseMaterializer || sc.Stateful) {
		return errors.New("--materializer=false needs --separate-processes, and no --pause-materializer or --stateful")
	}
	stackOpts := []stack.StackOption{stack.WithClients(*clients), stack.WithLimits(caps)}
	if sc.KillMaterializerEvery > 0 && (!*separate || sep.NoMaterializer) {
		return errors.New("--kill-materializer-every needs --separate-processes with the materializer")
	}
	if opt, err := ledgerValuesOption(*ledgerValues, sep.NoMaterializer); err != nil {
		return err
	} else if opt != nil {
		stackOpts = append(stackOpts, opt)
	}
	if *trusted {
		if sep.NoMaterializer || sc.MixedFleet {
			return errors.New("--trusted needs the materializer and no --mixed-fleet")
		}
		stackOpts = append(stackOpts, stack.WithTrusted())
	}
	if sc.TrustedRebalanceEvery > 0 && (!*trusted || !*separate) {
		return errors.New("--trusted-rebalance-every needs --trusted and --separate-processes")
	}
	if *balancer != "" {
		if !*embedded || *replicas < 2 || *separate || sc.MixedFleet {
			return errors.New("--balancer needs --embedded and --replicas 2 or more (no --separate-processes or --mixed-fleet)")
		}
		if *scenario == "" {
			workerFaultsOff(fs.FlagSet, &sc)
		}
		stackOpts = append(stackOpts, stack.WithBalancer(*balancer))
	}
	if sc.NetFault != "" {
		if !*embedded || *child || *replicas > 1 || *separate {
			return errors.New("--net-fault needs --embedded with the in-process gateway (no --gateway-child, --replicas or --separate-processes)")
		}
	}
	if sc.MixedFleet {
		if !*embedded || *child || *replicas > 1 || *separate {
			return errors.New("--mixed-fleet needs --embedded with the in-process gateway (no --gateway-child, --replicas, replica faults or --separate-processes)")
		}
	}
	// What the scenario's table entries need of the stack (the fault
	// proxies of --net-fault, the SASL users of --mixed-fleet).
	stackOpts = append(stackOpts, sc.StackOptions()...)
	var stk *stack.Stack
	var err error
	if *separate {
		stk, err = openSeparate(ctx, *embedded, *child, *replicas, *dbURL, sep, log, stackOpts)
	} else {
		stk, err = openStack(ctx, *embedded, *child, *replicas, *gw, kf.kafkaConn(), *dbURL, *cfgPath, *token, log, stackOpts)
	}
	if err != nil {
		return err
	}
	defer stk.Close()
	terminal := false
	if f, ok := stderr.(*os.File); ok {
		terminal = term.IsTerminal(int(f.Fd()))
	}
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Progress: stderr, Terminal: terminal, Logger: log,
		Command: append([]string{"fencegate", "loadtest"}, args...)})
	if err != nil {
		if rep != nil {
			// The figures of a run whose checks could not finish: what
			// happened before the error, for the error's reader.
			rep.WriteMarkdown(stdout)
			_ = writeReports(rep, *jsonOut, *htmlOut)
		}
		return err
	}
	rep.WriteMarkdown(stdout)
	if err := writeReports(rep, *jsonOut, *htmlOut); err != nil {
		return err
	}
	if !rep.Pass {
		return errors.New("invariants failed")
	}
	return nil
}

// workerFaultsOff turns off the worker faults that SDK workers (behind a
// balancer) do not inject, unless the command line asked for them (then
// the run refuses them, saying why).
func workerFaultsOff(fs *flag.FlagSet, sc *loadtest.Scenario) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["freeze-every"] {
		sc.FreezeEvery = 0
	}
	if !set["churn-every"] {
		sc.ChurnEvery = 0
	}
}

func openStack(ctx context.Context, embedded, child bool, replicas int, gw string, conn kafkaconn.Config, dbURL, cfgPath, token string, log *slog.Logger, opts []stack.StackOption) (*stack.Stack, error) {
	if embedded && (child || replicas > 1) {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		return stack.StartEmbeddedReplicas(ctx, dbURL, exe, max(replicas, 1), log, opts...)
	}
	if embedded {
		return stack.StartEmbedded(ctx, dbURL, log, opts...)
	}
	if gw == "" {
		return nil, errors.New("give --embedded or --gateway URL")
	}
	_, router, err := fileconfig.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	if err := conn.Validate(); err != nil {
		return nil, err
	}
	return stack.External(ctx, gw, conn, dbURL, token, router)
}

// openSeparate starts the stack with every component in a child process.
func openSeparate(ctx context.Context, embedded, child bool, replicas int, dbURL string, opts stack.SeparateOptions, log *slog.Logger, stackOpts []stack.StackOption) (*stack.Stack, error) {
	if !embedded || child {
		return nil, errors.New("--separate-processes needs --embedded (and no --gateway-child: the gateways are children already)")
	}
	opts.Replicas = replicas
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return stack.StartSeparateProcesses(ctx, dbURL, exe, opts, log, stackOpts...)
}

func writeReports(rep *report.Report, jsonPath, htmlPath string) error {
	write := func(path string, fn func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := write(jsonPath, rep.WriteJSON); err != nil {
		return fmt.Errorf("json report: %w", err)
	}
	return write(htmlPath, rep.WriteHTML)
}

// ledgerValuesOption is the stack option of --ledger-values v (nil for
// the default).
func ledgerValuesOption(v string, noMaterializer bool) (stack.StackOption, error) {
	values, err := parseLedgerValues(v)
	switch {
	case err != nil:
		return nil, usagef("--ledger-values: %v", err)
	case values == defaultLedgerValues:
		return nil, nil
	case noMaterializer:
		return nil, errors.New("--ledger-values needs the materializer")
	}
	return stack.WithLedgerValues(values), nil
}
