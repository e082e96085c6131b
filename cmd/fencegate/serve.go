package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// serveFlags are the settings of a gateway process.
type serveFlags struct {
	commonFlags
	listen     string
	advertise  string
	replica    string
	minTTL     time.Duration
	maxTTL     time.Duration
	txnTimeout time.Duration
	limits     gateway.Limits
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	f.commonFlags.register(fs, "gateway")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&f.replica, "replica", "gateway-"+host, "name of this replica in lease rows")
	fs.StringVar(&f.advertise, "advertise-url", "", "URL other replicas send this replica's clients to (default: http://<listen>)")
	fs.DurationVar(&f.minTTL, "min-ttl", 100*time.Millisecond, "shortest lease TTL accepted")
	fs.DurationVar(&f.maxTTL, "max-ttl", 10*time.Minute, "longest lease TTL accepted")
	fs.DurationVar(&f.txnTimeout, "transaction-timeout", 10*time.Second, "transaction.timeout.ms of producers; keep below the TTLs in use")
	fs.IntVar(&f.limits.MaxRecords, "max-records", 10000, "records per batch (413 beyond)")
	fs.IntVar(&f.limits.MaxRecordBytes, "max-record-bytes", 1<<20, "key + value + headers of one record (413 beyond)")
	fs.IntVar(&f.limits.MaxRequestBytes, "max-request-bytes", 16<<20, "bytes of one request body (413 beyond)")
}

func newLogger(w io.Writer, asJSON bool) *slog.Logger {
	if asJSON {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := flagSet("serve", stderr)
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	return serve(ctx, f, newLogger(stderr, f.logJSON), nil)
}

// serve runs a gateway until ctx ends. ready, when not nil, receives the
// listen address once the server accepts connections.
func serve(ctx context.Context, f serveFlags, log *slog.Logger, ready chan<- string) error {
	_, router, auth, err := gateway.LoadFileConfig(f.configPath)
	if err != nil {
		return err
	}
	pool, store, err := openStore(ctx, f.databaseURL, f.migrate, f.minTTL, f.maxTTL)
	if err != nil {
		return err
	}
	defer pool.Close()
	mp, metricsHandler, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Gateway, Instance: f.replica})
	if err != nil {
		return err
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tp, stopTracing, err := telemetry.Tracing(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing(context.Background()) }()
	if f.advertise == "" {
		f.advertise = "http://" + f.listen
	}
	g, err := gateway.New(store, router, gateway.Config{
		MeterProvider: mp, TracerProvider: tp,
		Replica: f.replica, AdvertiseURL: f.advertise,
		Kafka: gateway.KafkaConfig{Brokers: f.brokers, SASLMechanism: f.saslMech, SASLUser: f.saslUser,
			SASLPassword: f.saslPassword, TransactionTimeoutMS: int(f.txnTimeout.Milliseconds())},
		BarrierKey: []byte(f.barrierKey),
		Limits:     f.limits,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	defer g.Close()
	srv := gateway.NewServer(g, auth)
	srv.Metrics(metricsHandler)
	return listenAndServe(ctx, f.listen, srv, log, ready)
}

func openStore(ctx context.Context, url string, migrate bool, minTTL, maxTTL time.Duration) (*pgxpool.Pool, *leasestore.Store, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default (4 on two cores) queues handovers behind each
		// other until their budgets expire.
		pc.MaxConns = 32
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	if migrate {
		if _, err := leasestore.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, err
		}
	}
	store, err := leasestore.New(pool, leasestore.Config{MinTTL: minTTL, MaxTTL: maxTTL, ValidateName: txnmap.ValidateName})
	if err == nil {
		err = store.Verify(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, store, nil
}

func listenAndServe(ctx context.Context, addr string, h http.Handler, log *slog.Logger, ready chan<- string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("gateway listening", "addr", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("gateway stopped")
	return nil
}
