package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/brokercheck"
	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/rollout"
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
	http       gateway.ServerConfig
	// drainTimeout bounds the graceful drain on SIGTERM (batches in flight
	// finish, sessions end, the replica leaves the registry).
	drainTimeout time.Duration
	// debugListen serves net/http/pprof when set (off by default; never
	// the API listener: profiles reveal internals and cost CPU).
	debugListen string
	// parkAfter closes the producer of a session idle this long
	// (docs/replicas.md, "Parking idle sessions"; 0 or less: never).
	parkAfter time.Duration
	// maxHandovers bounds handovers in flight; the others wait for a slot
	// before their grant.
	maxHandovers int
	// maxHandoverQueue bounds the acquires waiting for a slot.
	maxHandoverQueue int
	// maxSessions and maxSessionsPerClient bound the live sessions of the
	// replica and of one API client (FM46).
	maxSessions, maxSessionsPerClient int
	// ledgerURL is the ledger's database, read by the checkpoint read
	// (empty: --database-url).
	ledgerURL string
	// replicaCredFile holds the replicas' shared credential: with it, the
	// replica forwards requests to the holder and accepts forwarded ones
	// (gateway.Forwarding). replicaCAFile verifies other replicas' HTTPS.
	replicaCredFile, replicaCAFile string
	// replicaHosts are the host[:port] globs of the fleet's advertise URLs
	// (gateway.Forwarding.Fleet, comma-separated).
	replicaHosts string
	// replicaClientCert and replicaClientKey are presented when
	// forwarding to a replica that requires mutual TLS.
	replicaClientCert, replicaClientKey string
	// replicaCred is the credential itself (dev's built-in one).
	replicaCred string
	// allowUnsafe names the broker settings that break the fence the
	// operator starts on anyway (brokercheck.UnsafeNames).
	allowUnsafe string
}

