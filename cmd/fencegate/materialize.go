package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/materializer"
)

type materializeFlags struct {
	listen       string
	databaseURL  string
	brokers      string
	saslMech     string
	saslUser     string
	saslPassword string
	configPath   string
	barrierKey   string
	migrate      bool
	logJSON      bool
}

func (f *materializeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8081", "HTTP listen address (health, readiness, status)")
	fs.StringVar(&f.databaseURL, "database-url", defaultDatabaseURL, "Postgres URL")
	fs.StringVar(&f.brokers, "kafka-brokers", "127.0.0.1:9092", "Kafka bootstrap servers")
	fs.StringVar(&f.saslMech, "kafka-sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.StringVar(&f.saslUser, "kafka-sasl-user", "", "SASL user of the materializer principal")
	fs.StringVar(&f.saslPassword, "kafka-sasl-password", "", "SASL password")
	fs.StringVar(&f.configPath, "config", "deploy/dev/fencegate.yaml", "routes YAML file (the gateway's)")
	fs.StringVar(&f.barrierKey, "barrier-key", "", "HMAC key of generation barriers (the gateway's; required)")
	fs.BoolVar(&f.migrate, "migrate", false, "apply database migrations at start")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON instead of text")
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
	_, router, _, err := gateway.LoadFileConfig(f.configPath)
	if err != nil {
		return err
	}
	pool, _, err := openStore(ctx, f.databaseURL, f.migrate, 0, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	consumer := map[string]string{}
	if f.saslMech != "" {
		consumer = map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": f.saslMech,
			"sasl.username": f.saslUser, "sasl.password": f.saslPassword}
	}
	mp, metricsHandler, err := telemetry.Prometheus()
	if err != nil {
		return err
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	m, err := materializer.New(pool, router, materializer.Config{Brokers: f.brokers, Consumer: consumer,
		BarrierKey: []byte(f.barrierKey), Logger: log, MeterProvider: mp})
	if err != nil {
		return err
	}
	defer m.Close()
	mux := m.Handler()
	mux.Handle("GET /metrics", metricsHandler)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.Run(gctx) })
	g.Go(func() error {
		return listenAndServe(gctx, f.listen, mux, log.With("component", "materializer"), nil)
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
