package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/materializer/schema"
)

type materializeFlags struct {
	commonFlags
	ledger      ledgerFlags
	listen      string
	partitions  string
	sinks       string
	trustedName string
	dedupWindow int
	instanceID  string
	// noMirror: with the kafka sink alone, keep no fences and checkpoints
	// in the ledger database (and need none).
	noMirror bool
	// debugListen serves net/http/pprof when set (off by default; never
	// beyond loopback): a stalled sink's goroutines, seen where they wait.
	debugListen string
}

func (f *materializeFlags) register(fs *cmdFlags) {
	f.commonFlags.register(fs, "materializer")
	fs.settingsOf(func() {
		fs.StringVar(&f.listen, "listen", defaultMaterializerListen, "HTTP listen address (health, readiness, status, metrics)")
		fs.StringVar(&f.partitions, "partitions", "", "apply only these partitions to the postgres sink, e.g. 0-7,12 (empty: all; the kafka sink shares partitions through its consumer group)")
		fs.StringVar(&f.sinks, "sinks", defaultSinks, "where the trusted output goes: postgres (the ledger), kafka (the trusted topic, docs/design.md) or postgres,kafka")
		fs.StringVar(&f.trustedName, "trusted-name", materializer.DefaultTrustedName, "the kafka sink's name: its topics T.NAME, T.NAME.receipts, T.NAME.state and group fencegate-NAME")
		fs.IntVar(&f.dedupWindow, "dedup-window", materializer.DefaultDedupWindow, "the kafka sink's dedup window: batches remembered per lease and partition")
		fs.BoolVar(&f.noMirror, "no-checkpoint-mirror", false, "with --sinks kafka alone: keep no fences and checkpoints in the ledger database for checkpoint reads, and need no database")
		registerDebugListen(fs, &f.debugListen)
		fs.StringVar(&f.instanceID, "trusted-instance-id", "", "the kafka sink's group.instance.id: a stable name per instance (the pod's, the host's), so a restarted instance takes its partitions back at once (empty: a dynamic member, whose partitions wait for the session timeout)")
	})
	f.ledger.register(fs)
}

func runMaterialize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f materializeFlags
	fs := flagSet("materialize", stderr)
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	return materialize(ctx, f, newLogger(stderr, f.logJSON))
}

// materialize runs the materializer and its HTTP port until ctx ends.
func materialize(ctx context.Context, f materializeFlags, log *slog.Logger) error {
	if err := f.requireConfig("materialize"); err != nil {
		return err
	}
	stopDebug, err := startDebug(f.debugListen, log)
	if err != nil {
		return err
	}
	defer stopDebug()
	raw, err := f.readConfig()
	if err != nil {
		return err
	}
	_, router, err := fileconfig.Parse(raw)
	if err != nil {
		return err
	}
	key, previous, err := f.barrierKeys(log)
	if err != nil {
		return err
	}
	conn := f.kafkaConn()
	if _, err := checkKafka(ctx, conn, router, nil, log); err != nil {
		return err
	}
	postgres, kafkaSink, err := parseSinks(f.sinks)
	if err != nil {
		return err
	}
	var pool, mirror *pgxpool.Pool
	if postgres || !f.noMirror {
		if pool, err = openLedger(ctx, f.databaseURL, f.migrate); err != nil {
			return err
		}
		defer pool.Close()
	}
	if !postgres {
		// The kafka sink alone: the database holds only the mirror of its
		// fences and checkpoints, and the materializer no ledger.
		pool, mirror = nil, pool
	}
	parts, err := parsePartitions(f.partitions)
	if err != nil {
		return err
	}
	var values materializer.LedgerValues
	if postgres {
		if values, err = f.ledger.record(ctx, pool); err != nil {
			return err
		}
	}
	mp, metricsHandler, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Materializer})
	if err != nil {
		return err
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	m, err := materializer.New(pool, router, materializer.Config{Kafka: conn,
		BarrierKey: key, PreviousBarrierKeys: previous, Logger: log, MeterProvider: mp, Partitions: parts,
		LeaseMetrics: f.leaseMetrics, LeaseMetricsLimit: f.leaseMetricsLimit, LedgerValues: values})
	if err != nil {
		return err
	}
	defer m.Close()
	mux := m.Handler()
	mux.Handle("GET /metrics", metricsHandler)
	g, gctx := errgroup.WithContext(ctx)
	if postgres {
		g.Go(func() error { return m.Run(gctx) })
		f.ledger.prune(gctx, g, m)
	}
	if kafkaSink {
		ts, err := m.Trusted(materializer.TrustedConfig{Name: f.trustedName, DedupWindow: f.dedupWindow,
			InstanceID: f.instanceID, Mirror: mirror})
		if err != nil {
			return err
		}
		if err := checkSinkTopics(router.Routes(), ts.Topics); err != nil {
			return err
		}
		g.Go(func() error { return ts.Run(gctx) })
	}
	g.Go(func() error {
		return listenAndServe(gctx, f.listen, mux, gateway.ServerConfig{}, log, nil, nil)
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// defaultSinks is --sinks' default: the Postgres ledger, as before the
// trusted topic.
const defaultSinks = "postgres"

// parseSinks reads --sinks: postgres, kafka or both, comma-separated
// (empty: defaultSinks).
func parseSinks(spec string) (postgres, kafka bool, err error) {
	if spec == "" {
		spec = defaultSinks
	}
	for _, s := range strings.Split(spec, ",") {
		switch strings.TrimSpace(s) {
		case "postgres":
			postgres = true
		case "kafka":
			kafka = true
		default:
			return false, false, fmt.Errorf("--sinks: %q is not postgres or kafka", s)
		}
	}
	return postgres, kafka, nil
}

// parsePartitions reads "0-7,12" into partition numbers.
func parsePartitions(spec string) ([]int32, error) {
	var out []int32
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(lo, 10, 32)
		b := a
		if err == nil && isRange {
			b, err = strconv.ParseInt(hi, 10, 32)
		}
		if err != nil || a < 0 || b < a || b-a > 100000 {
			return nil, fmt.Errorf("--partitions: bad range %q", part)
		}
		for p := a; p <= b; p++ {
			out = append(out, int32(p))
		}
	}
	return out, nil
}

// openLedger connects to the ledger's database and, when asked, applies
// the ledger's migration line (the materializer needs no lease table).
//
// The pool holds one connection per partition transaction that may run at
// once, plus one for readiness checks (pgxpool's default is 4 on a
// two-core machine: the checks queued behind the transactions).
func openLedger(ctx context.Context, url string, migrate bool) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, url, materializer.DefaultParallel+1)
	if err != nil {
		return nil, err
	}
	if migrate {
		if _, err := schema.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return pool, nil
}