func (f *serveFlags) register(fs *cmdFlags) {
	fs.settingsOf(func() {
		f.commonFlags.register(fs, "gateway")
		fs.StringVar(&f.listen, "listen", defaultListen, "HTTP listen address")
		fs.StringVar(&f.replica, "replica", defaultReplica(), "name of this replica in lease rows")
		fs.StringVar(&f.advertise, "advertise-url", "", "URL other replicas send this replica's clients to (default: http://<listen>, https://<listen> with --tls-cert; must be https:// with --tls-cert)")
		fs.DurationVar(&f.minTTL, "min-ttl", leasestore.DefaultMinTTL, "shortest lease TTL accepted")
		fs.DurationVar(&f.maxTTL, "max-ttl", leasestore.DefaultMaxTTL, "longest lease TTL accepted")
		registerTxnTimeout(fs, &f.txnTimeout)
		lim := gateway.DefaultLimits()
		fs.IntVar(&f.limits.MaxRecords, "max-records", lim.MaxRecords, "records per batch (413 beyond)")
		fs.IntVar(&f.limits.MaxRecordBytes, "max-record-bytes", lim.MaxRecordBytes, "key + value + headers of one record (413 beyond)")
		fs.IntVar(&f.limits.MaxRequestBytes, "max-request-bytes", lim.MaxRequestBytes, "bytes of one request body (413 beyond)")
		fs.IntVar(&f.limits.MaxHeaders, "max-headers", lim.MaxHeaders, "headers of one record (413 beyond)")
		fs.IntVar(&f.limits.MaxHeaderBytes, "max-header-bytes", lim.MaxHeaderBytes, "names and values of one record's headers (413 beyond)")
		fs.IntVar(&f.limits.MaxCheckpointBytes, "max-checkpoint-bytes", lim.MaxCheckpointBytes, "bytes of a batch's checkpoint after decoding (413 beyond)")
		registerDebugListen(fs, &f.debugListen)
		registerParkAfter(fs, &f.parkAfter)
		fs.StringVar(&f.allowUnsafe, "allow-unsafe-broker", "", "start although the broker has these settings that break the fence, comma-separated: "+
			strings.Join(brokercheck.UnsafeNames(), ", ")+" (each is logged and exported as fencegate.broker.unsafe_allowed; docs/verify-broker.md)")
		fs.IntVar(&f.maxHandovers, "max-handovers", gateway.DefaultMaxConcurrentHandovers, "handovers in flight at once; more acquires wait for a slot before their grant (429 after 30s)")
		fs.IntVar(&f.maxHandoverQueue, "max-handover-queue", 0, "acquires that may wait for a handover slot, shared fairly between clients; more are answered 429 at once, keeping request capacity for renewals and batches (0: 4 x --max-handovers)")
		fs.IntVar(&f.maxSessions, "max-sessions", gateway.DefaultMaxSessions, "live sessions on this replica; an acquire beyond is answered 429 before its grant")
		fs.IntVar(&f.maxSessionsPerClient, "max-sessions-per-client", gateway.DefaultMaxSessionsPerClient, "live sessions of one API client on this replica; an acquire beyond is answered 429 before its grant")
		fs.StringVar(&f.ledgerURL, "ledger-database-url", "", "Postgres URL of the ledger, the --database-url of materialize, read by GET /v1/leases/{name}/checkpoint (empty: --database-url)")
		fs.StringVar(&f.replicaCredFile, "replica-credential-file", "", "file holding the secret all replicas share (at least 32 bytes: openssl rand -hex 32): with it this replica forwards produce, renew and release to the lease's holder and accepts requests other replicas forward; without it, 421 with holder_url")
		fs.StringVar(&f.replicaCAFile, "replica-ca-file", "", "PEM CAs verifying other replicas' https:// advertise URLs when forwarding (default: the system roots)")
		fs.StringVar(&f.replicaHosts, "replica-hosts", "", "comma-separated host[:port] globs of the fleet's advertise URLs: the replica credential is sent only to a holder registered under one of them, and only over https:// when this replica advertises https:// (default: the host of --advertise-url, any port)")
		fs.StringVar(&f.replicaClientCert, "replica-client-cert", "", "PEM client certificate presented when forwarding to replicas that require mutual TLS (default with --tls-client-ca: --tls-cert; it needs the clientAuth extended key usage)")
		fs.StringVar(&f.replicaClientKey, "replica-client-key", "", "PEM key of --replica-client-cert (default with --tls-client-ca: --tls-key)")
		fs.DurationVar(&f.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long batches in flight may take to finish before sessions end anyway (readiness turns 503 at once)")
		d := gateway.DefaultServerConfig()
		fs.StringVar(&f.http.TLSCertFile, "tls-cert", "", "PEM certificate of the HTTPS listener (re-read when the file changes)")
		fs.StringVar(&f.http.TLSKeyFile, "tls-key", "", "PEM key of --tls-cert")
		fs.StringVar(&f.http.TLSClientCAFile, "tls-client-ca", "", "PEM CAs of client certificates: requires mutual TLS; a client's certificate_cn may stand in for its bearer token")
		fs.DurationVar(&f.http.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "time to read a request's headers")
		fs.DurationVar(&f.http.ReadTimeout, "read-timeout", d.ReadTimeout, "time to read a whole request, body included")
		fs.DurationVar(&f.http.WriteTimeout, "write-timeout", d.WriteTimeout, "time from the end of the headers to the end of the reply")
		fs.DurationVar(&f.http.IdleTimeout, "idle-timeout", d.IdleTimeout, "keep-alive connections idle longer are closed")
		fs.IntVar(&f.http.MaxInFlight, "max-inflight", d.MaxInFlight, "API requests served at once (429 beyond)")
		fs.IntVar(&f.http.MaxInFlightPerClient, "max-inflight-per-client", d.MaxInFlightPerClient, "API requests of one client served at once (429 beyond)")
		fs.Int64Var(&f.http.MaxBodyBytesInFlight, "max-body-bytes-in-flight", d.MaxBodyBytesInFlight,
			"bytes of request bodies held at once across all clients, taken for the declared length before a body is read (429 beyond; at least --max-request-bytes)")
	})
}

// defaultReplica is the default --replica: gateway-<hostname>.
func defaultReplica() string {
	host, _ := os.Hostname()
	return "gateway-" + host
}

// gatewayParkAfter is --park-after as gateway.Config.ParkAfter: the flag's
// 0 (never, as operators and the benchmarks write it) is the library's
// ParkNever, since the library's zero takes the default.
func (f *serveFlags) gatewayParkAfter() time.Duration {
	if f.parkAfter <= 0 {
		return gateway.ParkNever
	}
	return f.parkAfter
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
	if err := f.requireConfig("serve"); err != nil {
		return err
	}
	if f.http.MaxBodyBytesInFlight < int64(f.limits.MaxRequestBytes) {
		return usagef("--max-body-bytes-in-flight %d is below --max-request-bytes %d: a largest body would never be admitted",
			f.http.MaxBodyBytesInFlight, f.limits.MaxRequestBytes)
	}
	if f.debugListen != "" {
		if err := checkDebugListen(f.debugListen); err != nil {
			return usagef("%v", err)
		}
	}
	raw, err := f.readConfig()
	if err != nil {
		return err
	}
	fc, router, auth, err := parseGatewayConfig(raw)
	if err != nil {
		return err
	}
	if err := f.refuseDevToken(fc); err != nil {
		return err
	}
	if f.advertise, err = f.http.AdvertiseURL(f.advertise, f.listen); err != nil {
		return err
	}
	// Only the signing key: the gateway writes barriers, never reads them.
	key, _, err := f.barrierKeys(log)
	if err != nil {
		return err
	}
	conn := f.kafkaConn()
	reachable, err := checkKafka(ctx, conn, router, gatewayGrants(conn, router, log), log)
	if err != nil {
		return err
	}
	allowed, err := f.checkBroker(ctx, conn, router, reachable, log)
	if err != nil {
		return err
	}
	pool, store, err := openStore(ctx, f.databaseURL, f.migrate, true, f.minTTL, f.maxTTL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkPlacements(ctx, store, router); err != nil {
		return err
	}
	placements, err := store.PlacementHistory(ctx)
	if err != nil {
		return err
	}
	warmStore(ctx, store, pool, log)
	ledger, err := openPool(ctx, cmp.Or(f.ledgerURL, f.databaseURL), ledgerReadPoolSize)
	if err != nil {
		return err
	}
	defer ledger.Close()
	mp, metricsHandler, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Gateway, Instance: f.replica})
	if err != nil {
		return err
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	if err := exportUnsafeAllowed(mp, allowed); err != nil {
		return err
	}
	tp, stopTracing, err := telemetry.Tracing(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stopTracing(context.Background()) }()
	g, err := gateway.New(store, router, gateway.Config{
		MeterProvider: mp, TracerProvider: tp,
		Replica: f.replica, AdvertiseURL: f.advertise,
		Kafka:      gateway.KafkaConfig{Config: conn, TransactionTimeoutMS: int(f.txnTimeout.Milliseconds())},
		Ledger:     ledger,
		Placements: placements,
		BarrierKey: key,
		Limits:     f.limits,
		ParkAfter:  f.gatewayParkAfter(),
		Logger:     log,

		LeaseMetrics:      f.leaseMetrics,
		LeaseMetricsLimit: f.leaseMetricsLimit,

		MaxConcurrentHandovers: f.maxHandovers,
		MaxHandoverQueue:       f.maxHandoverQueue,
		MaxSessions:            f.maxSessions,
		MaxSessionsPerClient:   f.maxSessionsPerClient,
	})
	if err != nil {
		return err
	}
	defer g.Close()
	if f.debugListen != "" {
		stopDebug, err := serveDebug(f.debugListen, log)
		if err != nil {
			return err
		}
		defer stopDebug()
	}
	srv := gateway.NewServer(g, auth)
	srv.Limit(f.http)
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	if err := srv.Watch(wctx, store, gateway.WatchConfig{WriteTimeout: f.http.WriteTimeout}); err != nil {
		return err
	}
	srv.Metrics(metricsHandler)
	if err := f.forwarding(srv, log); err != nil {
		return err
	}
	signer, err := barrier.NewSigner(key)
	if err != nil {
		return err
	}
	if err := srv.Admin(&rollout.Rollouts{Store: store, Router: router, Signer: signer, Kafka: conn,
		DirectClients: auth.DirectClients()}, fc.Clients); err != nil {
		return err
	}
	drain := func() {
		dctx, cancel := context.WithTimeout(context.Background(), f.drainTimeout)
		defer cancel()
		start := time.Now()
		log.Info("draining", "replica", f.replica, "sessions", g.Sessions(), "watch_streams", srv.DrainStreams())
		if err := g.Drain(dctx); err != nil {
			log.Warn("drain: leaving the replica registry failed; other replicas answer 421 until its heartbeat is stale", "error", err)
		}
		log.Info("drained", "replica", f.replica, "took", time.Since(start))
	}
	return listenAndServe(ctx, f.listen, srv, f.http, log, ready, drain)
}

// forwarding turns on forwarding when the replicas share a credential.
func (f *serveFlags) forwarding(srv *gateway.Server, log *slog.Logger) error {
	cred, err := f.replicaCredential(log)
	if err != nil || cred == nil {
		return err
	}
	fw := gateway.Forwarding{Credential: cred, Fleet: splitList(f.replicaHosts),
		ClientCertFile: f.replicaClientCert, ClientKeyFile: f.replicaClientKey}
	if fw.ClientCertFile == "" && fw.ClientKeyFile == "" && f.http.TLSClientCAFile != "" {
		// The fleet requires mutual TLS of every client, forwarders included.
		fw.ClientCertFile, fw.ClientKeyFile = f.http.TLSCertFile, f.http.TLSKeyFile
	}
	if f.replicaCAFile != "" {
		pem, err := os.ReadFile(f.replicaCAFile)
		if err != nil {
			return fmt.Errorf("--replica-ca-file: %w", err)
		}
		fw.RootCAs = x509.NewCertPool()
		if !fw.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--replica-ca-file %s: no PEM certificate in it", f.replicaCAFile)
		}
	}
	if err := srv.Forward(fw); err != nil {
		return err
	}
	log.Info("forwarding to lease holders", "replica", f.replica, "advertise_url", f.advertise)
	return nil
}

// replicaCredential reads the replicas' shared credential (nil: none, no
// forwarding). Only dev runs on the development credential (FM45).
func (f *serveFlags) replicaCredential(log *slog.Logger) ([]byte, error) {
	cred := f.replicaCred
	if f.replicaCredFile != "" {
		b, err := os.ReadFile(f.replicaCredFile)
		if err != nil {
			return nil, fmt.Errorf("replica credential file: %w", err)
		}
		warnReadable(f.replicaCredFile, "replica credential file", "forward requests as any client", log)
		cred = strings.TrimSpace(string(b))
	}
	switch {
	case cred == "":
		return nil, nil
	case cred == devReplicaCredential && !f.dev:
		return nil, errors.New("the replica credential is the development one, public in the source; only `fencegate dev` runs on it: " +
			"make one with `openssl rand -hex 32` (docs/security.md)")
	case strings.HasPrefix(strings.ToUpper(cred), placeholderPrefix):
		return nil, errors.New("the replica credential is a placeholder of the deployment examples (REPLACE-...): make one with `openssl rand -hex 32`")
	}
	return []byte(cred), nil
}

// refuseDevToken refuses, outside `fencegate dev`, a config with a client
// that accepts the development bearer token: its hash is in
// deploy/dev/fencegate.yaml and the token in the README (FM45).
func (f *serveFlags) refuseDevToken(fc fileconfig.File) error {
	if f.dev {
		return nil
	}
	dev := gateway.HashToken(devToken)
	for _, c := range fc.Clients {
		if strings.EqualFold(c.TokenSHA256, dev) {
			return fmt.Errorf("config %s: client %q accepts the development bearer token %q (public: deploy/dev/fencegate.yaml, the README); "+
				"only `fencegate dev` runs on it: give the client a token of its own (docs/security.md)", f.configPath, c.Name, devToken)
		}
	}
	return nil
}

// probeKafka refuses to start on a connection the cluster refuses: a
// certificate that does not verify or a SASL login that fails is a
// configuration error no retry mends. A cluster that is not reachable yet
// is only logged; readiness reports it until it is.
//
// It reports whether the cluster answered.
func probeKafka(ctx context.Context, conn kafkaconn.Config, log *slog.Logger) (bool, error) {
	if err := conn.Validate(); err != nil {
		return false, err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := conn.Probe(pctx)
	switch {
	case errors.Is(err, kafkaconn.ErrHandshake):
		return false, err
	case err != nil:
		log.Warn("kafka not reachable yet; starting, not ready until it is (route partition counts not checked)", "kafka", conn, "error", err)
		return false, nil
	}
	log.Info("kafka reachable", "kafka", conn)
	return true, nil
}

// leaseStorePoolSize is the lease store's pool size unless the URL sets
// pool_max_conns: pgxpool's default (4 on two cores) queues handovers
// behind each other until their budgets expire.
const leaseStorePoolSize = 32

// ledgerReadPoolSize is the pool of the checkpoint read's ledger queries,
// unless the URL sets pool_max_conns: one short query per poll.
const ledgerReadPoolSize = 2

// openStore opens the lease store's pool, migrates when asked and verifies
// the token sequence. keepWarm (the gateway) keeps every connection of the
// pool open (unless the URL sets pool_min_conns) with the worker-path
// statements prepared on it: see warmStore.
func openStore(ctx context.Context, url string, migrate, keepWarm bool, minTTL, maxTTL time.Duration) (*pgxpool.Pool, *leasestore.Store, error) {
	pool, err := openPool(ctx, url, leaseStorePoolSize, func(c *pgxpool.Config) {
		c.AfterConnect = leasestore.PrepareConn
		if keepWarm && !strings.Contains(url, "pool_min_conns") {
			c.MinConns = c.MaxConns
		}
	})
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

// warmStore opens the pool's connections before the first request, each
// with the worker-path statements prepared (those opened before the
// migrations ran have none). Without it, the first renewal wave after a
// cold start (every lease renews at once) opened connections and planned
// statements under load: 0.3-1.5 s per renewal (BENCHMARKS-history.md,
// "Renewals: the first wave after a cold start"). A failure only costs
// that latency, so it is logged and the gateway starts.
func warmStore(ctx context.Context, store *leasestore.Store, pool *pgxpool.Pool, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := store.Warm(ctx, int(pool.Config().MaxConns)); err != nil {
		log.Warn("lease store pool not warmed; the first requests open their connections", "err", err)
	}
}

// listenAndServe serves h until ctx ends (SIGTERM), then runs drain (when
// not nil) while the listener still answers, so that workers hear
// not_holder and draining rather than a refused connection, and shuts
// down.
func listenAndServe(ctx context.Context, addr string, h http.Handler, cfg gateway.ServerConfig, log *slog.Logger, ready chan<- string, drain func()) error {
	srv, err := cfg.HTTPServer(h, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	scheme := "http"
	if srv.TLSConfig != nil {
		scheme = "https"
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	log.Info("listening", "addr", ln.Addr().String(), "scheme", scheme, "mutual_tls", cfg.TLSClientCAFile != "")
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if drain != nil {
		drain()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped", "addr", ln.Addr().String())
	return nil
}

// openPool connects a pool of at most size connections to url, unless the
// URL sets pool_max_conns itself.
func openPool(ctx context.Context, url string, size int32, tune ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = size
	}
	for _, t := range tune {
		t(cfg)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// parseGatewayConfig parses the config file and validates its clients too
// (fileconfig checks only the routes): a gateway refuses a file whose
// clients could be read two ways (FM44).
func parseGatewayConfig(raw []byte) (fileconfig.File, *txnmap.Router, *gateway.Authenticator, error) {
	fc, router, err := fileconfig.Parse(raw)
	if err != nil {
		return fc, nil, nil, err
	}
	// A config with nothing in it is a wrong file, not a gateway that
	// refuses everything (FM92).
	if len(fc.Routes) == 0 || len(fc.Clients) == 0 {
		return fc, nil, nil, fmt.Errorf("config: %d routes and %d clients: a gateway needs at least one of each (is this the routes and clients file?)",
			len(fc.Routes), len(fc.Clients))
	}
	auth, err := gateway.NewAuthenticator(fc.Clients)
	if err != nil {
		return fc, nil, nil, fmt.Errorf("config: %w", err)
	}
	return fc, router, auth, nil
}

// splitList reads a comma-separated flag: its non-empty items, trimmed.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
